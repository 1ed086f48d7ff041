/*
 * A simulator for level-1 schedules: builds every node's schedule of one collective and runs
 * them all in one process on real data (uint64 elements, wrapping SUM), checking matching,
 * deadlock freedom, bounds, reads of uninitialised data, conflicting steps within a round
 * and the final result against a reference.
 */
#ifndef HCCLD_TESTS_SIM_SIM_H
#define HCCLD_TESTS_SIM_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"

typedef struct sim_stats {
    uint64_t steps;      /* over all nodes */
    uint64_t transfers;  /* matched send/receive pairs */
    uint32_t max_rounds; /* the most rounds any node has */
} sim_stats_t;

/* Returns 0, or -1 with a message in err. */
int sim_run(int algo, int kind, uint32_t nnodes, uint32_t root, uint64_t count, char *err,
            size_t errlen);
/* The same, with statistics (stats may be NULL). */
int sim_run_stats(int algo, int kind, uint32_t nnodes, uint32_t root, uint64_t count,
                  sim_stats_t *stats, char *err, size_t errlen);
/* A kind with a block per rank (ALLGATHER, REDUCE_SCATTER, SCATTER, ALLTOALL) on nodes
 * holding different numbers of ranks (algo_build_ranks): node i holds ranks[i], each with
 * blocks of unit elements. */
int sim_run_ranks(int algo, int kind, uint32_t nnodes, uint32_t root, uint64_t unit,
                  const uint32_t *ranks, char *err, size_t errlen);
/* Runs schedules from `build` instead of algo_build: build(arg, me, out) fills node me's
 * schedule (freed by the simulator with sched_free) and returns 0. For testing the simulator
 * itself on schedules that are wrong on purpose. */
typedef int (*sim_build_fn)(void *arg, uint32_t me, sched_t *out);
int sim_run_fn(int kind, uint32_t nnodes, uint32_t root, uint64_t count, sim_build_fn build,
               void *arg, char *err, size_t errlen);
/* An estimate of a run's size from a few nodes' schedules (averaged, times nnodes): total
 * steps, and total elements held in OUT plus moved by steps. Returns 0, or -1 if the
 * schedule cannot be built. */
int sim_estimate(int algo, int kind, uint32_t nnodes, uint32_t root, uint64_t count,
                 uint64_t *steps, uint64_t *elems);

#endif
