/*
 * Communicators that span daemons: the layer below the engine (sched/) that runs the part of
 * a comm's work that crosses the network. It owns the comm's data connections (their links,
 * shared with a split's parent), the link measurement, the level-1 collectives between
 * daemons with the level-0 gathering and scattering around them, send/recv with ranks of other
 * nodes, and the notices that tell the other nodes a comm broke or lost a rank.
 *
 * The engine keeps what every comm has: its members' queues, matching, the state machine and
 * QoS. It drives a span comm through the table span_ops_t and hands it work (the next
 * collective every local rank posted, a send or receive with another node); the span comm
 * never calls up. What happened comes back as events (span_ev_t), which the engine takes out
 * after each call and acts on in order: an op done with its status, the comm broken with its
 * status and reason, a rank of another node gone.
 *
 * Per daemon there is one span_env_t: the connection manager (transport/tp_cm.h) that accepts
 * data connections and hands them to their comm, and what all of its comms share. Every call
 * runs under the engine's lock.
 */
#ifndef HCCLD_SPAN_SPAN_H
#define HCCLD_SPAN_SPAN_H

#include <poll.h>
#include <stdint.h>

#include "hccl/hccl.h"
#include "l0.h"
#include "link_info.h"
#include "shm.h"
#include "wait_info.h"

typedef struct span_env span_env_t;
typedef struct span_comm span_comm_t;

#define SPAN_ADDR_MAX 64 /* "ip:port" of a data listener, IPv6 in brackets (TP_ADDR_MAX) */
#define SPAN_LINK_MAX 32 /* a link's description: "tcp", "rdma/rxe0:1" (TP_DESC_MAX) */
#define SPAN_WHY_MAX 192
#define SPAN_RANK_MAX 65536 /* ranks of a comm: send/recv tags carry them in 16 bits (tag.h) */

/* A comm of nglobal ranks on nnodes daemons (sched/engine.h, engine_multi_spec_t, says what
 * each field means). */
typedef struct span_spec {
    uint32_t comm_id, nnodes, me, local, nglobal;
    const uint32_t *rank_node;
    const uint32_t *global; /* [local]: the global rank of each local member, ascending */
    const char *const *addrs, *const *rdma_addrs;
    const uint8_t *job_id, *key;
    /* What its ranks ask of the level-1 algorithms (span_level1_check): HCCL_ALGO or the
     * config's hcclAlgo (algo_by_config), HCCL_ALGORITHM; NULL or "": chosen per op. */
    const char *algo, *algorithm;
    int algo_by_config, deterministic, log_ops;
    int qos_class;
    uint32_t parent_comm_id;
    const uint8_t *share;
    int inherit_links;
    uint32_t connect_timeout_s;
    uint64_t retry_hold_ms;
    uint32_t retry_max_cnt; /* MaxCnt: failures of one connection a collective rides out */
    /* The node that is back after a restart (the others wait for it after its drain) and
     * dials every other; UINT32_MAX (or any value >= nnodes): none. */
    uint32_t returning;
    /* A node back from a restart: per local member l (global rank order) and peer g, the next
     * send/recv number: send_next at [l * nglobal + g], recv_next at [(local + l) * nglobal +
     * g]; or NULL. */
    const uint64_t *p2p_next;
    /* A node back from a restart: its ranks saw every collective piece below this complete
     * (CommRejoinReq.coll_next); 0: unknown. */
    uint64_t coll_below;
} span_spec_t;

/* What the engine lends a span comm: QoS admission of each round and the DSCP marking of
 * its class (sched/qos_sched.h), asked for, never told. */
typedef struct span_qos {
    int (*admit)(void *ctx, int cls, uint64_t bytes, uint64_t now);
    int (*dscp)(void *ctx, int cls); /* -1: none */
    void *ctx;
} span_qos_t;

/* Where a span comm is: its data connections are not all up; up, its links are being
 * measured (nothing starts before); ready. */
typedef enum span_state { SPAN_CONNECTING, SPAN_PROBING, SPAN_READY } span_state_t;

/* How a collective between daemons spent its time, and what it put on the wire. */
typedef struct span_prof {
    uint64_t t_start, l0_ns, l1_ns, qos_wait_ns;
    int algo;
    uint8_t src; /* enum algo_src */
    uint64_t tx_bytes, rx_bytes;
} span_prof_t;

typedef enum span_ev_kind {
    SPAN_EV_COLL_DONE, /* the collective started last ended: status, prof */
    SPAN_EV_P2P_DONE,  /* a send or receive with another node ended: local, tag, status */
    SPAN_EV_BROKEN,    /* the comm cannot go on: its ops fail with status; why; culprit */
    SPAN_EV_RANK_LEFT, /* another node says global rank culprit left after limit pieces */
    /* A receive with another node taken back before the connections go for a restart
     * (drain.c): d of local member local, taken in at t_in, is to be queued again first (the
     * events come newest first). */
    SPAN_EV_P2P_AGAIN,
} span_ev_kind_t;

typedef struct span_ev {
    span_ev_kind_t kind;
    HcclResult status;
    uint32_t culprit; /* global rank at fault, UINT32_MAX: none named */
    int set_culprit;  /* BROKEN: the event names the culprit (a notice from another node) */
    uint64_t limit;   /* RANK_LEFT */
    /* P2P_DONE: the member that posted it, its tag, when it was taken in and put on the wire
     * (t_post 0: withdrawn, no timing), and its bytes and direction (counted when it
     * succeeded) */
    uint32_t local;
    uint64_t tag, t_in, t_post, bytes;
    int is_send;
    span_prof_t prof; /* COLL_DONE */
    desc_t d;         /* P2P_AGAIN */
    char why[SPAN_WHY_MAX];
} span_ev_t;

/* What hccld-ctl shows of a span comm. */
typedef struct span_stats {
    int algo;    /* level-1 algorithm of its last collective, or -1 */
    int on_wire; /* a collective runs now */
    int measured;
    double alpha_us, gbps, reduce_gbps, overhead_us, host_load;
    uint32_t round, nrounds; /* on the wire: the level-1 round in progress, of how many */
    uint32_t nwaiting;       /* on the wire: the nodes it waits on now */
    wait_info_t waiting[WAIT_INFO_MAX];
    /* Op retry: its data connections suspended now (failed, waiting to come back), and the
     * longest of those suspensions so far. */
    uint32_t nsuspended;
    uint64_t suspended_ns;
} span_stats_t;

/* Notices to the other nodes (span_ops_t.notify). */
enum { SPAN_NOTICE_BROKE = 1, SPAN_NOTICE_LEFT = 2, SPAN_NOTICE_MISMATCH = 3 };

typedef struct span_ops {
    span_state_t (*state)(const span_comm_t *sc);
    /* Advances the comm: connections, link measurement and its deadline until ready; then the
     * other nodes' notices, the collective in flight and the transfers. A broken comm (broken
     * set) only pushes out its notice. Stops after an event that changes the comm (BROKEN,
     * RANK_LEFT). Returns how much it did (0: nothing). */
    int (*progress)(span_comm_t *sc, int broken);
    /* The next event, oldest first: 1, or 0 when there is none. */
    int (*event)(span_comm_t *sc, span_ev_t *ev);
    /* Whether a collective is in flight (then the next may not start). */
    int (*busy)(const span_comm_t *sc);
    /* Starts the collective d that every local rank posted; ranks[l] are the buffers of local
     * member l (in rank order) for it. 0, or a negative errno (nothing started). */
    int (*coll_start)(span_comm_t *sc, const desc_t *d, const l0_rank_t *ranks);
    /* Puts send/receive d of local member l (peer d->root on another node) on the wire; buf is
     * its data. 1 posted, 0 not yet (connection not ready, or too much outstanding), <0 the
     * connection failed. Its end is a P2P_DONE event. */
    int (*p2p_post)(span_comm_t *sc, uint32_t l, const desc_t *d, uint64_t t_in, void *buf);
    /* Withdraws every transfer in flight: each is a P2P_DONE event with status. */
    unsigned (*p2p_cancel)(span_comm_t *sc, HcclResult status);
    /* Tells the other nodes (once) that the comm broke, mismatched, or lost global rank `rank`
     * after `limit` pieces (SPAN_NOTICE_*). */
    void (*notify)(span_comm_t *sc, uint32_t rank, int what, uint64_t limit);
    /* Local member l left: its buffers are not touched again. 1 if the collective in flight
     * works in them directly (the comm must stop), else 0. */
    int (*rank_left)(span_comm_t *sc, uint32_t l);
    /* Whether the comm waits on the network (the engine then polls instead of sleeping). */
    int (*waits)(const span_comm_t *sc, int broken);
    /* Whether its class counts as having an op under way at now (QoS). */
    int (*qos_active)(const span_comm_t *sc, uint64_t now);
    int (*poll_fds)(const span_comm_t *sc, int broken, struct pollfd *pfd, int max);
    void (*stats)(const span_comm_t *sc, span_stats_t *st, char (*link)[SPAN_LINK_MAX],
                  uint32_t max, uint32_t *nnodes);
    /* The data addresses of the nodes it holds a ready connection to, once measured (what a
     * child may share): at most max; returns how many. */
    uint32_t (*links)(const span_comm_t *sc, char (*addrs)[SPAN_ADDR_MAX], uint32_t max);
    /* This daemon stops: brings the comm to rest on every node for a restart (drain.c). 1
     * under way, 0 it cannot be (no op retry, not ready, shared connections). */
    int (*drain)(span_comm_t *sc);
    /* Whether that drain has not ended (at rest, or failed) yet. */
    int (*draining)(const span_comm_t *sc);
    void (*free)(span_comm_t *sc);
} span_ops_t;

/* The real one. */
extern const span_ops_t span_ops;

span_env_t *span_env_new(void);
void span_env_free(span_env_t *env);
/* engine_listen(): HCCL_TRANSPORT's mode, listeners on ip. */
int span_env_listen(span_env_t *env, const char *ip, char *addr_out, char *rdma_out);
int span_env_expect(span_env_t *env, const uint8_t *job_id, const uint8_t *key);
void span_env_set_host(span_env_t *env, uint64_t host);
uint32_t span_env_data_conns(const span_env_t *env);
/* Calls fn for every ready data connection (shared ones once), with its health. */
void span_env_links(span_env_t *env, link_view_fn fn, void *ctx);
/* Accepts data connections and hands them to their comms. */
int span_env_progress(span_env_t *env);
int span_env_accepting(const span_env_t *env);
int span_env_poll_fds(const span_env_t *env, struct pollfd *pfd, int max);
void span_env_polled(span_env_t *env, const struct pollfd *pfd, int n);

/* A span comm for sp with its connections opening; why (SPAN_WHY_MAX) says what failed.
 * 0 and *sc_p, or a negative errno: -ENOMEM, -EINVAL (the placement does not add up),
 * -ENOENT/-EBUSY (the parent's connections cannot be shared), -ECONNREFUSED/-ENODEV (no
 * connection to a node). On failure *sc_p may still hold a comm (to free), already broken. */
int span_comm_new(span_env_t *env, const span_spec_t *sp, const span_qos_t *qos, span_comm_t **sc_p,
                  char *why);

/* Checks what a rank asks of the level-1 algorithms (span_spec_t's algo, algorithm,
 * algo_by_config, deterministic): 0, or -EINVAL with the reason in err. notice gets "" or the
 * disagreement of HCCL_ALGO and HCCL_ALGORITHM. Neither is logged. */
int span_level1_check(const char *algo, const char *algorithm, int algo_by_config,
                      int deterministic, char *err, size_t cap, char *notice, size_t ncap);
#endif
