/*
 * Frames on every stream socket: a 4-byte little-endian length, then one serialized
 * hccld.Msg of at most FRAME_MAX bytes. The decoder is incremental and refuses a frame whose
 * announced length is too large before reading it.
 */
#ifndef HCCLD_COMMON_FRAME_H
#define HCCLD_COMMON_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "hccld.pb-c.h"

#define FRAME_HDR 4u
#define FRAME_MAX (64u * 1024u)
#define PROTO_VERSION 2u

typedef struct frame_dec {
    uint8_t buf[2 * (FRAME_HDR + FRAME_MAX)];
    size_t len;
} frame_dec_t;

static inline void frame_dec_init(frame_dec_t *d)
{
    d->len = 0;
}

/* Where the next bytes read from the socket go, and how many fit. */
static inline void frame_dec_space(frame_dec_t *d, uint8_t **ptr_p, size_t *n_p)
{
    *ptr_p = d->buf + d->len;
    *n_p = sizeof(d->buf) - d->len;
}

/* How many more bytes the frame at the front needs (its header first): a reader that asks for
 * no more never takes bytes, nor descriptors, of the frame after it. */
static inline size_t frame_dec_want(const frame_dec_t *d)
{
    uint32_t n;

    if (d->len < FRAME_HDR)
        return FRAME_HDR - d->len;
    n = (uint32_t)d->buf[0] | (uint32_t)d->buf[1] << 8 | (uint32_t)d->buf[2] << 16 |
        (uint32_t)d->buf[3] << 24;
    return n <= FRAME_MAX && d->len < FRAME_HDR + n ? FRAME_HDR + n - d->len : 1;
}

/* Records that n bytes were read into the space. */
static inline void frame_dec_commit(frame_dec_t *d, size_t n)
{
    d->len += n;
}

/* 1 and a message (free it with frame_msg_free), 0 when more bytes are needed, -EMSGSIZE for an
 * oversized frame, -EBADMSG for one protobuf cannot decode. After an error the stream is lost. */
int frame_dec_next(frame_dec_t *d, Hccld__Msg **msg_p);

/* Encodes m into buf (header included); returns the total length, or 0 if it exceeds cap or
 * FRAME_MAX. */
size_t frame_encode(const Hccld__Msg *m, uint8_t *buf, size_t cap);

void frame_msg_free(Hccld__Msg *m);

#endif
