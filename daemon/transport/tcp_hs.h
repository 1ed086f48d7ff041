/*
 * The TCP transport's handshake, a nonblocking state machine on one socket. Both sides prove
 * the job key by HMACs over two fresh nonces, and the key itself never goes on the wire:
 *   connecting -> HELLO(version, job, node, nonce_c, conn_id, flags)
 *   accepting  -> ACCEPT(nonce_a, HMAC(key, "tp-accept" | nonce_c | nonce_a))
 *   connecting -> CONFIRM(HMAC(key, "tp-connect" | nonce_a | nonce_c))
 * Either side that refuses sends REFUSE(reason), so that the other fails at once too.
 */
#ifndef HCCLD_TRANSPORT_TCP_HS_H
#define HCCLD_TRANSPORT_TCP_HS_H

#include <stddef.h>
#include <stdint.h>

#include "transport/tcp_wire.h"
#include "transport/transport.h"

typedef struct tcp_hs {
    int step; /* enum tcp_hs_step in tcp_hs.c */
    uint32_t my_node, peer_node;
    uint64_t conn_id; /* the connection's name (the connecting side's choice, from HELLO) */
    uint32_t flags;   /* HELLO's TCP_HS_F_*: sent, or (accepting) received */
    uint8_t job[AUTH_JOB_BYTES];
    uint8_t key[AUTH_KEY_BYTES];
    uint8_t nonce_c[AUTH_NONCE_BYTES];
    uint8_t nonce_a[AUTH_NONCE_BYTES];
    tp_key_lookup_fn lookup;
    void *lookup_ctx;
    uint8_t out[TCP_HS_BYTES];
    size_t out_len, out_off;
    uint8_t in[TCP_HS_BYTES];
    size_t in_off;
    uint64_t deadline_ns;
} tcp_hs_t;

/* conn_id: the connection's name (not 0); flags: TCP_HS_F_RESUME when it takes the place of
 * that connection after a failure. */
void tcp_hs_init_connect(tcp_hs_t *hs, const uint8_t job[AUTH_JOB_BYTES],
                         const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, uint64_t conn_id,
                         uint32_t flags);
void tcp_hs_init_accept(tcp_hs_t *hs, tp_key_lookup_fn lookup, void *ctx);
/* 1 done, 0 waiting for the socket (see tcp_hs_events), or a negative errno (logged). */
int tcp_hs_progress(tcp_hs_t *hs, int fd);
short tcp_hs_events(const tcp_hs_t *hs);
/* Wipes the key. */
void tcp_hs_clear(tcp_hs_t *hs);

#endif
