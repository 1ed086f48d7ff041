/*
 * The multinode suite's shared parts (multinode.c) and the test cases its other files add
 * (test_multinode_tools.c, test_multinode_share.c) to the suite in test_multinode.c.
 */
#ifndef HCCLD_TESTS_MULTINODE_H
#define HCCLD_TESTS_MULTINODE_H

#include <check.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

#define MAXD 5
/* Daemons a cluster may have (test_many_daemons_fullmesh). */
#define CLUSTER_MAX 18

typedef struct cluster {
    pid_t pids[CLUSTER_MAX];
    char socks[CLUSTER_MAX][256];
    unsigned n;
} cluster_t;

/* n daemons: the test's own and n - 1 spawned ones. */
void cluster_start(cluster_t *c, unsigned n);
/* Stops the spawned daemons; fails the test if one died. */
void cluster_stop(cluster_t *c);
/* n ranks of a running cluster, rank r on daemon place[r], run fn; returns how many failed. */
int run_placed(cluster_t *c, uint32_t n, const uint8_t *place, rank_fn fn, void *arg);
/* `per` ranks on each daemon, in blocks as hccl-run places them; returns how many failed. */
int run_ranks(cluster_t *c, unsigned per, rank_fn fn, void *arg);
/* nd fresh daemons with `per` ranks each run fn; returns how many ranks failed. */
int run_on_cluster(unsigned nd, unsigned per, rank_fn fn, void *arg);

/* The comm has the right size and rank, and an allreduce of the ranks' ids adds up. */
int rank_formed(HcclComm comm, uint32_t r, uint32_t n, void *arg);
/* Rank 0 sends 10 elements to the last rank, which expects 12: HCCL_E_PARA there. */
int rank_p2p_mismatch(HcclComm comm, uint32_t r, uint32_t n, void *arg);

/* test_multinode_tools.c: hccl-run's placements and hccl_perf_test's -m and -A, into tc. */
void multinode_add_tools(TCase *tc);
/* test_multinode_share.c: the "tuning" and "share" test cases. */
void multinode_add_share(Suite *s);
/* test_multinode_lanes.c: the "lanes" test case (small ops straight between the ranks). */
void multinode_add_lanes(Suite *s);

#endif
