/*
 * hccl_perf_test -A: level-1 algorithms compared in one run. One comm per name, split off the
 * world comm while HCCL_ALGO names it; their iterations interleaved, each after a barrier, so
 * that load from elsewhere falls on all of them alike; a row per size with each one's median
 * iteration (the slowest rank's).
 */
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "perf_test.h"

#define MAX_VARIANTS 8

struct variants {
    int n;
    char name[MAX_VARIANTS][32];
    HcclComm comm[MAX_VARIANTS];
    double *us[MAX_VARIANTS]; /* each timed iteration */
};

/* Sets name to val, or unsets it for NULL. */
static void env_put(const char *name, const char *val)
{
    if (val != NULL)
        setenv(name, val, 1);
    else
        unsetenv(name);
}

/* One comm per name of opt.algos, split off the world comm while HCCL_ALGO names it ("auto":
 * the caller's HCCL_ALGO and HCCL_ALGORITHM, or none; the forced ones without the caller's
 * HCCL_ALGORITHM, which would only disagree). The caller's settings are restored. */
static int variants_make(struct bench *b, struct variants *v)
{
    const char *saved = getenv("HCCL_ALGO"), *saved_short = getenv("HCCL_ALGORITHM");
    char *keep = saved != NULL ? strdup(saved) : NULL, *list = strdup(b->opt.algos), *save = NULL,
         *keep_short = saved_short != NULL ? strdup(saved_short) : NULL, env[64];
    int rc = 0;

    if (list == NULL || (saved != NULL && keep == NULL) ||
        (saved_short != NULL && keep_short == NULL)) {
        free(list);
        free(keep);
        free(keep_short);
        return -1;
    }
    for (char *t = strtok_r(list, ",", &save); t != NULL && rc == 0;
         t = strtok_r(NULL, ",", &save)) {
        if (v->n == MAX_VARIANTS || strlen(t) >= sizeof(v->name[0])) {
            fprintf(stderr, "%s: -A takes up to %d names of up to %zu characters\n", perf_prog,
                    MAX_VARIANTS, sizeof(v->name[0]) - 1);
            rc = -1;
            break;
        }
        snprintf(env, sizeof(env), "level0:NA;level1:%s", t);
        int is_auto = strcmp(t, "auto") == 0;
        env_put("HCCL_ALGO", is_auto ? keep : env);
        env_put("HCCL_ALGORITHM", is_auto ? keep_short : NULL);
        HcclResult r = HcclCommSplit(b->comm, 0, b->rank, &v->comm[v->n]);
        if (r != HCCL_SUCCESS) {
            fprintf(stderr, "%s: rank %u: comm for -A %s: %s (%d)\n", perf_prog, b->rank, t,
                    HcclGetErrorString(r), (int)r);
            rc = -1;
            break;
        }
        snprintf(v->name[v->n], sizeof(v->name[0]), "%s", t);
        v->us[v->n] = malloc((size_t)b->opt.iters * sizeof(double));
        if (v->us[v->n++] == NULL) {
            rc = -1;
        }
    }
    env_put("HCCL_ALGO", keep);
    env_put("HCCL_ALGORITHM", keep_short);
    free(keep);
    free(keep_short);
    free(list);
    return v->n == 0 ? -1 : rc;
}

static void variants_free(struct bench *b, struct variants *v)
{
    for (int i = 0; i < v->n; i++) {
        perf_hccl_failed(b, "HcclCommDestroy", HcclCommDestroy(v->comm[i]));
        free(v->us[i]);
    }
}

/* One size: each variant checked (if asked) and warmed up, then ITERS rounds in which every
 * variant runs once after a barrier, the first one of a round taking turns. us[i] gets
 * variant i's median, the slowest rank's. */
static int compare_size(struct bench *b, struct variants *v, const struct coll_size *cs, double *us,
                        uint64_t *wrong)
{
    HcclComm world = b->comm;
    double med[MAX_VARIANTS];
    uint64_t bad = 0;
    void *send, *recv;
    int rc = 0;

    b->coll->buffers(b, cs, 0, &send, &recv);
    for (int i = 0; i < v->n && rc == 0; i++) {
        uint64_t w = 0;
        b->comm = v->comm[i];
        rc = (b->opt.check && perf_check_once(b, cs, send, recv, &w) != 0) ||
             perf_run_iters(b, cs, send, recv, b->opt.warmup, NULL) != 0;
        bad += w;
    }
    b->comm = world;
    if (rc != 0) {
        return -1;
    }
    for (int it = 0; it < b->opt.iters; it++) {
        for (int k = 0; k < v->n; k++) {
            int i = (it + k) % v->n;
            /* Each run starts from a barrier: otherwise it would pay for the tail of the run
             * before it (daemons still forwarding a tree's blocks when the ranks are done),
             * always the same other algorithm's. */
            TRY(b, HcclBarrier(world, NULL));
            b->comm = v->comm[i];
            double t0 = perf_now_us();
            HcclResult r = b->coll->launch(b, cs, send, recv, NULL);
            v->us[i][it] = perf_now_us() - t0;
            b->comm = world;
            TRY(b, r);
        }
    }
    for (int i = 0; i < v->n; i++) {
        med[i] = perf_median(v->us[i], b->opt.iters);
    }
    TRY(b,
        HcclAllReduce(med, us, (uint64_t)v->n, HCCL_DATA_TYPE_FP64, HCCL_REDUCE_MAX, world, NULL));
    TRY(b, HcclAllReduce(&bad, wrong, 1, HCCL_DATA_TYPE_UINT64, HCCL_REDUCE_SUM, world, NULL));
    return 0;
}

static void compare_header(const struct bench *b, const struct variants *v)
{
    printf("# hccl_perf_test: collective %s, nranks %u, dtype %s, redop %s, root %d\n",
           b->coll->name, b->nranks, dtype_name(b->opt.dtype),
           b->coll->reduces ? redop_name(b->opt.op) : "none", b->coll->rooted ? b->opt.root : -1);
    printf("# level-1 algorithms compared: %s; warmup iters: %d iters: %d validation: %d\n",
           b->opt.algos, b->opt.warmup, b->opt.iters, b->opt.check);
    printf("# time: median iteration (us) of the slowest rank, out of place, iterations of the "
           "algorithms interleaved, each after a barrier\n#\n");
    printf("# %10s %12s", "size", "count");
    for (int i = 0; i < v->n; i++) {
        printf(" %9s", v->name[i]);
    }
    printf(" %9s %7s\n", "best", "#wrong");
}

int perf_compare_collective(struct bench *b, const struct coll_ops *coll, uint64_t *wrong)
{
    struct variants v = {0};
    int rc = 0;

    b->coll = coll;
    perf_pattern_setup(b);
    if (variants_make(b, &v) != 0) {
        variants_free(b, &v);
        return -1;
    }
    if (b->rank == 0) {
        compare_header(b, &v);
    }
    for (size_t bytes = b->opt.min_bytes; rc == 0 && bytes <= b->opt.max_bytes;
         bytes = perf_next_size(&b->opt, bytes)) {
        struct coll_size cs;
        double us[MAX_VARIANTS];
        uint64_t bad = 0;
        coll->sizes(bytes, b->esize, b->nranks, &cs);
        if (cs.count == 0) {
            continue;
        }
        rc = compare_size(b, &v, &cs, us, &bad);
        *wrong += bad;
        if (rc != 0 || b->rank != 0) {
            continue;
        }
        int best = 0;
        printf("  %10zu %12zu", cs.bytes, cs.count);
        for (int i = 0; i < v.n; i++) {
            printf(" %9.2f", us[i]);
            best = us[i] < us[best] ? i : best;
        }
        printf(" %9s %7llu\n", v.name[best], (unsigned long long)bad);
        fflush(stdout);
    }
    variants_free(b, &v);
    return rc;
}
