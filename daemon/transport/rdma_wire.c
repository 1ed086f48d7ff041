#include "transport/rdma_wire.h"
#include "transport/tp_le.h"

#include <errno.h>
#include <string.h>

/* "HCRC" as a little-endian word: a connection record of this transport. */
#define RDMA_PD_MAGIC 0x43524348u

/* Offsets shared by the three connection records, then each one's own. */
enum { PD_MAGIC = 0, PD_VERSION = 4, PD_KIND = 5, PD_DEPTH = 6, PD_SLOT = 8 };
enum { HELLO_NODE = 12, HELLO_JOB = 16, HELLO_NONCE = 32, HELLO_CONN = 48 };
enum { ACCEPT_NONCE = 12, ACCEPT_MAC = 28 };
enum { REFUSE_REASON = 8 };
/* Offsets of the message header. */
enum {
    HDR_TYPE = 0,
    HDR_RSVD = 1,
    HDR_CREDITS = 2,
    HDR_FRAG = 4,
    HDR_TAG = 8,
    HDR_LEN = 16,
    HDR_OFF = 24
};

static void pd_head(uint8_t *out, int kind, uint16_t depth, uint32_t slot)
{
    put_le(out + PD_MAGIC, RDMA_PD_MAGIC, 4);
    out[PD_VERSION] = RDMA_WIRE_VERSION;
    out[PD_KIND] = (uint8_t)kind;
    put_le(out + PD_DEPTH, depth, 2);
    put_le(out + PD_SLOT, slot, 4);
}

/* A record of this kind and version with slots the receiving side can live with. */
static int pd_head_valid(const uint8_t *in, size_t len, size_t need, int kind)
{
    uint64_t depth, slot;

    if (len < need || get_le(in + PD_MAGIC, 4) != RDMA_PD_MAGIC ||
        in[PD_VERSION] != RDMA_WIRE_VERSION || in[PD_KIND] != kind)
        return 0;
    if (kind == RDMA_PD_REFUSE)
        return 1;
    depth = get_le(in + PD_DEPTH, 2);
    slot = get_le(in + PD_SLOT, 4);
    return depth >= RDMA_DEPTH_MIN && depth <= RDMA_DEPTH_MAX && slot >= RDMA_SLOT_MIN &&
           slot <= RDMA_SLOT_MAX;
}

void rdma_hello_encode(const rdma_hello_t *h, uint8_t out[RDMA_HELLO_BYTES])
{
    memset(out, 0, RDMA_HELLO_BYTES);
    pd_head(out, h->again ? RDMA_PD_AGAIN : RDMA_PD_HELLO, h->depth, h->slot);
    put_le(out + HELLO_NODE, h->node, 4);
    memcpy(out + HELLO_JOB, h->job, AUTH_JOB_BYTES);
    memcpy(out + HELLO_NONCE, h->nonce, AUTH_NONCE_BYTES);
    put_le(out + HELLO_CONN, h->conn_id, 8);
}

int rdma_hello_decode(const void *in_, size_t len, rdma_hello_t *h)
{
    const uint8_t *in = in_;

    if (in == NULL || (!pd_head_valid(in, len, RDMA_HELLO_BYTES, RDMA_PD_HELLO) &&
                       !pd_head_valid(in, len, RDMA_HELLO_BYTES, RDMA_PD_AGAIN)))
        return -EPROTO;
    h->again = in[PD_KIND] == RDMA_PD_AGAIN;
    h->conn_id = get_le(in + HELLO_CONN, 8);
    h->depth = (uint16_t)get_le(in + PD_DEPTH, 2);
    h->slot = (uint32_t)get_le(in + PD_SLOT, 4);
    h->node = (uint32_t)get_le(in + HELLO_NODE, 4);
    memcpy(h->job, in + HELLO_JOB, AUTH_JOB_BYTES);
    memcpy(h->nonce, in + HELLO_NONCE, AUTH_NONCE_BYTES);
    return h->node == UINT32_MAX || h->conn_id == 0 ? -EPROTO : 0;
}

void rdma_accept_encode(const rdma_accept_pd_t *a, uint8_t out[RDMA_ACCEPT_BYTES])
{
    memset(out, 0, RDMA_ACCEPT_BYTES);
    pd_head(out, RDMA_PD_ACCEPT, a->depth, a->slot);
    memcpy(out + ACCEPT_NONCE, a->nonce, AUTH_NONCE_BYTES);
    memcpy(out + ACCEPT_MAC, a->mac, AUTH_MAC_BYTES);
}

int rdma_accept_decode(const void *in_, size_t len, rdma_accept_pd_t *a)
{
    const uint8_t *in = in_;

    if (in == NULL || !pd_head_valid(in, len, RDMA_ACCEPT_BYTES, RDMA_PD_ACCEPT))
        return -EPROTO;
    a->depth = (uint16_t)get_le(in + PD_DEPTH, 2);
    a->slot = (uint32_t)get_le(in + PD_SLOT, 4);
    memcpy(a->nonce, in + ACCEPT_NONCE, AUTH_NONCE_BYTES);
    memcpy(a->mac, in + ACCEPT_MAC, AUTH_MAC_BYTES);
    return 0;
}

void rdma_refuse_encode(uint32_t reason, uint8_t out[RDMA_REFUSE_BYTES])
{
    memset(out, 0, RDMA_REFUSE_BYTES);
    pd_head(out, RDMA_PD_REFUSE, 0, 0);
    put_le(out + REFUSE_REASON, reason, 4);
}

uint32_t rdma_refuse_decode(const void *in_, size_t len)
{
    const uint8_t *in = in_;
    uint32_t reason;

    if (in == NULL || !pd_head_valid(in, len, RDMA_REFUSE_BYTES, RDMA_PD_REFUSE))
        return 0;
    reason = (uint32_t)get_le(in + REFUSE_REASON, 4);
    return reason > 0 && reason < 4096 ? reason : 0;
}

void rdma_hdr_encode(const rdma_hdr_t *h, uint8_t out[RDMA_HDR_BYTES])
{
    out[HDR_TYPE] = h->type;
    out[HDR_RSVD] = 0;
    put_le(out + HDR_CREDITS, h->credits, 2);
    put_le(out + HDR_FRAG, h->frag_len, 4);
    put_le(out + HDR_TAG, h->tag, 8);
    put_le(out + HDR_LEN, h->len, 8);
    put_le(out + HDR_OFF, h->off, 8);
}

/* Each type carries only its own fields; the others must be zero. */
static int hdr_fields_valid(const rdma_hdr_t *h)
{
    switch (h->type) {
    case RDMA_MSG_DATA:
        /* Only an empty message has an empty fragment, so every fragment makes progress. */
        return h->off <= h->len && h->frag_len <= h->len - h->off &&
               (h->frag_len > 0 || h->len == 0);
    case RDMA_MSG_CREDIT:
    case RDMA_MSG_BYE: return h->frag_len == 0 && h->tag == 0 && h->len == 0 && h->off == 0;
    case RDMA_MSG_RESUME: return h->frag_len == 0 && h->tag == 0 && h->off == 0;
    case RDMA_MSG_CONFIRM:
        return h->frag_len == AUTH_MAC_BYTES && h->tag == 0 && h->len == 0 && h->off == 0;
    default: return 0;
    }
}

int rdma_hdr_decode(const uint8_t *in, size_t n, rdma_hdr_t *h)
{
    if (n < RDMA_HDR_BYTES || in[HDR_RSVD] != 0)
        return -EPROTO;
    h->type = in[HDR_TYPE];
    h->credits = (uint16_t)get_le(in + HDR_CREDITS, 2);
    h->frag_len = (uint32_t)get_le(in + HDR_FRAG, 4);
    h->tag = get_le(in + HDR_TAG, 8);
    h->len = get_le(in + HDR_LEN, 8);
    h->off = get_le(in + HDR_OFF, 8);
    if (h->frag_len != n - RDMA_HDR_BYTES)
        return -EPROTO;
    return hdr_fields_valid(h) ? 0 : -EPROTO;
}
