/*
 * The RDMA transport's wire records (rdma_wire.c): what a peer daemon puts in rdma_cm's
 * private data (HELLO, ACCEPT, REFUSE) and in front of every message on the queue pair. These
 * are decoded before the peer has proven the job key, so any bytes may come. Input: one byte
 * that picks the record (its value mod 4: hello, accept, refuse, message header), then the
 * record as it arrives (a message header: the whole message, payload included).
 * Checked: a record that decodes holds only values the receiving side can live with (slots
 * and depths in bounds, a fragment within its message, a reason that is an errno), and it
 * survives encoding and decoding again unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "log.h"
#include "transport/rdma_wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_log_level(LOG_DEBUG);
    return 0;
}

static void check_slots(uint16_t depth, uint32_t slot)
{
    if (depth < RDMA_DEPTH_MIN || depth > RDMA_DEPTH_MAX || slot < RDMA_SLOT_MIN ||
        slot > RDMA_SLOT_MAX)
        abort();
}

static void hello(const uint8_t *in, size_t n)
{
    rdma_hello_t h, again;
    uint8_t out[RDMA_HELLO_BYTES];

    if (rdma_hello_decode(in, n, &h) != 0)
        return;
    check_slots(h.depth, h.slot);
    rdma_hello_encode(&h, out);
    if (rdma_hello_decode(out, sizeof(out), &again) != 0 || again.depth != h.depth ||
        again.slot != h.slot || again.node != h.node ||
        memcmp(again.job, h.job, AUTH_JOB_BYTES) != 0 ||
        memcmp(again.nonce, h.nonce, AUTH_NONCE_BYTES) != 0 || again.conn_id != h.conn_id ||
        again.again != h.again)
        abort();
}

static void accept_pd(const uint8_t *in, size_t n)
{
    rdma_accept_pd_t a, again;
    uint8_t out[RDMA_ACCEPT_BYTES];

    if (rdma_accept_decode(in, n, &a) != 0)
        return;
    check_slots(a.depth, a.slot);
    rdma_accept_encode(&a, out);
    if (rdma_accept_decode(out, sizeof(out), &again) != 0 || again.depth != a.depth ||
        again.slot != a.slot || memcmp(again.nonce, a.nonce, AUTH_NONCE_BYTES) != 0 ||
        memcmp(again.mac, a.mac, AUTH_MAC_BYTES) != 0)
        abort();
}

static void refuse(const uint8_t *in, size_t n)
{
    uint32_t reason = rdma_refuse_decode(in, n);
    uint8_t out[RDMA_REFUSE_BYTES];

    if (reason == 0)
        return;
    if (reason >= 4096)
        abort();
    rdma_refuse_encode(reason, out);
    if (rdma_refuse_decode(out, sizeof(out)) != reason)
        abort();
}

static void header(const uint8_t *in, size_t n)
{
    rdma_hdr_t h, again;
    uint8_t out[RDMA_HDR_BYTES];

    if (rdma_hdr_decode(in, n, &h) != 0)
        return;
    /* The payload is exactly what follows the header. A data fragment never runs past its
     * message (the receiver copies it to offset off of a buffer of len bytes); a credit
     * return and a BYE carry nothing, a RESUME only its count, a key proof exactly one MAC. */
    if (n != RDMA_HDR_BYTES + (size_t)h.frag_len)
        abort();
    switch (h.type) {
    case RDMA_MSG_DATA:
        if (h.off > h.len || h.frag_len > h.len - h.off || (h.frag_len == 0 && h.len != 0))
            abort();
        break;
    case RDMA_MSG_CREDIT:
        if (h.frag_len != 0)
            abort();
        break;
    case RDMA_MSG_CONFIRM:
        if (h.frag_len != AUTH_MAC_BYTES)
            abort();
        break;
    case RDMA_MSG_RESUME: /* a count in len, nothing else */
        if (h.frag_len != 0 || h.tag != 0 || h.off != 0)
            abort();
        break;
    case RDMA_MSG_BYE:
        if (h.frag_len != 0 || h.tag != 0 || h.len != 0 || h.off != 0)
            abort();
        break;
    default: abort();
    }
    rdma_hdr_encode(&h, out);
    if (memcmp(out, in, RDMA_HDR_BYTES) != 0 || rdma_hdr_decode(in, n, &again) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *rec;

    if (size < 1)
        return 0;
    /* A copy of exactly the record's bytes, so that ASan sees any read past its end. */
    if ((rec = malloc(size - 1 > 0 ? size - 1 : 1)) == NULL)
        return 0;
    memcpy(rec, data + 1, size - 1);
    switch (data[0] % 4) {
    case 0: hello(rec, size - 1); break;
    case 1: accept_pd(rec, size - 1); break;
    case 2: refuse(rec, size - 1); break;
    default: header(rec, size - 1); break;
    }
    free(rec);
    return 0;
}
