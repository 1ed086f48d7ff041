/* A communicator spanning several daemons, as the engine sees it (see multi.c). */
#ifndef HCCLD_SCHED_MULTI_H
#define HCCLD_SCHED_MULTI_H

#include <stdint.h>

#include "algo/algo.h"
#include "algo/cost.h"
#include "exec/l1.h"
#include "sched/engine.h"
#include "sched/multi_place.h"
#include "sched/qos_sched.h"
#include "transport/transport.h"

/* What a schedule was built for (zeroed padding: compared with memcmp). */
typedef struct sched_key {
    int32_t algo, kind;
    uint32_t root, pad;
    uint64_t count; /* the op's count (a rank's block); node blocks follow (node_count) */
} sched_key_t;

/* A data connection to a peer daemon and how many comms use it: the children of a split
 * share their parent's (multi_conn.c); the last one to go closes it. */
typedef struct eng_link {
    tp_conn_t *conn;
    uint32_t refs;
} eng_link_t;

typedef struct eng_multi {
    uint32_t nnodes, me; /* this node's index */
    multi_place_t pl;    /* which node and level-1 position each global rank has */
    uint8_t job_id[AUTH_JOB_BYTES], key[AUTH_KEY_BYTES];
    char (*addrs)[TP_ADDR_MAX];      /* data address of every node */
    char (*rdma_addrs)[TP_ADDR_MAX]; /* RDMA data address of every node, "" if none */
    tp_conn_t **conns;               /* by node; NULL for me (what l1 and the probe use) */
    eng_link_t **links;              /* by node, the same connections with their use counts */
    uint32_t nshared;                /* connections taken from the parent comm */
    uint32_t tag;                    /* this comm's part of every message tag (multi_tag.h) */
    engine_t *eng;
    uint32_t nready;
    uint8_t *conn_ready;       /* [nnodes]: the connection to node i is ready (outgoing ones) */
    int forced[DESC_KIND_MAX]; /* the level-1 choice settings force per kind, or -1 */
    uint8_t forced_src[DESC_KIND_MAX]; /* enum algo_src: which setting forced it */
    int deterministic;                 /* choose on algo_cost_fixed(), not measured links */
    /* The cost model's verdict by kind and log2 of the block size: the choice (-1: not yet)
     * and every candidate's predicted microseconds (-1: does not serve the kind). */
    struct algo_pick {
        int8_t algo;
        uint8_t src; /* enum algo_src */
        float cost_us[ALGO_COUNT];
    } picks[DESC_KIND_MAX][64];
    link_cost_t lc;
    int log_ops;      /* a rank asked (HCCL_DEBUG=INFO) for each op's choice in the log */
    int qos_class;    /* -1: none */
    qos_sched_t *qos; /* the engine's */
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
    struct p2p_flight *flights;       /* send/recv with other nodes in flight (multi_p2p.c) */
    struct p2p_flight *spare_flights; /* finished records, reused */
    struct multi_probe *probe;        /* link measurement in progress (multi_probe.c) */
    struct multi_abort *abort;        /* notices to and from the other nodes (multi_abort.c) */
    int probed;                       /* lc holds measured figures: collectives may start */
    uint64_t ready_by_ns; /* connections not ready and measured by then: the comm times out */
} eng_multi_t;

#endif
