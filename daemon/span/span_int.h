/* A communicator spanning several daemons, inside the span layer (span.h). */
#ifndef HCCLD_SPAN_SPAN_INT_H
#define HCCLD_SPAN_SPAN_INT_H

#include <stdint.h>

#include "algo/algo.h"
#include "algo/cost.h"
#include "exec/l1.h"
#include "span/place.h"
#include "span/probe_hist.h"
#include "span/span.h"
#include "transport/tp_cm.h"
#include "transport/transport.h"

/* What a schedule was built for (zeroed padding: compared with memcmp). */
typedef struct sched_key {
    int32_t algo, kind;
    uint32_t root, pad;
    uint64_t count; /* the op's count (a rank's block); node blocks follow (node_count) */
} sched_key_t;

/* The level-1 input of one collective piece (rerun.c): its descriptor and the node's share
 * as gather_in() lays it out (at `off` of OUT, or of IN for the kinds that start there). */
typedef struct span_snap {
    desc_t d;
    int valid, in_in;
    uint64_t off, len, cap;
    uint8_t *buf;
} span_snap_t;

typedef struct span_plog span_plog_t;

/* A data connection to a peer daemon and how many comms use it: the children of a split
 * share their parent's (link.c); the last one to go closes it. */
typedef struct span_link {
    tp_conn_t *conn;
    uint32_t refs;
    uint32_t owner;           /* the comm that opened it */
    uint64_t serial;          /* link_view_t.serial */
    uint64_t walked;          /* the last span_env_links() that reported it */
    char peer[LINK_PEER_MAX]; /* the peer daemon's data address */
} span_link_t;

/* Closed data connections whose last figures span_env_links() has not reported yet. */
#define SPAN_CLOSED_MAX 64

struct span_env {
    tp_cm_t *cm;
    span_comm_t *comms;      /* every span comm here */
    probe_hist_t probe_hist; /* recent link measurements (probe.c) */
    uint64_t host;           /* span_env_set_host */
    uint32_t data_conns;     /* open now (shared ones once) */
    uint64_t link_serials;   /* handed out so far */
    uint64_t link_walks;     /* span_env_links() calls so far */
    link_view_t closed[SPAN_CLOSED_MAX];
    uint32_t nclosed;
};

struct span_comm {
    uint32_t id;         /* the engine's comm id */
    uint32_t nnodes, me; /* this node's index */
    span_place_t pl;     /* which node and level-1 position each global rank has */
    uint32_t nlocal;     /* this node's ranks */
    uint32_t *global_of; /* [nlocal]: global rank of each local member, in rank order */
    uint8_t *gone;       /* [nlocal]: the member left; its buffers are not touched again */
    l0_rank_t *ranks;    /* [nlocal]: the buffers of the collective in flight */
    uint8_t job_id[AUTH_JOB_BYTES], key[AUTH_KEY_BYTES];
    tp_cm_addrs_t *node_addrs; /* data addresses of every node: TCP, RDMA ("" if none) */
    tp_conn_t **conns;         /* by node; NULL for me (what l1 and the probe use) */
    span_link_t **links;       /* by node, the same connections with their use counts */
    uint32_t nshared;          /* connections taken from the parent comm */
    uint32_t tag;              /* this comm's part of every message tag (tag.h) */
    span_env_t *env;
    uint32_t nready;
    uint8_t *conn_ready;       /* [nnodes]: the connection to node i is ready (outgoing ones) */
    int forced[DESC_KIND_MAX]; /* the level-1 choice settings force per kind, or -1 */
    uint8_t forced_src[DESC_KIND_MAX]; /* enum algo_src: which setting forced it */
    /* Choose on algo_cost_fixed(), not measured links: 0, or why (ALGO_SRC_DETERMINISTIC or
     * ALGO_SRC_RETRY). */
    int deterministic;
    /* The cost model's verdict by kind and log2 of the block size: the choice (-1: not yet)
     * and every candidate's predicted microseconds (-1: does not serve the kind). */
    struct algo_pick {
        int8_t algo;
        uint8_t src; /* enum algo_src */
        float cost_us[ALGO_COUNT];
    } picks[DESC_KIND_MAX][64];
    link_cost_t lc;
    int log_ops;   /* a rank asked (HCCL_DEBUG=INFO) for each op's choice in the log */
    int qos_class; /* -1: none */
    span_qos_t qos;
    /* the operation in flight */
    int busy;
    /* The last piece said more of its op follow (DESC_F_MORE): until the next piece starts, or
     * this time passes, the op still counts as under way for QoS. */
    uint64_t more_until_ns;
    sched_t sched; /* kept after the op for the next one with the same key */
    sched_key_t sched_key;
    /* sched_fresh_reads() of the schedule over the input's range (sched_prepare): the flags,
     * its result (-EINVAL: not a kind or layout that reads in place) and whether the schedule
     * writes all of that range */
    uint8_t *fresh;
    int fresh_rc, fresh_all;
    l1_run_t *run;
    uint8_t *out, *in, *scratch; /* node buffers, kept across ops and grown on demand */
    uint8_t *work;               /* OUT of the op in flight: out, or local rank 0's receive range */
    uint64_t out_cap, in_cap, scratch_cap;
    desc_t d0;
    uint64_t check[4], check_in[4];   /* the op in flight as this node and the previous see it */
    uint64_t t0_ns;                   /* when the op in flight started */
    uint64_t t_l1_ns;                 /* when its level 1 started */
    uint64_t qos_since_ns;            /* QoS holds its next round back since then, or 0 */
    uint64_t qos_wait_ns;             /* time held back so far */
    struct p2p_flight *flights;       /* send/recv with other nodes in flight (p2p.c) */
    struct p2p_flight *spare_flights; /* finished records, reused */
    struct span_probe *probe;         /* link measurement in progress (probe.c) */
    struct span_abort *abort;         /* notices to and from the other nodes (abort.c) */
    struct span_drain *drain;         /* a restart of a node under way (drain.c), or NULL */
    struct span_rerun *rerun;         /* a node back from a restart to agree with (rerun.c) */
    struct span_plog *plog;           /* send/recv kept for a crash of the other node, or NULL */
    /* The level-1 input of the collective piece in flight (cur) and of the last one done here
     * (done), kept where a crash of the other node may make them run again (rerun.c). */
    span_snap_t *snap_cur, *snap_done;
    int crash_safe; /* keeps them: op retry, connections of its own */
    /* The piece in flight waits to start (run NULL): held until the node back from a restart
     * says where it is (1), or to run again from snap_cur (2). */
    int held;
    int shadow;        /* the run is of snap_done, for the other node only (rerun.c) */
    uint64_t done_seq; /* the last collective piece done here, if done_any */
    int done_any;
    uint64_t expect_seq; /* the returning node's first piece, to match this node's next */
    int expect_set;
    uint64_t started; /* collective pieces started since the links came up */
    /* The node that came back after a restart and dials every other (the others do not dial
     * it); UINT32_MAX: none, node j dials every node i < j. */
    uint32_t returning;
    tp_conn_t **early;  /* [nnodes]: connections stashed for the respan, or NULL */
    uint64_t respan_ns; /* when it dropped its connections for the returning node, or 0 */
    /* [nnodes]: messages of send/recv from node i that no receive had taken when its old
     * connection went (drain.c); they go before the new connection's, or NULL */
    tp_msg_t **carry;
    int probed;           /* lc holds measured figures: collectives may start */
    uint64_t ready_by_ns; /* connections not ready and measured by then: the comm times out */
    tp_retry_t retry;     /* what its own data connections do when they fail (op retry) */
    /* MaxCnt: failures of one data connection the collective in flight rides out (0: any
     * within the hold); each connection's resumes when it started, and when to look again */
    uint32_t retry_max_cnt;
    uint32_t *op_resumes;
    uint64_t retry_look_ns;
    span_prof_t prof; /* of the collective in flight */
    /* events not yet taken (span_ops_t.event), oldest at evq_head */
    span_ev_t *evq;
    uint32_t evq_head, evq_n, evq_cap;
    uint32_t evq_lost;  /* events lost for want of memory: BROKEN follows the queue */
    span_ev_t ev_spare; /* what span_ev_push hands out then, written and dropped */
    span_comm_t *next;  /* in env->comms */
};

/* Local member of global rank g, or UINT32_MAX when another node holds it. */
static inline uint32_t span_local(const span_comm_t *sc, uint32_t g)
{
    return g < sc->pl.nranks && sc->pl.node[g] == sc->me ? sc->pl.pos[g] - sc->pl.first[sc->me]
                                                         : UINT32_MAX;
}

/* Whether this node dials node i (else node i dials it). */
static inline int span_dials(const span_comm_t *sc, uint32_t i)
{
    if (i == sc->me)
        return 0;
    if (sc->returning == sc->me)
        return 1;
    return i != sc->returning && i < sc->me;
}

/* ops.c: queues an event (span.h) and returns it for the caller to fill. Without memory it is
 * lost (logged): the comm then breaks with HCCL_E_MEMORY once the events before it are taken,
 * and progress stops, so that no one waits for the lost one. */
span_ev_t *span_ev_push(span_comm_t *sc, span_ev_kind_t kind);
/* What span_ev_push allocates with (malloc; tests make it fail). */
extern void *(*span_ev_alloc)(size_t bytes);
/* Queues BROKEN with status and why (printf-style); returns 1 (work done). */
int span_break(span_comm_t *sc, HcclResult status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* link.c */
void span_comm_free(span_comm_t *sc);
uint32_t span_links(const span_comm_t *sc, char (*addrs)[SPAN_ADDR_MAX], uint32_t max);
int span_conns_progress(span_comm_t *sc);
int span_ready_timeout(span_comm_t *sc);
/* A connection from node peer handed over by the connection manager: 0 taken, or -errno
 * (not one this comm waits for; the caller closes it). */
int span_link_take(span_comm_t *sc, uint32_t peer, tp_conn_t *conn);
/* Drops every data connection and opens them again, the links measured again, with node
 * `returning` (back from a restart) dialling the others: what every node of the comm does at
 * the same point after a drain (drain.c). Ops wait until the comm is ready again, at most the
 * op retry hold. */
void span_respan(span_comm_t *sc, uint32_t returning);
/* Closes every data connection, and what was posted on them (receives in flight go back to
 * the engine: span_p2p_again); the comm does nothing more until span_respan. */
void span_links_drop(span_comm_t *sc);
/* A connection from node peer that a draining comm cannot take yet (the peer reopened its
 * connections first): kept for span_respan. 1 kept, 0 not (the caller closes it). */
int span_link_stash(span_comm_t *sc, uint32_t peer, tp_conn_t *conn);
/* coll.c */
int span_coll_start(span_comm_t *sc, const desc_t *d, const l0_rank_t *ranks);
/* Stops the level-1 run of the piece in flight, which runs again from snap_cur (rerun.c). */
void span_coll_hold(span_comm_t *sc);
/* Runs the piece of snap_done again, its result dropped: the other node lost it in a crash. */
int span_coll_shadow(span_comm_t *sc);
int span_coll_progress(span_comm_t *sc);
void span_coll_end(span_comm_t *sc);
/* p2p.c */
int span_p2p_post(span_comm_t *sc, uint32_t l, const desc_t *d, uint64_t t_in, void *buf);
int span_p2p_progress(span_comm_t *sc);
unsigned span_p2p_cancel(span_comm_t *sc, HcclResult status);
/* Whether a send with another node is in flight. */
int span_p2p_sending(const span_comm_t *sc);
/* Takes back every transfer in flight, each a P2P_AGAIN event, newest first, for the engine to
 * post again on the connections that come after: after a drain only receives (none has data),
 * after a crash of the other node also sends not yet written in full (its ranks send again what
 * they did not see sent). */
void span_p2p_again(span_comm_t *sc);
void span_p2p_free(span_comm_t *sc);
int span_p2p_poll_fds(const span_comm_t *sc, struct pollfd *pfd, int max);
/* probe.c */
int span_probe_progress(span_comm_t *sc);
int span_probe_poll_fds(const span_comm_t *sc, struct pollfd *pfd, int max);
void span_probe_free(span_comm_t *sc);
/* abort.c */
int span_abort_progress(span_comm_t *sc, int broken);
/* The same without waiting for the busy comm's next look: a transfer just failed because a
 * peer went away, which may have said why first. */
int span_abort_listen_now(span_comm_t *sc);
void span_abort_send(span_comm_t *sc, uint32_t rank, int what, uint64_t limit);
int span_abort_pending(const span_comm_t *sc);
void span_abort_free(span_comm_t *sc);
/* drain.c */
/* This daemon stops: brings the comm to a point where no op is under way on any node (1), or
 * says it cannot (0: no op retry, not ready, shared connections). */
int span_drain_lead(span_comm_t *sc);
/* Whether a drain this node leads has not ended yet. */
int span_drain_pending(const span_comm_t *sc);
/* Whether the comm may start no collective piece now (the drain holds it at its limit). */
int span_drain_holds(const span_comm_t *sc);
/* Whether a drain involves this node (it leads or follows one). */
int span_drain_active(const span_comm_t *sc);
/* Whether a transfer may no longer start: a send once this node sent its FLUSH, any once it
 * said it is at rest (drain.c). */
int span_drain_closed(const span_comm_t *sc, int send);
int span_drain_progress(span_comm_t *sc);
/* The same without waiting for the next look: reads what the other nodes said so far. */
int span_drain_listen_now(span_comm_t *sc);
/* Node `node` is back from a crash of its daemon in a comm of 3 nodes or more: the barrier of
 * the nodes left before they drop their connections (drain.c, BACK). 0, or the comm broke (a
 * drain or another node's return under way). */
int span_drain_back(span_comm_t *sc, uint32_t node);
/* Whether the comm is in that barrier: its collectives wait for the respan. */
int span_drain_back_holds(const span_comm_t *sc);
void span_drain_free(span_comm_t *sc);
/* rerun.c */
/* A fresh connection from node peer while the comm's own to it is held: the peer's daemon
 * crashed and came back. 1 taken (the comm starts over with it), 0 not (the caller closes it). */
int span_rerun_accept(span_comm_t *sc, uint32_t peer, tp_conn_t *conn);
/* A node is back from a crash: the piece under way here stops, to run again from its start
 * once the nodes agree where the comm goes on (a run for the returning node only goes). */
void span_rerun_stop(span_comm_t *sc);
/* After a respan: wait for the returning node's words on where it is (a node that does not
 * return), or say them (the returning node: `below`, from its ranks, once connected; its
 * first collective piece with that piece). */
void span_rerun_expect(span_comm_t *sc, uint64_t below);
/* Whether the comm has words to say or hear (keeps the engine looking). */
int span_rerun_active(const span_comm_t *sc);
/* The returning node's first collective piece: tells the others its sequence number. */
void span_rerun_announce(span_comm_t *sc, uint64_t seq);
/* Whether this node holds its collectives until the returning node said where it is. */
int span_rerun_waits(const span_comm_t *sc);
/* This node's next piece is seq: whether it is where the returning node starts (0), else the
 * comm breaks. */
int span_rerun_check(span_comm_t *sc, uint64_t seq);
int span_rerun_progress(span_comm_t *sc);
void span_rerun_free(span_comm_t *sc);
/* Whether sends to another node wait: the nodes have not agreed yet what each lacks of
 * send/recv after a respan (p2p_log.c). */
int span_rerun_p2p_holds(const span_comm_t *sc);
/* The snapshots (span_snap_t) of a comm. */
void span_snaps_free(span_comm_t *sc);
/* p2p_log.c: what a comm across 2 daemons keeps of its send/recv for a crash of the other. */
/* next: span_spec_t.p2p_next (a node back from a restart), or NULL: all 0. 0 or -ENOMEM. */
int span_plog_init(span_comm_t *sc, const uint64_t *next);
void span_plog_free(span_comm_t *sc);
/* Send/Recv d of local member l completed (buf: a send's data, copied). */
void span_plog_done(span_comm_t *sc, uint32_t l, const desc_t *d, const void *buf);
/* Whether send d of local member l, posted again, is held by the other node already. */
int span_plog_held(const span_comm_t *sc, uint32_t l, const desc_t *d);
/* A respan: what this node holds of the other's sends now, counting those carried over. */
void span_plog_respan(span_comm_t *sc, const tp_msg_t *const *carried);
/* The counts this node tells node i (span_plog_counts_len bytes), and applies from it: sends
 * again what node i lacks, or breaks the comm (1) when it lacks what no copy holds. */
size_t span_plog_counts_len(const span_comm_t *sc, uint32_t i);
void span_plog_counts(const span_comm_t *sc, uint32_t i, uint64_t *out);
int span_plog_apply(span_comm_t *sc, uint32_t i, const uint64_t *in);
int span_plog_progress(span_comm_t *sc);
/* Withdraws the sends again in flight (their connection goes). */
void span_plog_drop_again(span_comm_t *sc);

#endif
