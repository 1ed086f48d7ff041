/*
 * The frame decoder: what a client, hccld-ctl or another daemon may write on a stream socket.
 * Input: one byte giving the size of each read (0: all at once), then the byte stream. Every
 * message decoded must re-encode canonically: encode, decode, encode gives the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

/* Decoders are 128 KiB; static, so that each input does not pay for a fresh one. */
static frame_dec_t dec, redec;
static uint8_t enc1[FRAME_HDR + FRAME_MAX], enc2[FRAME_HDR + FRAME_MAX];

/* Whether m or a message inside it holds an unknown field numbered 0. protobuf-c 1.4.1 takes
 * one when its tag is written in more than one byte (0x80 0x00), then packs it in one byte,
 * which it refuses to unpack: such a message does not survive a re-encode. Field 0 is invalid
 * protobuf; nothing in hcclD reads unknown fields. */
static int has_field_zero(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;

    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return 1;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + f->offset);
            for (size_t k = 0; k < n; k++)
                if (has_field_zero(v[k]))
                    return 1;
            continue;
        }
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        const ProtobufCMessage *sub = *(ProtobufCMessage *const *)(base + f->offset);
        if (sub != NULL && has_field_zero(sub))
            return 1;
    }
    return 0;
}

static void check_canonical(const Hccld__Msg *m)
{
    size_t n1 = frame_encode(m, enc1, sizeof(enc1)), n2;
    Hccld__Msg *again = NULL;
    uint8_t *dst;
    size_t room;

    /* Re-encoding never grows a message (defaults are dropped, varints shortened), so a frame
     * that was decoded always fits again. */
    if (n1 == 0)
        abort();
    frame_dec_init(&redec);
    frame_dec_space(&redec, &dst, &room);
    memcpy(dst, enc1, n1);
    frame_dec_commit(&redec, n1);
    if (frame_dec_next(&redec, &again) != 1 || redec.len != 0) {
        if (has_field_zero(&m->base))
            return;
        abort();
    }
    n2 = frame_encode(again, enc2, sizeof(enc2));
    if (n2 != n1 || memcmp(enc1, enc2, n1) != 0)
        abort();
    frame_msg_free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t chunk, off = 1;
    Hccld__Msg *m;
    int rc = 0;

    if (size < 1)
        return 0;
    chunk = data[0] != 0 ? data[0] : size;
    frame_dec_init(&dec);
    while (off < size && rc >= 0) {
        uint8_t *dst;
        size_t room, n = size - off < chunk ? size - off : chunk;

        frame_dec_space(&dec, &dst, &room);
        /* A drained decoder always has room for a whole frame, as frame.h promises. */
        if (room < FRAME_HDR + FRAME_MAX)
            abort();
        n = n < room ? n : room;
        memcpy(dst, data + off, n);
        frame_dec_commit(&dec, n);
        off += n;
        while ((rc = frame_dec_next(&dec, &m)) == 1) {
            check_canonical(m);
            frame_msg_free(m);
        }
    }
    return 0;
}
