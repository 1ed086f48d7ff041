#include "transport/tcp_wire.h"
#include "transport/tp_le.h"

#include <errno.h>
#include <string.h>

/* "HCTH" and "HCTD" as little-endian words: handshake and data records are told apart. */
#define TCP_HS_MAGIC 0x48544348u
#define TCP_HDR_MAGIC 0x44544348u

/* Offsets of the handshake record. */
enum {
    HS_MAGIC = 0,
    HS_VERSION = 4,
    HS_TYPE = 6,
    HS_NODE = 8,
    HS_REASON = 12,
    HS_JOB = 16,
    HS_NONCE = 32,
    HS_MAC = 48,
    HS_CONN = 80,
    HS_FLAGS = 88,
    HS_RSVD = 92
};
/* Offsets of the data header. */
enum { HDR_MAGIC = 0, HDR_FLAGS = 4, HDR_TAG = 8, HDR_LEN = 16, HDR_CRC = 24, HDR_RSVD = 28 };

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

void tcp_hs_encode(const tcp_hs_msg_t *m, uint8_t out[TCP_HS_BYTES])
{
    memset(out, 0, TCP_HS_BYTES);
    put_le(out + HS_MAGIC, TCP_HS_MAGIC, 4);
    put_le(out + HS_VERSION, TCP_WIRE_VERSION, 2);
    put_le(out + HS_TYPE, m->type, 2);
    put_le(out + HS_NODE, m->node, 4);
    put_le(out + HS_REASON, m->reason, 4);
    memcpy(out + HS_JOB, m->job, AUTH_JOB_BYTES);
    memcpy(out + HS_NONCE, m->nonce, AUTH_NONCE_BYTES);
    memcpy(out + HS_MAC, m->mac, AUTH_MAC_BYTES);
    put_le(out + HS_CONN, m->conn_id, 8);
    put_le(out + HS_FLAGS, m->flags, 4);
}

/* Each type carries only its own fields; the others must be zero, so nothing is ambiguous. */
static int hs_fields_valid(const uint8_t *in, const tcp_hs_msg_t *m)
{
    int has_job = m->type == TCP_HS_HELLO;
    int has_nonce = m->type == TCP_HS_HELLO || m->type == TCP_HS_ACCEPT;
    int has_mac = m->type == TCP_HS_ACCEPT || m->type == TCP_HS_CONFIRM;

    if (m->type == TCP_HS_HELLO ? m->node == UINT32_MAX : m->node != 0)
        return 0;
    if (m->type == TCP_HS_REFUSE ? (m->reason == 0 || m->reason > 4095) : m->reason != 0)
        return 0;
    if (!has_job && !all_zero(in + HS_JOB, AUTH_JOB_BYTES))
        return 0;
    if (!has_nonce && !all_zero(in + HS_NONCE, AUTH_NONCE_BYTES))
        return 0;
    if (m->type == TCP_HS_HELLO ? (m->flags & ~TCP_HS_F_RESUME) != 0 || m->conn_id == 0
                                : m->flags != 0 || m->conn_id != 0)
        return 0;
    if (!all_zero(in + HS_RSVD, TCP_HS_BYTES - HS_RSVD))
        return 0;
    return has_mac || all_zero(in + HS_MAC, AUTH_MAC_BYTES);
}

int tcp_hs_version(const uint8_t in[TCP_HS_BYTES])
{
    return get_le(in + HS_MAGIC, 4) == TCP_HS_MAGIC ? (int)get_le(in + HS_VERSION, 2) : -1;
}

int tcp_hs_decode(const uint8_t in[TCP_HS_BYTES], tcp_hs_msg_t *m)
{
    if (get_le(in + HS_MAGIC, 4) != TCP_HS_MAGIC || get_le(in + HS_VERSION, 2) != TCP_WIRE_VERSION)
        return -EPROTO;
    m->type = (uint16_t)get_le(in + HS_TYPE, 2);
    if (m->type < TCP_HS_HELLO || m->type > TCP_HS_REFUSE)
        return -EPROTO;
    m->node = (uint32_t)get_le(in + HS_NODE, 4);
    m->reason = (uint32_t)get_le(in + HS_REASON, 4);
    memcpy(m->job, in + HS_JOB, AUTH_JOB_BYTES);
    memcpy(m->nonce, in + HS_NONCE, AUTH_NONCE_BYTES);
    memcpy(m->mac, in + HS_MAC, AUTH_MAC_BYTES);
    m->conn_id = get_le(in + HS_CONN, 8);
    m->flags = (uint32_t)get_le(in + HS_FLAGS, 4);
    return hs_fields_valid(in, m) ? 0 : -EPROTO;
}

void tcp_hdr_encode(const tcp_hdr_t *h, uint8_t out[TCP_HDR_BYTES])
{
    put_le(out + HDR_MAGIC, TCP_HDR_MAGIC, 4);
    put_le(out + HDR_FLAGS, h->flags, 4);
    put_le(out + HDR_TAG, h->tag, 8);
    put_le(out + HDR_LEN, h->len, 8);
    put_le(out + HDR_CRC, h->crc, 4);
    put_le(out + HDR_RSVD, 0, 4);
}

int tcp_hdr_decode(const uint8_t in[TCP_HDR_BYTES], tcp_hdr_t *h)
{
    if (get_le(in + HDR_MAGIC, 4) != TCP_HDR_MAGIC || get_le(in + HDR_RSVD, 4) != 0)
        return -EPROTO;
    h->flags = (uint32_t)get_le(in + HDR_FLAGS, 4);
    h->tag = get_le(in + HDR_TAG, 8);
    h->len = get_le(in + HDR_LEN, 8);
    h->crc = (uint32_t)get_le(in + HDR_CRC, 4);
    if (h->flags == TCP_HDR_F_CTL)
        return h->len == 0 && h->crc >= TCP_CTL_ACK && h->crc <= TCP_CTL_BYE ? 0 : -EPROTO;
    if ((h->flags & ~TCP_HDR_F_CRC) != 0 || (!(h->flags & TCP_HDR_F_CRC) && h->crc != 0))
        return -EPROTO;
    return 0;
}
