#include "frame.h"

#include <errno.h>
#include <string.h>

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int frame_dec_next(frame_dec_t *d, Hccld__Msg **msg_p)
{
    uint32_t n;
    Hccld__Msg *m;

    if (d->len < FRAME_HDR)
        return 0;
    n = get_le32(d->buf);
    if (n > FRAME_MAX)
        return -EMSGSIZE;
    if (d->len < FRAME_HDR + n)
        return 0;
    m = hccld__msg__unpack(NULL, n, d->buf + FRAME_HDR);
    d->len -= FRAME_HDR + n;
    memmove(d->buf, d->buf + FRAME_HDR + n, d->len);
    if (m == NULL)
        return -EBADMSG;
    *msg_p = m;
    return 1;
}

size_t frame_encode(const Hccld__Msg *m, uint8_t *buf, size_t cap)
{
    size_t n = hccld__msg__get_packed_size(m);

    if (n > FRAME_MAX || n + FRAME_HDR > cap)
        return 0;
    buf[0] = (uint8_t)n;
    buf[1] = (uint8_t)(n >> 8);
    buf[2] = (uint8_t)(n >> 16);
    buf[3] = (uint8_t)(n >> 24);
    hccld__msg__pack(m, buf + FRAME_HDR);
    return n + FRAME_HDR;
}

void frame_msg_free(Hccld__Msg *m)
{
    if (m != NULL)
        hccld__msg__free_unpacked(m, NULL);
}
