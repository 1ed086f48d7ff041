#include "rootinfo.h"

#include <errno.h>
#include <string.h>

#define RI_MAGIC "HCRI"
#define RI_HDR 8u

int rootinfo_pack(const Hccld__RootInfo *ri, HcclRootInfo *out)
{
    size_t n = hccld__root_info__get_packed_size(ri);
    uint8_t *p = (uint8_t *)out->internal;

    if (n > sizeof(out->internal) - RI_HDR)
        return -EMSGSIZE;
    memset(out, 0, sizeof(*out));
    memcpy(p, RI_MAGIC, 4);
    p[4] = (uint8_t)n;
    p[5] = (uint8_t)(n >> 8);
    p[6] = p[7] = 0;
    hccld__root_info__pack(ri, p + RI_HDR);
    return 0;
}

static size_t body_len(const HcclRootInfo *in)
{
    const uint8_t *p = (const uint8_t *)in->internal;
    size_t n;

    if (memcmp(p, RI_MAGIC, 4) != 0 || p[6] != 0 || p[7] != 0)
        return SIZE_MAX;
    n = (size_t)p[4] | (size_t)p[5] << 8;
    return n > sizeof(in->internal) - RI_HDR ? SIZE_MAX : n;
}

size_t rootinfo_packed_len(const HcclRootInfo *in)
{
    size_t n = body_len(in);

    return n == SIZE_MAX ? 0 : n + RI_HDR;
}

Hccld__RootInfo *rootinfo_unpack(const HcclRootInfo *in)
{
    size_t n = body_len(in);
    Hccld__RootInfo *ri;

    if (n == SIZE_MAX)
        return NULL;
    ri = hccld__root_info__unpack(NULL, n, (const uint8_t *)in->internal + RI_HDR);
    if (ri == NULL)
        return NULL;
    if (ri->job_id.len != ROOTINFO_ID_BYTES || ri->job_key.len != ROOTINFO_KEY_BYTES) {
        hccld__root_info__free_unpacked(ri, NULL);
        return NULL;
    }
    return ri;
}
