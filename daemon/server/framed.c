/* Frames over libuv streams, shared by client sessions and peer daemons. */
#include <errno.h>
#include <stdlib.h>

#include "server/server.h"

typedef struct framed_write {
    uv_write_t req;
    uv_buf_t buf;
} framed_write_t;

static void on_written(uv_write_t *req, int status)
{
    framed_write_t *w = (framed_write_t *)req;

    free(w->buf.base);
    free(w);
}

int framed_send(uv_stream_t *stream, const Hccld__Msg *m)
{
    /* Exactly the frame's size: a queue of small messages for a slow reader must hold what
     * libuv counts as queued (uv_stream_get_write_queue_size), not FRAME_MAX for each. */
    size_t cap = FRAME_HDR + hccld__msg__get_packed_size(m);
    framed_write_t *w;

    if (cap > FRAME_HDR + FRAME_MAX)
        return -EMSGSIZE;
    w = malloc(sizeof(*w));
    if (w == NULL || (w->buf.base = malloc(cap)) == NULL) {
        free(w);
        return -ENOMEM;
    }
    w->buf.len = frame_encode(m, (uint8_t *)w->buf.base, cap);
    if (w->buf.len == 0 || uv_write(&w->req, stream, &w->buf, 1, on_written) != 0) {
        free(w->buf.base);
        free(w);
        return -EIO;
    }
    return 0;
}

void framed_alloc(frame_dec_t *dec, uv_buf_t *buf)
{
    uint8_t *p;
    size_t n;

    frame_dec_space(dec, &p, &n);
    buf->base = (char *)p;
    buf->len = n;
}
