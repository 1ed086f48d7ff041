/*
 * Data transports between daemons, as a table of functions in the manner of NCCL's net plugins.
 *
 * One engine thread drives every call, and no call blocks: connect and accept return a
 * connection whose handshake advances in conn_state(); isend and irecv queue a request that
 * advances in test(). When nothing can advance, the engine sleeps in poll() on the fds that
 * listen_fd() and poll_fds() give. A connection proves the job key in both directions before
 * any data flows, and the key never goes on the wire.
 *
 * Matching: on one connection, sends complete in posting order; an incoming message completes
 * the oldest posted receive with its tag, whatever other tags come between, so messages of one
 * tag keep their order while operations with different tags (several collectives, send/recv
 * pairs) share the connection. A message that arrives before its receive waits in memory
 * (HCCLD_TCP_UNEXPECTED bytes per connection at most; beyond that reading pauses). Lengths
 * must agree (else -EPROTO). Any error fails the connection: every pending request then
 * completes with it.
 */
#ifndef HCCLD_TRANSPORT_TRANSPORT_H
#define HCCLD_TRANSPORT_TRANSPORT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/auth.h"

typedef struct tp_listener tp_listener_t;
typedef struct tp_conn tp_conn_t;
typedef struct tp_req tp_req_t;

/* The node index of a peer that did not announce one (the accepting side of a connect). */
#define TP_NODE_UNKNOWN UINT32_MAX
/* Room for "ip:port" with an IPv6 address in brackets. */
#define TP_ADDR_MAX 64

/*
 * Who may connect: the accepting side asks for the key of the job the connecting side names.
 * Returns 0 and fills key_out, or a negative errno to refuse the connection.
 */
typedef int (*tp_key_lookup_fn)(void *ctx, const uint8_t job_id[AUTH_JOB_BYTES],
                                uint8_t key_out[AUTH_KEY_BYTES]);

typedef struct transport_ops {
    const char *name;
    /* Binds ip:0 and writes the address peers connect to ("ip:port") into addr_out. */
    int (*listen)(const char *ip, tp_listener_t **l_p, char *addr_out, size_t cap);
    /* Readable when a connection is waiting for accept(). */
    int (*listen_fd)(tp_listener_t *l);
    /* Takes one waiting connection (-EAGAIN if none); lookup is called during its handshake. */
    int (*accept)(tp_listener_t *l, tp_key_lookup_fn lookup, void *ctx, tp_conn_t **c_p);
    int (*connect)(const char *addr, const uint8_t job_id[AUTH_JOB_BYTES],
                   const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, tp_conn_t **c_p);
    /* Advances the handshake: 1 ready, 0 in progress (call again), <0 failed (a negative errno). */
    int (*conn_state)(tp_conn_t *c);
    /* The node index the connecting side announced, or TP_NODE_UNKNOWN. */
    uint32_t (*conn_peer_node)(tp_conn_t *c);
    /* Registers a buffer for isend/irecv; mr is passed back to them (TCP keeps nothing). */
    int (*reg_mem)(tp_conn_t *c, void *base, size_t len, void **mr_p);
    void (*dereg_mem)(tp_conn_t *c, void *mr);
    /*
     * Queue a send or a receive; the buffer must stay untouched until test() reports it done.
     * Only on a ready connection. -EAGAIN if too many requests are outstanding.
     */
    int (*isend)(tp_conn_t *c, const void *buf, size_t len, void *mr, uint64_t tag, tp_req_t **r_p);
    int (*irecv)(tp_conn_t *c, void *buf, size_t len, void *mr, uint64_t tag, tp_req_t **r_p);
    /*
     * Advances r's connection and sets *done_p. Once done, r is freed and the result returned:
     * 0, or a negative errno (the connection has then failed).
     */
    int (*test)(tp_req_t *r, int *done_p);
    /* Fills up to max pollfds to wait on before calling conn_state or test again. */
    int (*poll_fds)(tp_conn_t *c, struct pollfd *pfd, int max);
    /* Marks the connection's traffic with a QoS class: DSCP for TCP (the traffic class / SL
     * for RDMA). 0, or a negative errno. */
    int (*set_dscp)(tp_conn_t *c, int dscp);
    /*
     * Withdraws a request not yet reported done (and frees it): its buffer is no longer
     * touched, so a connection that outlives its user (several comms share one) stays sound.
     * A send partly on the wire or a receive partly filled cannot leave the byte stream
     * without corrupting it: the connection then fails (logged).
     */
    void (*cancel)(tp_req_t *r);
    /*
     * A user of a shared connection is gone: drops the messages kept for it (those whose
     * tag & mask == value, arrived before any receive) and, for ttl_ns, those still to come,
     * so that its peers' late traffic neither piles up nor fills the connection's budget for
     * the others.
     */
    void (*forget)(tp_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns);
    /* Frees the connection and every request not yet reported done. */
    void (*close)(tp_conn_t *c);
    void (*listen_close)(tp_listener_t *l);
} transport_ops_t;

extern const transport_ops_t tp_tcp;

#endif /* HCCLD_TRANSPORT_TRANSPORT_H */
