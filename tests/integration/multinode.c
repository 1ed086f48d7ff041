/*
 * What the multinode test files share: a cluster of daemons on loopback (daemon 0 is the
 * test's own, the root), ranks placed on it in any way, and a few rank functions.
 */
#include <stdio.h>
#include <stdlib.h>

#include "multinode.h"

void cluster_start(cluster_t *c, unsigned n)
{
    c->n = n;
    /* Daemon 0 is the test's own daemon (the root: it issues the root infos). */
    snprintf(c->socks[0], sizeof(c->socks[0]), "%s", harness_socket());
    c->pids[0] = 0;
    for (unsigned i = 1; i < n; i++) {
        c->pids[i] = harness_daemon_spawn(c->socks[i], sizeof(c->socks[i]));
        ck_assert_int_gt(c->pids[i], 0);
    }
}

void cluster_stop(cluster_t *c)
{
    for (unsigned i = 1; i < c->n; i++) {
        ck_assert_msg(harness_alive(c->pids[i]), "daemon %u died", i);
        ck_assert_msg(harness_daemon_stop(c->pids[i]) == 0, "daemon %u did not stop on SIGTERM", i);
    }
}

int rank_formed(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    uint32_t got_n = 0, got_r = 99;
    float x = (float)r, y = 0;

    if (HcclGetRankSize(comm, &got_n) != HCCL_SUCCESS || got_n != n ||
        HcclGetRankId(comm, &got_r) != HCCL_SUCCESS || got_r != r)
        return 1;
    if (HcclAllReduce(&x, &y, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) !=
            HCCL_SUCCESS ||
        y != (float)(n * (n - 1) / 2))
        return 2;
    return 0;
}

/* Rank 0 sends 10 elements to the last rank (another daemon), which expects 12. */
int rank_p2p_mismatch(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float buf[12] = {0};
    HcclResult rc = HCCL_SUCCESS, want = HCCL_SUCCESS;

    if (r == 0)
        rc = HcclSend(buf, 10, HCCL_DATA_TYPE_FP32, n - 1, comm, NULL);
    else if (r == n - 1)
        rc = HcclRecv(buf, 12, HCCL_DATA_TYPE_FP32, 0, comm, NULL), want = HCCL_E_PARA;
    if (rc != want)
        fprintf(stderr, "rank %u: got %d, want %d\n", r, rc, want);
    return rc != want;
}

/* n ranks of a running cluster, rank r on daemon place[r], run fn; returns how many failed. */
int run_placed(cluster_t *c, uint32_t n, const uint8_t *place, rank_fn fn, void *arg)
{
    char **socks = calloc(n, sizeof(*socks));
    pid_t *pids = calloc(n, sizeof(*pids));
    int failed = (int)n;

    ck_assert(socks != NULL && pids != NULL);
    for (uint32_t r = 0; r < n; r++)
        socks[r] = c->socks[place[r]];
    if (harness_spawn_ranks_on(n, socks, fn, arg, 240, pids) == 0)
        failed = harness_wait(pids, n, 240);
    free(socks);
    free(pids);
    return failed;
}

/* The ranks of a running cluster, `per` on each daemon (in blocks, as hccl-run places them),
 * run fn; returns how many failed. */
int run_ranks(cluster_t *c, unsigned per, rank_fn fn, void *arg)
{
    uint8_t place[CLUSTER_MAX * 2];

    for (uint32_t r = 0; r < c->n * per; r++)
        place[r] = (uint8_t)(r / per);
    return run_placed(c, c->n * per, place, fn, arg);
}

/* nd fresh daemons with `per` ranks each run fn; returns how many ranks failed. */
int run_on_cluster(unsigned nd, unsigned per, rank_fn fn, void *arg)
{
    cluster_t c;
    int failed;

    cluster_start(&c, nd);
    failed = run_ranks(&c, per, fn, arg);
    cluster_stop(&c);
    return failed;
}
