/*
 * An alpha-beta(-gamma) cost model for the level-1 algorithms, and the choice of the
 * cheapest algorithm for a collective.
 * A transfer of b bytes takes alpha + beta * b; reducing b received bytes takes gamma * b.
 * Sends are eager (a send finishes once its data is on the wire, whether or not the peer has
 * posted the receive), which is how TCP behaves for the sizes involved. Unless shared_nic is
 * set, a node's transfers in one round run on separate links, so a round costs its slowest
 * step ("max over steps of alpha + beta * bytes"); with shared_nic the bytes a node sends (or
 * receives) in one round add up on its single link.
 * overhead_us is the processor time a node spends on each message it sends or receives,
 * one message after another (LogP's o); it is what makes a round of n - 1 messages dearer
 * than a round of one. For TCP between daemons, set shared_nic and a measured overhead:
 * with neither, fullmesh (every transfer at once, each at full speed) wins every contest.
 * `bytes` is the per-block size of the descriptor (count times element size); schedules are
 * built with 4-byte elements to cut pipelines the way the executor will for FP32.
 */
#ifndef HCCLD_ALGO_COST_H
#define HCCLD_ALGO_COST_H

#include <stdint.h>

typedef struct link_cost {
    double alpha_us;          /* latency of one message */
    double beta_us_per_byte;  /* inverse bandwidth of a link */
    double gamma_us_per_byte; /* reduction of received data (RECV_REDUCE, local REDUCE) */
    double overhead_us;       /* per message and node, serial (0: none) */
    int shared_nic;           /* 1: all of a node's transfers share one link */
    /* Daemons of the comm per processor core where they share a host (several daemons on
     * one machine, in tests and benches: loopback, network namespaces); <= 1: every node
     * has processors enough. Above 1 a collective takes at least this times the mean
     * processor work of a node (its messages' overhead, the copies of its bytes through the
     * kernel, its reductions): the work of the daemons on a host queues for its cores (replay
     * only, up to ALGO_COST_REPLAY_MAX). */
    double host_load;
} link_cost_t;

/* Up to this many nodes algo_cost replays every node's real schedule; above, it uses closed
 * forms of the same schedules. */
#define ALGO_COST_REPLAY_MAX 64

/* TCP-like figures (25 us, 10 Gbit/s, 10 GB/s reductions, 5 us per message, one NIC per
 * node): what a comm assumes until it has measured its links, and what HCCL_DETERMINISTIC
 * chooses with always, so that the choice depends on nothing a run measures. */
link_cost_t algo_cost_fixed(void);

/* Predicted microseconds for the whole collective, or -1 if algo does not serve kind. */
double algo_cost(int algo, int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc);
/* The two ways algo_cost works, for tests: the timed replay of all nodes' schedules (any
 * nnodes, but costly beyond a few hundred), and the closed forms. */
double algo_cost_replay(int algo, int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc);
double algo_cost_formula(int algo, int kind, uint32_t nnodes, uint64_t bytes,
                         const link_cost_t *lc);
/* The cheapest algorithm that serves kind (ties go to the lower enum algo_id), and its cost
 * in *cost_p if not NULL; -EINVAL if none serves kind. */
int algo_select(int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc, double *cost_p);
/* algo_select that also gives every algorithm's cost in costs[ALGO_COUNT] (-1: it does not
 * serve kind), for the log of the choice; the daemon chooses with it. */
int algo_select_costs(int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc,
                      double *costs);

#endif
