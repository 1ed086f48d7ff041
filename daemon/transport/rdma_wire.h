/*
 * The RDMA transport's wire format, little-endian like TCP's. Two kinds of records:
 *   - the rdma_cm private data of the connection setup: HELLO in the connect request (job,
 *     node, nonce, receive slots, the connection's name), or AGAIN, a HELLO that takes the
 *     place of a suspended connection (rdma_resume.c); ACCEPT in the reply (nonce, MAC,
 *     receive slots); REFUSE in a reject (reason);
 *   - a header in front of every message on the queue pair: a fragment of a data message, a
 *     credit return, CONFIRM (the connecting side's proof of the key), RESUME (how many
 *     messages the sender has taken in full) or BYE (a close on purpose follows).
 * Decoders validate every field.
 */
#ifndef HCCLD_TRANSPORT_RDMA_WIRE_H
#define HCCLD_TRANSPORT_RDMA_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"

#define RDMA_WIRE_VERSION 2
/* rdma_cm carries 56 bytes of private data in a connect request on RoCE, 196 in a reply and
 * 148 in a reject: each record fits the smallest place it goes. */
#define RDMA_HELLO_BYTES 56
#define RDMA_ACCEPT_BYTES 60
#define RDMA_REFUSE_BYTES 12
#define RDMA_HDR_BYTES 32

/* Bounds of what a side may announce: receive slots and their size. */
#define RDMA_DEPTH_MIN 4u
#define RDMA_DEPTH_MAX 1024u
#define RDMA_SLOT_MIN 4096u
#define RDMA_SLOT_MAX (4u << 20)

enum rdma_pd_kind { RDMA_PD_HELLO = 1, RDMA_PD_ACCEPT = 2, RDMA_PD_REFUSE = 3, RDMA_PD_AGAIN = 4 };

enum rdma_msg_type {
    RDMA_MSG_DATA = 1,    /* a fragment of a message: tag, whole length, offset, payload */
    RDMA_MSG_CREDIT = 2,  /* only the credits field: receive slots posted again */
    RDMA_MSG_CONFIRM = 3, /* HMAC(key, "tp-connect" | nonce_a | nonce_c) */
    RDMA_MSG_RESUME = 4,  /* len: data messages the sender has taken in full */
    RDMA_MSG_BYE = 5,     /* no fields: the sender closes the connection on purpose */
};

/* The connecting side's request (connect private data). */
typedef struct rdma_hello {
    uint16_t depth; /* receive slots it posted: the accepting side's first credits */
    uint32_t slot;  /* bytes per receive slot, header included */
    uint32_t node;
    uint8_t job[AUTH_JOB_BYTES];
    uint8_t nonce[AUTH_NONCE_BYTES];
    uint64_t conn_id; /* the connection's name (the connecting side's choice, not 0) */
    int again;        /* AGAIN: it takes the place of the connection of that name */
} rdma_hello_t;

/* The accepting side's reply (accept private data). */
typedef struct rdma_accept_pd {
    uint16_t depth;
    uint32_t slot;
    uint8_t nonce[AUTH_NONCE_BYTES];
    uint8_t mac[AUTH_MAC_BYTES]; /* HMAC(key, "tp-accept" | nonce_c | nonce_a) */
} rdma_accept_pd_t;

typedef struct rdma_hdr {
    uint8_t type;
    uint16_t credits;  /* the sender's receive slots posted again since its last message */
    uint32_t frag_len; /* payload bytes after the header */
    uint64_t tag;      /* DATA: the message's tag, length and this fragment's offset */
    uint64_t len;
    uint64_t off;
} rdma_hdr_t;

void rdma_hello_encode(const rdma_hello_t *h, uint8_t out[RDMA_HELLO_BYTES]);
/* -EPROTO unless in (len bytes, as rdma_cm delivers them) holds a valid HELLO. */
int rdma_hello_decode(const void *in, size_t len, rdma_hello_t *h);
void rdma_accept_encode(const rdma_accept_pd_t *a, uint8_t out[RDMA_ACCEPT_BYTES]);
int rdma_accept_decode(const void *in, size_t len, rdma_accept_pd_t *a);
void rdma_refuse_encode(uint32_t reason, uint8_t out[RDMA_REFUSE_BYTES]);
/* The reason (a positive errno) of a REFUSE record, or 0 if in holds none (a reject that the
 * peer's kernel sent: no listener, a timeout). */
uint32_t rdma_refuse_decode(const void *in, size_t len);

void rdma_hdr_encode(const rdma_hdr_t *h, uint8_t out[RDMA_HDR_BYTES]);
/* Decodes the message of n bytes that arrived in in: -EPROTO if malformed. */
int rdma_hdr_decode(const uint8_t *in, size_t n, rdma_hdr_t *h);

#endif
