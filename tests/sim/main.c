/*
 * sim_all: every (algorithm, collective) pair an algorithm serves, for node counts 1..64,
 * 256, 1024 and 4096, several counts and roots, through the simulator. Cases too large for
 * this machine (by an estimate of steps and elements) are skipped and counted; at 1024 and
 * 4096 nodes that leaves the small counts and the logarithmic algorithms.
 *   sim_all [-v] [nnodes...]      -v prints every case; nnodes limits the node counts.
 * Ends with a Check-style summary line and exits nonzero on any failure.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo/algo.h"
#include "shm.h"
#include "sim.h"

#define STEP_BUDGET (5ull << 20)
#define ELEM_BUDGET (1ull << 26)
#define MAX_REPORTS 20

typedef struct tally {
    unsigned long checks, failures, skipped;
    int verbose;
} tally_t;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int has_root(int kind)
{
    return kind == DESC_BROADCAST || kind == DESC_REDUCE || kind == DESC_SCATTER;
}

/* Adds v to the set in a[] unless it is there already. */
static int add_unique(uint64_t *a, int m, uint64_t v)
{
    for (int k = 0; k < m; k++)
        if (a[k] == v)
            return m;
    a[m] = v;
    return m + 1;
}

static int counts_for(int kind, uint32_t n, uint64_t *c)
{
    int m = 0;

    if (kind == DESC_BARRIER)
        return add_unique(c, m, 0);
    m = add_unique(c, m, 0);
    m = add_unique(c, m, 1);
    m = add_unique(c, m, n - 1);
    m = add_unique(c, m, 7ull * n + 3);
    /* Large enough that pipelines cut several pieces (see algo_pieces). */
    if (n <= 4)
        m = add_unique(c, m, 100003);
    else if (n <= 8)
        m = add_unique(c, m, 20011);
    else if (n <= 16)
        m = add_unique(c, m, 4099);
    return m;
}

static int roots_for(int kind, uint32_t n, uint64_t *r)
{
    int m = add_unique(r, 0, 0);

    if (has_root(kind)) {
        m = add_unique(r, m, n - 1);
        m = add_unique(r, m, n / 2);
    }
    return m;
}

static void one_case(tally_t *t, int algo, int kind, uint32_t n, uint32_t root, uint64_t count)
{
    char err[512];
    uint64_t steps, elems;
    double t0;

    if (sim_estimate(algo, kind, n, root, count, &steps, &elems) != 0 || steps > STEP_BUDGET ||
        elems > ELEM_BUDGET) {
        t->skipped++;
        if (t->verbose)
            printf("skip %-8s kind %d n=%u root=%u count=%llu\n", algo_name(algo), kind, n, root,
                   (unsigned long long)count);
        return;
    }
    t0 = now();
    t->checks++;
    if (sim_run(algo, kind, n, root, count, err, sizeof(err)) != 0) {
        if (t->failures++ < MAX_REPORTS)
            printf("FAIL %s\n", err);
    } else if (t->verbose) {
        printf("ok   %-8s kind %d n=%u root=%u count=%llu (%.3f s)\n", algo_name(algo), kind, n,
               root, (unsigned long long)count, now() - t0);
    }
}

/* NB and NHR cut their blocks with the same arithmetic whatever the blocks' sizes: uneven ones
 * are checked up to this many nodes (every wrap and cut of theirs occurs below it), not to 64,
 * which would make these cases a third of the simulator's time. */
#define NONUNIFORM_RANKS_MAX 24

/* The kinds with a block per rank on nodes holding different numbers of ranks
 * (algo_build_ranks): node i holds 1 + (i * 7 + seed) % 3 ranks of `unit` elements each, or,
 * with seed 2, none on every third node; unit 0 gives empty blocks everywhere. Rooted kinds
 * take roots 0 and n - 1. */
static void ranks_cases(tally_t *t, uint32_t n)
{
    static const int kinds[] = {DESC_ALLGATHER, DESC_REDUCE_SCATTER, DESC_SCATTER, DESC_ALLTOALL};
    static const uint64_t units[] = {0, 1, 5, 1031};
    uint32_t *ranks = malloc(n * sizeof(*ranks));
    char err[512];

    for (int algo = 0; ranks != NULL && n <= 64 && algo < ALGO_COUNT; algo++)
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]) &&
                           (n <= NONUNIFORM_RANKS_MAX || (algo != ALGO_NB && algo != ALGO_NHR));
             k++)
            for (size_t u = 0; algo_serves(algo, kinds[k]) && u < sizeof(units) / sizeof(units[0]);
                 u++)
                for (uint32_t seed = 0; seed < 3; seed++)
                    for (uint32_t root = 0; root < (kinds[k] == DESC_SCATTER && n > 1 ? 2 : 1);
                         root++) {
                        uint32_t r = root ? n - 1 : 0;
                        for (uint32_t i = 0; i < n; i++)
                            ranks[i] =
                                seed == 2 ? (i % 3 == 1 ? 0 : 1 + i % 2) : 1 + (i * 7 + seed) % 3;
                        t->checks++;
                        if (sim_run_ranks(algo, kinds[k], n, r, units[u], ranks, err,
                                          sizeof(err)) != 0) {
                            if (t->failures++ < MAX_REPORTS)
                                printf("FAIL ranks (unit %llu, seed %u): %s\n",
                                       (unsigned long long)units[u], seed, err);
                        } else if (t->verbose) {
                            printf("ok   %-8s kind %d n=%u root=%u ranks unit %llu seed %u\n",
                                   algo_name(algo), kinds[k], n, r, (unsigned long long)units[u],
                                   seed);
                        }
                    }
    free(ranks);
}

static void run_nodes(tally_t *t, uint32_t n)
{
    ranks_cases(t, n);
    for (int algo = 0; algo < ALGO_COUNT; algo++) {
        for (int kind = DESC_ALLREDUCE; kind <= DESC_BARRIER; kind++) {
            uint64_t counts[8], roots[4];
            int nc, nr;

            if (!algo_serves(algo, kind))
                continue;
            nc = counts_for(kind, n, counts);
            nr = roots_for(kind, n, roots);
            for (int i = 0; i < nc; i++)
                for (int j = 0; j < nr; j++)
                    one_case(t, algo, kind, n, (uint32_t)roots[j], counts[i]);
        }
    }
}

int main(int argc, char **argv)
{
    static const uint32_t big[] = {256, 1024, 4096};
    tally_t t = {0};
    int explicit = 0;
    double t0 = now();

    /* Cases allocate and free hundreds of megabytes; keeping freed memory in the heap instead
     * of returning it to the kernel saves refaulting it in the next case. */
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            t.verbose = 1;
        } else {
            explicit = 1;
            run_nodes(&t, (uint32_t)strtoul(argv[i], NULL, 10));
        }
    }
    if (!explicit) {
        for (uint32_t n = 1; n <= 64; n++)
            run_nodes(&t, n);
        for (size_t k = 0; k < sizeof(big) / sizeof(big[0]); k++) {
            double tn = now();
            run_nodes(&t, big[k]);
            printf("sim_all: %u nodes: %.1f s\n", big[k], now() - tn);
        }
    }
    printf("sim_all: %lu cases run, %lu skipped as too large, %.1f s\n", t.checks, t.skipped,
           now() - t0);
    printf("%lu%%: Checks: %lu, Failures: %lu, Errors: 0\n",
           t.checks ? (t.checks - t.failures) * 100 / t.checks : 100, t.checks, t.failures);
    return t.failures == 0 && t.checks > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
