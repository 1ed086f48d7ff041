/*
 * Data transports between daemons, as a table of functions in the manner of NCCL's net plugins.
 * Only listen() and connect() are called through a transport's table (that is where one is
 * chosen); everything after goes through the tp_* calls below, which reach the transport of
 * the handle at hand, so one comm may talk TCP to one peer and RDMA to another.
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
 * completes with it (TCP: when the peer is gone, tp_peer_gone, what it sent before still
 * completes the receives it matches first).
 */
#ifndef HCCLD_TRANSPORT_TRANSPORT_H
#define HCCLD_TRANSPORT_TRANSPORT_H

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "link_info.h"

typedef struct tp_listener tp_listener_t;
typedef struct tp_conn tp_conn_t;
typedef struct tp_req tp_req_t;
typedef struct transport_ops transport_ops_t;

/* The handles the transports hand out: each transport's own objects start with these, so a
 * caller holding a connection or a request needs nothing else to reach its transport (the
 * tp_* calls below). */
struct tp_listener {
    const transport_ops_t *ops;
};

struct tp_conn {
    const transport_ops_t *ops;
};

struct tp_req {
    tp_conn_t *conn;
    /* The transport's bookkeeping (tp_queue.h); users only hold the request. */
    tp_req_t *next; /* in one of its connection's queues or its free list */
    uint64_t tag;
    int done;
    int status;
};

/* The node index of a peer that did not announce one (the accepting side of a connect). */
#define TP_NODE_UNKNOWN UINT32_MAX
/* Room for a connection's description (describe): "tcp", "rdma/mlx5_0:1". */
#define TP_DESC_MAX 32
/* Room for "ip:port" with an IPv6 address in brackets. */
#define TP_ADDR_MAX 64

/* What a connection does when it fails under its users (set_retry): with enabled set, a failure
 * that is the link's (tp_peer_gone) suspends it instead of failing its requests; it comes back
 * on a new socket (the connecting side dials again) within hold_ms, and every message is then
 * delivered once, none lost: sends complete when the peer has them. Past hold_ms it fails as
 * without. */
typedef struct tp_retry {
    int enabled;
    uint64_t hold_ms;
} tp_retry_t;

/* How a resumable connection fared (link_info below). */
typedef struct tp_retry_stats {
    int suspended;         /* it is suspended now */
    uint32_t resumes;      /* times it came back */
    uint64_t suspended_ns; /* time spent suspended, the current suspension included */
    uint32_t held;         /* messages that came and no receive has taken yet */
    int ended;             /* the peer closed it (between messages) */
} tp_retry_stats_t;

/* A connection's health (link_info below; common/link_info.h says what each figure is). */
typedef link_info_t tp_link_info_t;

/* A message a connection keeps for a receive not posted yet (tp_kept.h). */
typedef struct tp_msg tp_msg_t;

/*
 * Who may connect: the accepting side asks for the key of the job the connecting side names.
 * Returns 0 and fills key_out, or a negative errno to refuse the connection.
 */
typedef int (*tp_key_lookup_fn)(void *ctx, const uint8_t job_id[AUTH_JOB_BYTES],
                                uint8_t key_out[AUTH_KEY_BYTES]);

struct transport_ops {
    const char *name;
    enum tp_kind { TP_KIND_TCP, TP_KIND_RDMA } kind;
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
    /* Names the transport and, where it has one, the device and port the connection uses
     * ("tcp", "rdma/rxe0:1"), for hccld-ctl. */
    void (*describe)(tp_conn_t *c, char *buf, size_t cap);
    /* Adds the connection's figures to *li (see tp_link_info_t): a few syscalls, for a
     * monitor that asks once a second. */
    void (*link_info)(tp_conn_t *c, tp_link_info_t *li);
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
    /* Makes the connection resumable or not (tp_retry_t), before any message crosses it; both
     * ends must ask alike. NULL: the transport cannot (tp_set_retry says -ENOTSUP). */
    int (*set_retry)(tp_conn_t *c, const tp_retry_t *r);
    /* Fills *st (NULL: the transport never suspends). */
    void (*retry_stats)(tp_conn_t *c, tp_retry_stats_t *st);
    /* The messages no receive has taken yet whose tag & mask == value, taken out (a list, in
     * arrival order), and put before another connection's (a comm's connections that come
     * back after a restart, span/drain.c). NULL where the transport cannot. */
    tp_msg_t *(*kept_take)(tp_conn_t *c, uint64_t mask, uint64_t value);
    void (*kept_put)(tp_conn_t *c, tp_msg_t *list);
    /* Frees the connection and every request not yet reported done. */
    void (*close)(tp_conn_t *c);
    void (*listen_close)(tp_listener_t *l);
};

extern const transport_ops_t tp_tcp;
/* A TCP listener on a given "ip:port" (tp_cm_listen_also). */
int tp_tcp_listen_at(const char *addr, tp_listener_t **l_p, char *addr_out, size_t cap);

/* Whether a transfer that failed with err (a negative errno) failed because the peer went
 * away or stopped answering, rather than because data or the link went wrong. */
static inline int tp_peer_gone(int err)
{
    switch (-err) {
    case ECONNRESET:
    case ECONNABORTED:
    case ECONNREFUSED:
    case EPIPE:
    case ENOTCONN:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH: return 1;
    default: return 0;
    }
}

/* The ops of a handle's own transport. */
static inline int tp_listen_fd(tp_listener_t *l)
{
    return l->ops->listen_fd(l);
}

static inline int tp_accept(tp_listener_t *l, tp_key_lookup_fn lookup, void *ctx, tp_conn_t **c_p)
{
    return l->ops->accept(l, lookup, ctx, c_p);
}

static inline void tp_listen_close(tp_listener_t *l)
{
    if (l != NULL)
        l->ops->listen_close(l);
}

static inline int tp_set_retry(tp_conn_t *c, const tp_retry_t *r)
{
    return c->ops->set_retry != NULL ? c->ops->set_retry(c, r) : -ENOTSUP;
}

static inline void tp_retry_stats(tp_conn_t *c, tp_retry_stats_t *st)
{
    *st = (tp_retry_stats_t){0};
    if (c->ops->retry_stats != NULL)
        c->ops->retry_stats(c, st);
}

static inline int tp_conn_state(tp_conn_t *c)
{
    return c->ops->conn_state(c);
}

static inline uint32_t tp_conn_peer_node(tp_conn_t *c)
{
    return c->ops->conn_peer_node(c);
}

static inline int tp_isend(tp_conn_t *c, const void *buf, size_t len, void *mr, uint64_t tag,
                           tp_req_t **r_p)
{
    return c->ops->isend(c, buf, len, mr, tag, r_p);
}

static inline int tp_irecv(tp_conn_t *c, void *buf, size_t len, void *mr, uint64_t tag,
                           tp_req_t **r_p)
{
    return c->ops->irecv(c, buf, len, mr, tag, r_p);
}

static inline int tp_test(tp_req_t *r, int *done_p)
{
    return r->conn->ops->test(r, done_p);
}

/* Whether r is done, without advancing its connection (a syscall, for TCP); tp_test then
 * gives its result. For a request whose connection other requests advance anyway. */
static inline int tp_done(const tp_req_t *r)
{
    return r->done;
}

static inline int tp_poll_fds(tp_conn_t *c, struct pollfd *pfd, int max)
{
    return c->ops->poll_fds(c, pfd, max);
}

static inline int tp_set_dscp(tp_conn_t *c, int dscp)
{
    return c->ops->set_dscp(c, dscp);
}

static inline void tp_describe(tp_conn_t *c, char *buf, size_t cap)
{
    c->ops->describe(c, buf, cap);
}

static inline void tp_link_info(tp_conn_t *c, tp_link_info_t *li)
{
    c->ops->link_info(c, li);
}

static inline void tp_cancel(tp_req_t *r)
{
    r->conn->ops->cancel(r);
}

static inline void tp_forget(tp_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns)
{
    c->ops->forget(c, mask, value, ttl_ns);
}

static inline tp_msg_t *tp_kept_take_from(tp_conn_t *c, uint64_t mask, uint64_t value)
{
    return c->ops->kept_take != NULL ? c->ops->kept_take(c, mask, value) : NULL;
}

/* list must come from tp_kept_take_from on a connection of the same transport. */
static inline void tp_kept_put_to(tp_conn_t *c, tp_msg_t *list)
{
    c->ops->kept_put(c, list);
}

static inline void tp_close(tp_conn_t *c)
{
    if (c != NULL)
        c->ops->close(c);
}

#endif /* HCCLD_TRANSPORT_TRANSPORT_H */
