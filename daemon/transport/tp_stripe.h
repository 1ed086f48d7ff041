/*
 * Striping: one connection made of n connections of one transport, as HCCL spreads the data
 * between two ranks over HCCL_RDMA_QPS_PER_CONNECTION queue pairs (HCCLD_TCP_NSOCKS sockets on
 * TCP). The connecting side opens the n connections, each announcing "stripe k of n" instead
 * of its bare node index, and wraps them (tp_stripe_wrap); the accepting side gathers them by
 * that announcement into one (tp_stripe_new, tp_stripe_add). The result is an ordinary
 * connection for the tp_* calls. tp_stripe.c says how a message is split.
 */
#ifndef HCCLD_TRANSPORT_TP_STRIPE_H
#define HCCLD_TRANSPORT_TP_STRIPE_H

#include <stdint.h>

#include "transport/transport.h"

#define TP_STRIPE_MAX 32
/* An announcement: the node in the low bits, then k (5 bits) and n - 1 (5 bits). A plain
 * connection (n = 1) announces its bare node index, as before striping existed. The largest
 * node stays below the mask, so that no announcement is TP_NODE_UNKNOWN (all ones). */
#define TP_STRIPE_NODE_BITS 22
#define TP_STRIPE_NODE_MASK ((1u << TP_STRIPE_NODE_BITS) - 1)
#define TP_STRIPE_NODE_MAX (TP_STRIPE_NODE_MASK - 1)

static inline uint32_t tp_stripe_announce(uint32_t node, unsigned k, unsigned n)
{
    if (n <= 1)
        return node;
    return node | (uint32_t)k << TP_STRIPE_NODE_BITS |
           (uint32_t)(n - 1) << (TP_STRIPE_NODE_BITS + 5);
}

/* The node an announcement names, with k and n (0 and 1 for a plain connection). */
static inline uint32_t tp_stripe_parse(uint32_t v, unsigned *k, unsigned *n)
{
    if (v == TP_NODE_UNKNOWN || v >> TP_STRIPE_NODE_BITS == 0) {
        *k = 0;
        *n = 1;
        return v;
    }
    *k = (v >> TP_STRIPE_NODE_BITS) & 31u;
    *n = (v >> (TP_STRIPE_NODE_BITS + 5)) + 1u;
    return v & TP_STRIPE_NODE_MASK;
}

/*
 * How many connections a data connection of this kind should stripe over, and the least bytes
 * a stripe carries of one message (HCCL_MULTI_QP_THRESHOLD, KiB, default 512): from
 * HCCL_RDMA_QPS_PER_CONNECTION or HCCLD_TCP_NSOCKS (1 to 32, default 1), read once.
 */
unsigned tp_stripe_count(enum tp_kind kind, uint32_t *threshold_p);

/* Connecting side: subs[0..n-1] (2 <= n <= TP_STRIPE_MAX), just connected with the
 * announcements of stripes 0..n-1, become one connection, which owns them from now on, even
 * on failure. threshold: the least bytes per stripe of one message. 0 or -ENOMEM. */
int tp_stripe_wrap(tp_conn_t **subs, unsigned n, uint32_t threshold, tp_conn_t **c_p);

/* Accepting side: an empty connection for n stripes from node; conn_state() says 0 until all
 * were added and the connecting side's settings came, and fails it after the handshake
 * timeout (30 s). NULL without memory. */
tp_conn_t *tp_stripe_new(unsigned n, uint32_t node);
/* Gives stripe k (announced "k of n") to s, which owns it from now on, even on failure.
 * -EINVAL if s is not a stripe connection for n stripes or already has a k. */
int tp_stripe_add(tp_conn_t *s, unsigned k, unsigned n, tp_conn_t *sub);
/* Whether c is a stripe connection still waiting for stripes: the node it expects them from
 * (else TP_NODE_UNKNOWN). */
uint32_t tp_stripe_gathering(tp_conn_t *c);

#endif
