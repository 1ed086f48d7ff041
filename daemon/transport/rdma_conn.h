/*
 * Internals of an RDMA (RoCE) connection, shared by the RDMA transport's files:
 *   rdma.c        the ops table             rdma_listen.c  listeners, accept
 *   rdma_setup.c  connect, rdma_cm events   rdma_hs.c      the job key's proof
 *   rdma_id.c     addresses, cm ids         rdma_qp.c      verbs resources, QP states
 *   rdma_cq.c     completions               rdma_msg.c     requests, sends, credits, failure
 *   rdma_rx.c     receives and matching     rdma_env.c     settings
 *   rdma_resume.c connections that outlive their QP (op retry)
 * Not for use outside the RDMA transport.
 */
#ifndef HCCLD_TRANSPORT_RDMA_CONN_H
#define HCCLD_TRANSPORT_RDMA_CONN_H

#include <infiniband/verbs.h>
#include <net/if.h>
#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "net_addr.h"
#include "transport/rdma.h"
#include "transport/rdma_wire.h"
#include "transport/tp_kept.h"
#include "transport/tp_queue.h"

/* Outstanding requests per connection, both directions together: memory stays bounded. */
#define RDMA_MAX_REQS 256
/* A handshake that does not finish in this time fails, so that nothing half-open lingers. */
#define RDMA_HS_TIMEOUT_NS (30ull * 1000000000ull)

/* Receive completions carry this bit in wr_id; the low bits are the slot. */
#define RDMA_WR_RECV (1ull << 32)
/* The heartbeat's probe (rdma_post_probe): no slot. */
#define RDMA_WR_PROBE (1ull << 33)
/* Credits mean a SEND never finds the peer without a receive (RNR): a few retries turn such
 * a bug into an error instead of a hang (7 would retry forever). */
#define RDMA_RNR_RETRY 6

/* Every log line about a connection names its peer: ERR("NET", RDMA_CONN_FMT "...",
 * RDMA_CONN_ARGS(c), ...). */
#define RDMA_CONN_FMT "RDMA connection %s %s: "
#define RDMA_CONN_ARGS(c) ((c)->active ? "to" : "from"), (c)->peer

enum rdma_dir { RDMA_DIR_SEND, RDMA_DIR_RECV };

enum rdma_state {
    RDMA_ST_ADDR,    /* connecting: resolving the peer's address to a local device */
    RDMA_ST_ROUTE,   /* connecting: resolving the route */
    RDMA_ST_CONNECT, /* connecting: HELLO sent, waiting for the reply */
    RDMA_ST_CONFIRM, /* accepting: ACCEPT sent, waiting for CONFIRM on the QP */
    RDMA_ST_READY,
    RDMA_ST_FAILED,
    RDMA_ST_SUSPENDED, /* resumable, its QP gone: waiting to dial again, or to be dialled */
    RDMA_ST_RESUMING,  /* resumable, on a new QP: RESUME sent, waiting for the peer's */
    RDMA_ST_ABSORBED,  /* accepting side: its QP went to the suspended connection it named */
};

typedef struct rdma_conn rdma_conn_t;
typedef struct rdma_req rdma_req_t;

/* Both sides' nonces and the key, until the key has been proven (then wiped). */
typedef struct rdma_hs {
    uint32_t my_node, peer_node;
    uint8_t job[AUTH_JOB_BYTES];
    uint8_t key[AUTH_KEY_BYTES];
    uint8_t nonce_c[AUTH_NONCE_BYTES];
    uint8_t nonce_a[AUTH_NONCE_BYTES];
    uint64_t conn_id; /* the connection's name (HELLO) */
    int again;        /* AGAIN: it takes the place of a suspended connection */
    uint64_t deadline_ns;
} rdma_hs_t;

struct rdma_req {
    tp_req_t base; /* what the transport's users hold (base.conn is &conn->base) */
    rdma_conn_t *conn;
    uint8_t *buf;
    size_t len;
    size_t posted; /* send: payload bytes copied into posted fragments */
    int started;   /* send: a fragment is on the QP (it can no longer be withdrawn cleanly) */
    int dir;
};

/* A receive slot that a message filled, waiting to be taken (in arrival order). */
typedef struct rdma_arrival {
    uint32_t slot;
    rdma_hdr_t h;
} rdma_arrival_t;

/* What makes a connection resumable (rdma_resume.c). */
typedef struct rdma_resume {
    int enabled;
    int down;    /* suspended or resuming: from the failure until the peer's RESUME */
    int drop;    /* the QP and its id are to be destroyed at the next safe point */
    int got_bye; /* the peer said it closes on purpose */
    int adopt;   /* accepting side, a new QP from AGAIN: it goes to the connection named */
    int salvage; /* taking what a failed QP delivered before it goes (budget or not) */
    uint64_t conn_id;
    uint8_t job[AUTH_JOB_BYTES];
    uint8_t key[AUTH_KEY_BYTES]; /* connecting side: to prove the key again */
    uint32_t my_node;
    char src[TP_ADDR_MAX]; /* connecting side: its source ip, or "" */
    uint64_t hold_ns, failed_ns, next_dial_ns, dial_end_ns, suspended_total;
    int first_err;
    uint32_t attempts, resumes;
    uint64_t rx_count; /* data messages taken in full (RESUME tells the peer) */
    uint64_t tx_count; /* our sends completed: the peer has them */
    rdma_conn_t *next; /* the accepting sides' registry */
} rdma_resume_t;

struct rdma_conn {
    tp_conn_t base; /* what the transport's users hold */
    int state;
    int err;       /* the failure, once state is RDMA_ST_FAILED */
    int active;    /* the connecting side */
    int connected; /* rdma_cm connected: a disconnect is owed to the peer */
    int peer_gone; /* RDMA_CM_EVENT_DISCONNECTED came: handled once the CQ is drained */
    int eof;       /* the peer closed between messages: only what arrived can be received */
    int av_set;    /* the QP's address vector is fixed (RTR): the traffic class cannot change */
    uint8_t tos;
    char peer[TP_ADDR_MAX];
    struct rdma_event_channel *ch; /* this connection's own: its fd is one of poll_fds() */
    struct rdma_cm_id *id;
    /* Verbs resources (rdma_qp.c), made once the device is known. */
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc; /* nonblocking: its fd is the other of poll_fds() */
    struct ibv_cq *cq;           /* sends and receives */
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *bufs; /* depth send slots, then depth receive slots, slot bytes each */
    unsigned depth;
    uint32_t slot;
    /* Flow control (rdma_msg.c): a SEND only goes out against a receive the peer posted. */
    unsigned credits; /* the peer's receive slots that are free for us */
    unsigned peer_depth;
    uint32_t frag_max;      /* payload bytes per fragment: our send slot and the peer's receive */
    unsigned to_return;     /* our receive slots posted again, not announced to the peer yet */
    uint64_t rx_last_ns;    /* when the peer last sent anything */
    uint64_t probe_last_ns; /* when we last probed a silent peer (rdma_msg.c) */
    int probe_out;          /* that probe is still on the QP */
    uint64_t tx_bytes, rx_bytes; /* through our sends and receives (rdma_info.c) */
    uint64_t tx_moved_ns; /* with work requests on the send queue: when one last completed, or
                           * the first was posted (rdma_msg.c's stall check) */
    unsigned *free_send;
    unsigned nfree_send;
    rdma_req_t **send_last;  /* per send slot: the send whose last fragment it carries */
    rdma_arrival_t *arrived; /* ring of depth */
    unsigned arr_head, arr_count;
    rdma_hs_t hs;
    tp_queue_t sendq; /* sends with fragments still to post, in posting order */
    tp_queue_t sentq; /* sends fully posted, waiting for their last completion */
    tp_queue_t recvq; /* posted receives that no message has matched yet, in posting order */
    /* The message coming in, once its first fragment is routed: into rx_req, into rx_unexp,
     * or nowhere (its user is gone). */
    int rx_active;
    uint64_t rx_tag;
    size_t rx_len, rx_got;
    rdma_req_t *rx_req;
    tp_msg_t *rx_unexp;
    tp_kept_t kept; /* complete messages no receive has taken yet; forgotten tags */
    rdma_resume_t rs;
    tp_req_t *free_reqs;
    rdma_req_t reqs[RDMA_MAX_REQS];
};

/* Work requests of ours are on the send queue. */
static inline int rdma_tx_busy(const rdma_conn_t *c)
{
    return c->nfree_send < c->depth || c->probe_out;
}

static inline rdma_conn_t *rdma_conn_of(tp_conn_t *c)
{
    return (rdma_conn_t *)c;
}

static inline rdma_req_t *rdma_req_of(tp_req_t *r)
{
    return (rdma_req_t *)r;
}

/* rdma_id.c: event channels and ids (addresses: common/net_addr.h). */
/* A nonblocking event channel of its own for an id that will use the address ip (named in the
 * log); -ENODEV (logged) on a machine without RDMA devices. */
int rdma_chan_open(const char *ip, struct rdma_event_channel **ch_p);
/* A nonblocking event channel and an RC id on it, for use with the address ip (named in the
 * log); -ENODEV (logged) on a machine without RDMA devices. */
int rdma_id_open(const char *ip, void *ctx, struct rdma_event_channel **ch_p,
                 struct rdma_cm_id **id_p);
/* The next CM event of ch: 1, 0 if none is pending, or a negative errno (logged). */
int rdma_next_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev_p);
/* Why binding ip failed, logged: -ENODEV when no RDMA device carries it. */
int rdma_bind_error(const char *what, const char *ip, int err);
/* The name of the netdev under id's RoCE port: 0, or -ENOENT for a port without one. */
int rdma_id_netdev(struct rdma_cm_id *id, char name[IF_NAMESIZE]);
/* Whether id's port is ACTIVE and, on RoCE, its netdev up with a carrier. */
int rdma_id_link_up(struct rdma_cm_id *id);
/* Destroys id and ch (either may be NULL), or keeps them until id's port is up again. */
void rdma_id_release(struct rdma_cm_id *id, struct rdma_event_channel *ch);
/* Destroys the ids kept whose port is up again (at most every 100 ms). */
void rdma_id_sweep(void);

/* rdma_listen.c: the listener ops. */
int rdma_tp_listen(const char *ip, tp_listener_t **l_p, char *addr_out, size_t cap);
int rdma_tp_listen_fd(tp_listener_t *l);
int rdma_tp_accept(tp_listener_t *l, tp_key_lookup_fn lookup, void *ctx, tp_conn_t **c_p);
void rdma_tp_listen_close(tp_listener_t *l);

/* rdma_setup.c: connections through rdma_cm. */
int rdma_setup_connect(const char *src_ip, const char *addr, const uint8_t job[AUTH_JOB_BYTES],
                       const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, rdma_conn_t **c_p);
/* Connecting side: a new id that resolves the peer's address, with HELLO (AGAIN while the
 * connection is suspended) to follow; 0 or a negative errno (logged). */
int rdma_setup_dial(rdma_conn_t *c);
/* A connection for a CONNECT_REQUEST of the listener (before it is acked): answered at once,
 * accepted or rejected. NULL only if out of memory (the request is then rejected). */
rdma_conn_t *rdma_setup_accept(struct rdma_cm_event *ev, tp_key_lookup_fn lookup, void *ctx);
/* Handles the connection's pending CM events. */
void rdma_setup_events(rdma_conn_t *c);
void rdma_conn_free(rdma_conn_t *c);

/* rdma_hs.c: the job key, proven by both sides without sending it. */
int rdma_hs_ready(void);
void rdma_hs_init_connect(rdma_hs_t *hs, const uint8_t job[AUTH_JOB_BYTES],
                          const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node);
void rdma_hs_hello(const rdma_hs_t *hs, unsigned depth, uint32_t slot,
                   uint8_t out[RDMA_HELLO_BYTES]);
/* Accepting side: looks up the job of hello; 0 and the ACCEPT record, or -EACCES. */
int rdma_hs_answer(rdma_hs_t *hs, const rdma_hello_t *hello, tp_key_lookup_fn lookup, void *ctx,
                   unsigned depth, uint32_t slot, uint8_t out[RDMA_ACCEPT_BYTES]);
/* Connecting side: 0 and the CONFIRM MAC if the accepting side proved the key, or -EACCES. */
int rdma_hs_check_accept(rdma_hs_t *hs, const rdma_accept_pd_t *a, uint8_t mac[AUTH_MAC_BYTES]);
/* Accepting side: 0 if the connecting side proved the key, or -EACCES. */
int rdma_hs_check_confirm(const rdma_hs_t *hs, const uint8_t mac[AUTH_MAC_BYTES]);
/* Wipes the key. */
void rdma_hs_clear(rdma_hs_t *hs);

/* rdma_qp.c: verbs resources of a connection. */
/* PD, completion channel, CQ, QP in INIT and the staging slots, every receive posted. */
int rdma_qp_create(rdma_conn_t *c);
/* INIT -> RTR -> RTS with the settings' SL, timeout and retry count. */
int rdma_qp_ready(rdma_conn_t *c);
/* Stops the QP (everything posted is flushed) and, if connected, tells the peer. */
void rdma_qp_shutdown(rdma_conn_t *c);
void rdma_qp_destroy(rdma_conn_t *c);
uint8_t *rdma_send_slot(rdma_conn_t *c, unsigned slot);
uint8_t *rdma_recv_slot(rdma_conn_t *c, unsigned slot);
int rdma_slot_recv(rdma_conn_t *c, unsigned slot);
int rdma_slot_send(rdma_conn_t *c, unsigned slot, uint32_t bytes);
/* rdma_info.c: see transport.h's link_info(). */
void rdma_link_info(tp_conn_t *c, tp_link_info_t *li);
/* A zero-length RDMA WRITE: it touches no memory and takes none of the peer's receives, but
 * like any request it needs the peer's ACK, so a peer that is gone makes the QP fail. */
int rdma_post_probe(rdma_conn_t *c);

/* rdma_cq.c: completions. */
/* Handles the completions in the CQ: how many, or a negative errno (the connection failed). */
int rdma_cq_poll(rdma_conn_t *c);
/* Takes the completion channel's events, arms the CQ again and polls it: 0 or a negative
 * errno. Before the engine may sleep on the channel's fd. */
int rdma_cq_drain(rdma_conn_t *c);

/* rdma_msg.c: requests, the send side and failure. */
/* Takes r out of q; 0, or -ENOENT if it is not queued there. */
void rdma_msg_init(rdma_conn_t *c);
int rdma_msg_post(rdma_conn_t *c, int dir, void *buf, size_t len, uint64_t tag, rdma_req_t **r_p);
/* Moves everything that can move (CM events, completions, receives, sends): 0 or c->err. */
int rdma_msg_progress(rdma_conn_t *c);
/* Posts what the credits and free slots allow: fragments of queued sends, a credit return. */
int rdma_tx_progress(rdma_conn_t *c);
/* A control message (CONFIRM, RESUME with its count, BYE); it needs a credit and a free send
 * slot, as the first message of a connection has. */
int rdma_send_ctrl(rdma_conn_t *c, int type, uint64_t count, const void *payload, uint32_t len);
/* A send slot's completion: frees it and completes the send it ended. */
void rdma_tx_done(rdma_conn_t *c, unsigned slot);
void rdma_req_release(rdma_req_t *r);
void rdma_msg_cancel(rdma_req_t *r);
/* Fails the connection once, logging why (with the peer's address) at level, or not at all if
 * fmt is NULL (the cause is logged already): every pending request completes with err, the QP
 * stops and the peer is told. */
void rdma_conn_fail(rdma_conn_t *c, int err, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The peer disconnected: see rdma_msg_progress. */
void rdma_conn_eof(rdma_conn_t *c);

/* rdma_resume.c: connections that outlive their QP (tp_retry_t). */
/* Connecting side: what dialling again needs. */
void rdma_resume_init_connect(rdma_conn_t *c, const char *src_ip, const uint8_t *job,
                              const uint8_t *key, uint32_t my_node);
int rdma_resume_set(rdma_conn_t *c, const tp_retry_t *r);
/* Instead of failing with err: 0 if the connection suspends (or stays suspended), -1 if it
 * fails. */
int rdma_resume_suspend(rdma_conn_t *c, int err, const char *why);
/* Accepting side, a new request: 0, or -ENOENT for an AGAIN that names no held connection. */
int rdma_resume_check(const rdma_hello_t *hello);
/* Accepting side: the key is proven. Registers the connection, or marks it to be absorbed. */
void rdma_resume_ready(rdma_conn_t *c);
/* Accepting side, after the CONFIRM's slot went back: a marked connection gives its QP to the
 * one it names: 0, or a negative errno. */
int rdma_resume_adopt(rdma_conn_t *c);
/* Connecting side, the accepting side proved the key on a new QP: RESUME. */
int rdma_resume_begin(rdma_conn_t *c);
/* The peer's RESUME: what it has of ours completes, the rest goes again. 1, or a negative
 * errno. */
int rdma_resume_on_resume(rdma_conn_t *c, uint64_t count);
/* A suspended connection's step: the QP dropped, a dial, the hold time. 0, or the error it
 * fails with. */
int rdma_resume_progress(rdma_conn_t *c);
void rdma_resume_stats(rdma_conn_t *c, tp_retry_stats_t *st);
/* Closing: BYE first (resumable only), out of the registry, the key wiped. */
void rdma_resume_close(rdma_conn_t *c);

/* rdma_rx.c: the receive side. */
/* A receive slot's completion of bytes bytes: credits taken at once, the message queued. */
int rdma_rx_arrived(rdma_conn_t *c, unsigned slot, uint32_t bytes);
/* One arrived fragment of a data message: 1 taken, 0 not yet (nowhere to go), or a negative
 * errno. */
int rdma_rx_take(rdma_conn_t *c, const rdma_arrival_t *a);
/* Takes arrived messages in order while they have somewhere to go: 0, or a negative errno. */
int rdma_rx_progress(rdma_conn_t *c);
/* A posted receive: completed at once from a kept message (or with the connection's error),
 * or queued. */
void rdma_rx_post(rdma_conn_t *c, rdma_req_t *r);
/* Whether a message is partly in (a peer that closes now closes mid-message). */
int rdma_rx_busy(const rdma_conn_t *c);
void rdma_rx_forget(rdma_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns);
/* Frees the kept messages. */
void rdma_rx_free(rdma_conn_t *c);

#endif
