/*
 * The ceiling for issue 23's goal 4 (zero-copy allreduce, 2 ranks, 32-64 MiB) on this machine:
 * two threads, one per core, run the cooperative path's own kernel (common/l0.c: each computes
 * one share of the fp32 sum into both outputs) on buffers of SIZE bytes, out of place, again and
 * again on the same inputs, as `hccl_perf_test -z` does. Nothing else runs: no descriptors, no
 * processes, no daemon.
 *
 *   whole     each op in one share per thread, one barrier per op: the memory-bound ceiling;
 *   pieces    each op cut into PIECE-byte pieces with two barriers each (posted, done), as the
 *             cooperative path cuts it (HCCL_BUFFSIZE's chunk, 1 MiB): what the barriers cost;
 *   memcpy    the same bytes read and written without the sum: each thread copies its share of
 *             each input to the output of the same rank with glibc's memcpy, one barrier per op.
 *             It does not depend on our kernel.
 *
 * Our kernel runs with streaming stores off and on (the path streams from 32 MiB on 2 ranks).
 *
 *   zc_ceiling [SIZE_MIB [PIECE_KIB [ROUNDS]]]   (default 64, 1024, 7; bench/zc_ceiling.sh runs it
 *                                                 beside hccl_perf_test -z)
 *
 * Prints a line per setting: its key (what bench/zc_ceiling.sh reads), busbw in GB/s (2 ranks:
 * the op's bytes over its time) as the median of the rounds of ITERS ops each, and the range.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"
#include "hccl/hccl.h"
#include "l0.h"
#include "shm.h"

#define ITERS 20
#define MAX_ROUNDS 99

typedef struct {
    l0_rank_t ranks[2];
    uint64_t count; /* floats per buffer */
    uint64_t piece; /* floats per piece; count for one piece per op */
    int stream;
    int copy_only;       /* memcpy instead of the kernel */
    atomic_uint arrived; /* barrier: threads arrived, over all barriers so far */
    double us;           /* thread 0's time for ITERS ops */
} run_t;

typedef struct {
    run_t *r;
    unsigned me;
} side_t;

/* Both threads reach barrier number b (counting from 1). Spins, yielding: two threads on two
 * cores, as the cooperative path's wait does before it sleeps. */
static void barrier(run_t *r, unsigned b)
{
    atomic_fetch_add(&r->arrived, 1);
    while (atomic_load(&r->arrived) < 2 * b)
        sched_yield();
}

/* The same bytes as the kernel's share, read and written by memcpy: half of each input to the
 * same rank's output. */
static void copy_share(const run_t *r, unsigned me)
{
    uint64_t half = r->count / 2 * sizeof(float), begin = me * half;
    uint64_t len = me == 1 ? r->count * sizeof(float) - half : half;

    for (unsigned q = 0; q < 2; q++)
        memcpy(r->ranks[q].recv + begin, r->ranks[q].send + begin, len);
}

static void *side(void *arg)
{
    const side_t *s = arg;
    run_t *r = s->r;
    cpu_set_t set;
    unsigned b = 0;

    CPU_ZERO(&set);
    CPU_SET(s->me, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    barrier(r, ++b);
    double t = now_us();
    for (int i = 0; i < ITERS; i++) {
        for (uint64_t first = 0; first < r->count; first += r->piece) {
            uint64_t n = r->count - first < r->piece ? r->count - first : r->piece;
            l0_rank_t at[2];
            for (unsigned q = 0; q < 2; q++)
                at[q] = (l0_rank_t){.send = r->ranks[q].send + first * sizeof(float),
                                    .recv = r->ranks[q].recv + first * sizeof(float)};
            l0_op_t op = {.kind = DESC_ALLREDUCE,
                          .dtype = HCCL_DATA_TYPE_FP32,
                          .redop = HCCL_REDUCE_SUM,
                          .nranks = 2,
                          .count = n,
                          .stream = (uint8_t)r->stream,
                          .ranks = at};
            if (r->piece < r->count)
                barrier(r, ++b); /* posted */
            if (r->copy_only)
                copy_share(r, s->me);
            else
                l0_run_part(&op, s->me, 2);
            barrier(r, ++b); /* done */
        }
    }
    if (s->me == 0)
        r->us = now_us() - t;
    return NULL;
}

typedef struct {
    const char *key, *what;
    int pieces, stream, copy_only;
} setting_t;

static const setting_t settings[] = {
    {"whole-plain", "whole op, plain stores", 0, 0, 0},
    {"whole-stream", "whole op, streaming stores", 0, 1, 0},
    {"pieces-plain", "pieces, plain stores", 1, 0, 0},
    {"pieces-stream", "pieces, streaming stores", 1, 1, 0},
    {"memcpy", "memcpy, whole op", 0, 0, 1},
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

/* GB/s of one round. */
static double one_round(uint8_t *const bufs[4], uint64_t count, uint64_t piece, const setting_t *w)
{
    run_t r = {.count = count,
               .piece = w->pieces ? piece : count,
               .stream = w->stream,
               .copy_only = w->copy_only};
    side_t s[2] = {{&r, 0}, {&r, 1}};
    pthread_t t[2];

    for (unsigned q = 0; q < 2; q++)
        r.ranks[q] = (l0_rank_t){.send = bufs[q], .recv = bufs[2 + q]};
    for (unsigned q = 0; q < 2; q++)
        pthread_create(&t[q], NULL, side, &s[q]);
    for (unsigned q = 0; q < 2; q++)
        pthread_join(t[q], NULL);
    return (double)count * sizeof(float) * ITERS / (r.us * 1e3);
}

int main(int argc, char **argv)
{
    uint64_t bytes = (argc > 1 ? strtoull(argv[1], NULL, 10) : 64) << 20;
    uint64_t piece = (argc > 2 ? strtoull(argv[2], NULL, 10) : 1024) << 10;
    int rounds = argc > 3 ? atoi(argv[3]) : 7;
    uint8_t *bufs[4];
    double gbs[NSETTINGS][MAX_ROUNDS];

    if (bytes == 0 || piece < sizeof(float) || bytes % sizeof(float) != 0 || rounds < 1 ||
        rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: zc_ceiling [SIZE_MIB [PIECE_KIB [ROUNDS (1-%d)]]]\n", MAX_ROUNDS);
        return 2;
    }
    for (unsigned q = 0; q < 4; q++) {
        if ((bufs[q] = aligned_alloc(4096, bytes)) == NULL) {
            fprintf(stderr, "zc_ceiling: out of memory\n");
            return 1;
        }
        for (uint64_t i = 0; i < bytes / sizeof(float); i++)
            ((float *)bufs[q])[i] = (float)(i % 1000) + q;
    }
    /* Rounds take turns between the settings, so that a noisy minute hits them alike. */
    for (int round = 0; round < rounds; round++)
        for (unsigned w = 0; w < NSETTINGS; w++)
            gbs[w][round] =
                one_round(bufs, bytes / sizeof(float), piece / sizeof(float), &settings[w]);
    printf("%llu MiB, 2 threads, fp32 sum into both outputs, busbw GB/s, median of %d rounds of "
           "%d ops (pieces of %llu KiB):\n",
           (unsigned long long)(bytes >> 20), rounds, ITERS, (unsigned long long)(piece >> 10));
    for (unsigned w = 0; w < NSETTINGS; w++) {
        double m = sort_median(gbs[w], rounds);
        printf("  %-14s %6.2f  (%.2f-%.2f)  %s\n", settings[w].key, m, gbs[w][0],
               gbs[w][rounds - 1], settings[w].what);
    }
    for (unsigned q = 0; q < 4; q++)
        free(bufs[q]);
    return 0;
}
