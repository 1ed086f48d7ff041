/*
 * The data-path engine: one thread that takes descriptors from every client's submission ring,
 * validates them, queues them per communicator and rank, runs an operation once every rank it
 * needs has posted it (through exec), and posts completions. It sleeps on the doorbell eventfd
 * when there is nothing to do. The server (control plane, libuv loop) adds and removes sessions
 * and communicators through the calls below; they are thread-safe.
 */
#ifndef HCCLD_SCHED_ENGINE_H
#define HCCLD_SCHED_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "hccl/hccl.h"
#include "link_info.h"
#include "shm.h"
#include "wait_info.h"

typedef struct engine engine_t;

#define ENGINE_ADDR_MAX 64    /* "ip:port" of a data listener, IPv6 in brackets */
#define ENGINE_RANK_MAX 65536 /* ranks of a comm across daemons (send/recv tags carry 16 bits) */
#define ENGINE_LAT_BUCKETS 28 /* 1 us .. 2^27 us (134 s), then the rest */

typedef struct engine_stats {
    uint64_t ops_done;       /* operations (or chunks) completed */
    uint64_t ops_queued;     /* descriptors waiting for peers */
    uint64_t descs_rejected; /* descriptors that failed validation */
    uint64_t net_tx_bytes;   /* payload sent to peer daemons by completed collectives */
    uint64_t net_rx_bytes;   /* payload received from them */
    /* Collective pieces the daemon ran, inside the node or across daemons, by how long they
     * took from start (every local rank posted) to completion: bucket k counts those under
     * 2^k microseconds (the last bucket: all the rest); sum and count in us. Pieces that
     * cooperating ranks run among themselves (l0_mode coop) never reach the daemon. */
    uint64_t lat_bucket[ENGINE_LAT_BUCKETS];
    uint64_t lat_sum_us, lat_count;
    uint32_t data_conns; /* data connections to peer daemons open now (shared ones once) */
} engine_stats_t;

#define ENGINE_STATS_RANKS 256
#define ENGINE_LINK_MAX 32 /* as TP_DESC_MAX */

#define ENGINE_WHY_MAX 160

typedef struct engine_comm_stats {
    uint64_t ops_done;
    uint32_t queued;
    int broken;
    HcclResult broken_status;        /* when broken: the HcclResult its ops fail with */
    char broken_why[ENGINE_WHY_MAX]; /* and why */
    int ready;   /* connected to the other daemons and measured: ops run at once */
    int algo;    /* level-1 algorithm of its last collective across daemons, or -1 */
    int on_wire; /* a collective runs with the other daemons now */
    /* On the wire: its level-1 round in progress of nrounds, and the daemons that round waits
     * on (transfers pending): whom "every rank here posted, waiting on other daemons" means. */
    uint32_t round, nrounds, nwaiting;
    wait_info_t waiting[WAIT_INFO_MAX];
    uint32_t nlocal; /* members here */
    /* Collective pieces each local member posted so far (the first ENGINE_STATS_RANKS), and
     * its global rank: the members behind the others are the ones a stuck collective waits
     * for. */
    uint64_t posted[ENGINE_STATS_RANKS];
    uint32_t ranks[ENGINE_STATS_RANKS];
    /* Its data connection to each node: transport and device ("tcp", "rdma/rxe0:1"; "": none,
     * or this node), for the first ENGINE_STATS_RANKS nodes. */
    uint32_t nnodes;
    char link[ENGINE_STATS_RANKS][ENGINE_LINK_MAX];
    /* The cost model's figures for its links, once measured (span/probe.c). */
    int measured;
    double alpha_us, gbps, reduce_gbps, overhead_us, host_load;
    /* Op retry: data connections suspended now, and the longest such suspension so far. */
    uint32_t nsuspended;
    uint64_t suspended_ns;
} engine_comm_stats_t;

typedef struct engine_session_stats {
    uint64_t submitted;
    uint64_t completed;
} engine_session_stats_t;

/* workers: executor threads including the engine's own (0 = online CPUs). */
engine_t *engine_create(unsigned workers);
/* Finishes the operation in progress, fails everything queued, stops the thread. */
void engine_destroy(engine_t *eng);
/* Stops the engine's thread (and with it every op under way) without completing anything:
 * from now on nothing writes into the clients' segments, which a restarted daemon takes over
 * (docs/operations.md). engine_session_remove and engine_destroy then only free. */
void engine_halt(engine_t *eng);
/* Before a halt for a restart: brings every comm that spans daemons and has op retry to rest
 * on all its nodes (span/drain.c), so that its ranks carry on with the next daemon. Returns
 * how many are being brought to rest; engine_drained() says when they all are (or failed). */
unsigned engine_drain(engine_t *eng);
int engine_drained(engine_t *eng);
/* The eventfd clients write after publishing work while the engine sleeps. */
int engine_doorbell_fd(const engine_t *eng);
unsigned engine_workers(const engine_t *eng);

/* A client's mapped segment; the engine never unmaps it: the caller does so after remove. */
int engine_session_add(engine_t *eng, uint64_t sid, void *base, void *arena,
                       const shm_layout_t *layout);
/* Detaches a session: ops it posted are dropped, communicators it belongs to fail their ops
 * with HCCL_E_REMOTE. When this returns the engine no longer touches the segment. */
void engine_session_remove(engine_t *eng, uint64_t sid);

/* Starts accepting data connections from peer daemons on ip (port chosen): over TCP, whose
 * address goes to addr_out, and over RDMA when a device carries ip and HCCL_TRANSPORT is not
 * "tcp" (its address goes to rdma_out, else ""; HCCL_TRANSPORT=rdma without a device is an
 * error). 0 or a negative errno. Each holds at least ENGINE_ADDR_MAX bytes. */
int engine_listen(engine_t *eng, const char *ip, char *addr_out, char *rdma_out);

/* What a rank asks of the level-1 algorithms of a comm spanning daemons. */
typedef struct engine_level1 {
    const char *algo;      /* HCCL_ALGO's syntax (or the config's hcclAlgo); NULL or "": none */
    const char *algorithm; /* HCCL_ALGORITHM (RING, MESH, RHD, TREE, PAIRWISE); NULL or "" */
    int algo_by_config;    /* algo is the comm config's hcclAlgo (named so in errors) */
    /* HCCL_DETERMINISTIC: the kinds chosen per op are chosen on fixed link figures, so every
     * run of a job picks the same algorithms (and so sums in the same order). */
    int deterministic;
} engine_level1_t;
/* Longest algo and algorithm a rank may ask for (with the terminating NUL). */
#define ENGINE_ALGO_MAX 512
#define ENGINE_ALGORITHM_MAX 32
/* 0, or -EINVAL with the reason in err (not logged). notice gets "" or the disagreement of
 * HCCL_ALGO and HCCL_ALGORITHM for the rank (HCCL_ALGO wins). */
int engine_level1_check(const engine_level1_t *w, char *err, size_t cap, char *notice, size_t ncap);

/* A communicator of nglobal ranks on nnodes daemons, placed in any way: rank_node[g] is global
 * rank g's node, `local` of them are node me's, and members[l] is the session of the l-th of
 * those in rank order; addrs[i] is node i's data address. */
typedef struct engine_multi_spec {
    uint32_t comm_id, nnodes, me, local, nglobal;
    const uint64_t *members;
    const uint32_t *rank_node;
    const char *const *addrs;
    /* Node i's RDMA data address, "" if it has none (NULL: nobody has): two nodes that both
     * have one connect over RDMA (unless HCCL_TRANSPORT=tcp). */
    const char *const *rdma_addrs;
    const uint8_t *job_id, *key;
    /* What its ranks ask of the level-1 algorithms (engine_level1_check), or NULL: every
     * algorithm chosen per op on measured links. */
    const engine_level1_t *level1;
    int log_ops;   /* log every op's algorithm choice, whatever the daemon's log level */
    int qos_class; /* index of its class (engine_set_class), or -1 */
    /* A child of a split: share[i] set takes the parent comm's connection to node i (the node
     * with the same data address) instead of connecting or accepting one. Both ends of every
     * pair must decide alike (the root daemon decides for all, see Membership). */
    uint32_t parent_comm_id; /* 0: none */
    const uint8_t *share;    /* [nnodes], or NULL */
    int inherit_links;       /* every pair shares: use the parent's link figures, probe nothing */
    /* HCCL_CONNECT_TIMEOUT (0: 120 s): a comm whose data connections are not all ready and
     * measured this long after its creation here fails (HCCL_E_TIMEOUT): a peer that gave up
     * connecting, or never could, ends in an error on every node, not a hang. */
    uint32_t connect_timeout_s;
    /* Op retry between daemons: a data connection that fails waits this long (ms) to come
     * back before its ops fail (transport.h, tp_retry_t); 0: no retry. */
    uint64_t retry_hold_ms;
    uint32_t retry_max_cnt; /* MaxCnt: failures of its connections one op rides out */
    /* This daemon is back after a restart and dials the others, which wait for it
     * (span_spec_t.returning); 0: formed as usual. */
    int returning;
    const uint64_t *p2p_next; /* span_spec_t.p2p_next */
    uint64_t coll_below;      /* span_spec_t.coll_below */
} engine_multi_spec_t;
/* 0, or -ENOMEM, -EEXIST, -ENOENT (a session, the parent or its connection is gone), -EBUSY
 * (a comm on a shared connection has the same tag bits, see span/tag.h). */
int engine_comm_create_multi(engine_t *eng, const engine_multi_spec_t *spec);
/* The data addresses of the nodes comm_id holds a ready connection to, once its links are
 * measured and while it is not broken (else none): what a child of it may share. At most max
 * into addrs; returns how many. */
uint32_t engine_comm_links(engine_t *eng, uint32_t comm_id, char (*addrs)[ENGINE_ADDR_MAX],
                           uint32_t max);
/* Peers may connect for this job before its comm exists here: their data connections are
 * authenticated with this key and held until the comm is created (or a minute passed). */
int engine_job_expect(engine_t *eng, const uint8_t *job_id, const uint8_t *key);

/* members[r] is the session of rank r. 0, or -ENOMEM / -EEXIST / -ENOENT. */
int engine_comm_create(engine_t *eng, uint32_t comm_id, uint32_t nranks, const uint64_t *members);
/* Where the ranks of a comm re-registered after a daemon restart had got (form/rejoin.c): every
 * collective piece below done_below completed for some rank, so that the old daemon had
 * written every rank's output: a rank that posts it again gets its completion at once. Pieces
 * from done_below on run again, but those below maybe_started (every rank had posted them, so
 * the old daemon may have begun) that overwrite their own input (DESC_F_OVERWRITES) fail with
 * HCCL_E_REMOTE. p2p_done[a * nranks + b]: the same bound for the pieces rank a sends to b. */
typedef struct engine_resume {
    uint64_t done_below, maybe_started;
    const uint64_t *p2p_done; /* nranks * nranks, or NULL */
} engine_resume_t;
/* Sets comm_id's resume bounds (right after engine_comm_create): 0, -ENOENT or -ENOMEM. */
int engine_comm_resume(engine_t *eng, uint32_t comm_id, const engine_resume_t *r);
/* Rank `rank` left comm_id (HcclCommDestroy); the comm is freed once every rank left. */
void engine_comm_leave(engine_t *eng, uint32_t comm_id, uint32_t rank);

void engine_get_stats(engine_t *eng, engine_stats_t *st_p);
/* Calls fn (under the engine's lock: briefly) for every ready data connection to a peer
 * daemon, with its health (link_info.h). */
void engine_links(engine_t *eng, link_view_fn fn, void *ctx);
/* The host this daemon runs on (topo_host_id; 0: unknown), which the link probe tells peer
 * daemons so that the cost model knows who shares a machine's cores. */
void engine_set_host(engine_t *eng, uint64_t host);
/* QoS class i (0..7): its priority (0 first), cap on bytes sent to peer daemons in bits/s (0:
 * none) and the DSCP marking its data connections (-1: none). Takes effect for the next round
 * (and the next connection) of every comm of the class. */
/* hold_us: the class keeps lower ones off the wire this long after its last op (its latency
 * target), so that its next op does not wait behind a round of theirs. */
void engine_set_class(engine_t *eng, int i, uint32_t priority, uint64_t max_bw_bps, int dscp,
                      uint32_t hold_us);
/* Class i's traffic to peer daemons: bytes so far, bytes/s over the last second, comms held
 * back (over the cap, or behind a higher class) in the last pass. */
typedef struct engine_class_stats {
    uint64_t sent_bytes, rate_Bps;
    uint32_t waiting;
} engine_class_stats_t;
void engine_class_stats(engine_t *eng, int i, engine_class_stats_t *st_p);
/* now_ns() of the engine thread's last turn of its loop (it turns at least once a second). */
uint64_t engine_last_beat_ns(engine_t *eng);
int engine_get_comm_stats(engine_t *eng, uint32_t comm_id, engine_comm_stats_t *st_p);
int engine_get_session_stats(engine_t *eng, uint64_t sid, engine_session_stats_t *st_p);

#endif
