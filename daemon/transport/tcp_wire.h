/*
 * The TCP transport's wire format: fixed little-endian records with a magic, one for the
 * handshake and one header in front of every data message. Decoders validate every field.
 */
#ifndef HCCLD_TRANSPORT_TCP_WIRE_H
#define HCCLD_TRANSPORT_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"

/* 2: HELLO names the connection (conn_id) and whether it resumes one; control records. */
/* 3: a close says BYE (TCP_CTL_BYE), and an end without it is a crash (tcp_resume.c) */
/* 4: ACKREQ says how many messages the sender waits for; the peer acknowledges once it read
 * more, instead of at once (each ACK that fell short was asked again: an endless exchange of
 * the two while the peer had not read that far) */
#define TCP_WIRE_VERSION 4
#define TCP_HS_BYTES 96
#define TCP_HDR_BYTES 32
#define TCP_HDR_F_CRC 1u
/* A control record of a resumable connection, not a message: no payload, tag is a count of
 * messages, crc says which record (tcp_ctl). */
#define TCP_HDR_F_CTL 2u
/* HELLO: this connection takes the place of conn_id, which failed (tcp_resume.c). */
#define TCP_HS_F_RESUME 1u

enum tcp_ctl {
    TCP_CTL_ACK = 1,    /* the sender has read tag messages of this connection in all */
    TCP_CTL_RESUME = 2, /* first record on a resumed connection: the same, from each side */
    TCP_CTL_ACKREQ = 3, /* the sender waits for an ACK of tag (>= 1) messages in all */
    TCP_CTL_BYE = 4,    /* the sender closes the connection on purpose (tag 0) */
};

enum tcp_hs_type {
    TCP_HS_HELLO = 1,   /* connecting side: job, node, nonce_c */
    TCP_HS_ACCEPT = 2,  /* accepting side: nonce_a, HMAC(key, "tp-accept" | nonce_c | nonce_a) */
    TCP_HS_CONFIRM = 3, /* connecting side: HMAC(key, "tp-connect" | nonce_a | nonce_c) */
    TCP_HS_REFUSE = 4,  /* either side: reason (a positive errno), then it closes */
};

typedef struct tcp_hs_msg {
    uint16_t type;
    uint32_t node;
    uint32_t reason;
    uint64_t conn_id; /* HELLO: the connecting side's name for the connection */
    uint32_t flags;   /* HELLO: TCP_HS_F_* */
    uint8_t job[AUTH_JOB_BYTES];
    uint8_t nonce[AUTH_NONCE_BYTES];
    uint8_t mac[AUTH_MAC_BYTES];
} tcp_hs_msg_t;

typedef struct tcp_hdr {
    uint32_t flags;
    uint64_t tag;
    uint64_t len;
    uint32_t crc;
} tcp_hdr_t;

void tcp_hs_encode(const tcp_hs_msg_t *m, uint8_t out[TCP_HS_BYTES]);
/* -EPROTO if the record is not a well-formed handshake message of this version. */
int tcp_hs_decode(const uint8_t in[TCP_HS_BYTES], tcp_hs_msg_t *m);
/* The wire version a handshake record says, or -1 if it is not one. */
int tcp_hs_version(const uint8_t in[TCP_HS_BYTES]);
void tcp_hdr_encode(const tcp_hdr_t *h, uint8_t out[TCP_HDR_BYTES]);
/* -EPROTO if the header is malformed. */
int tcp_hdr_decode(const uint8_t in[TCP_HDR_BYTES], tcp_hdr_t *h);

#endif
