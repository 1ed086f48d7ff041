/*
 * hccl_perf_test: bandwidth and correctness benchmark for hcclD collectives, in the manner of
 * nccl-tests (same sizes, counts, columns and bus-bandwidth factors), written against the
 * public HCCL API only. Run as hccl_latency_test (a link to it), it prints each size's latency
 * percentiles instead.
 *
 * This file: the command line, the sweep over sizes, timing, buffers and output. The
 * collectives are in perf_colls.c, the -A comparison in perf_compare.c, and the processes
 * (one rank under hccl-run, or -g N forked ranks) in perf_procs.c. Only rank 0 prints. Exit
 * status: 0 ok, 1 wrong values, 2 usage or HCCL error.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "dtype.h"
#include "env.h"
#include "hccl/hccl.h"
#include "perf_test.h"

const char *perf_prog = "hccl_perf_test";

/* ---- Errors ---- */

int perf_hccl_error(int rank, const char *call, HcclResult rc)
{
    if (rc == HCCL_SUCCESS) {
        return 0;
    }
    if (rank >= 0) {
        fprintf(stderr, "%s: rank %d: %s failed: %s (%d)\n", perf_prog, rank, call,
                HcclGetErrorString(rc), (int)rc);
    } else {
        fprintf(stderr, "%s: %s failed: %s (%d)\n", perf_prog, call, HcclGetErrorString(rc),
                (int)rc);
    }
    return 1;
}

int perf_hccl_failed(const struct bench *b, const char *call, HcclResult rc)
{
    return perf_hccl_error((int)b->rank, call, rc);
}

/* ---- Timing ---- */

double perf_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Runs ITERS launches; with PER, times each one (blocking launches only) into PER[i]. */
int perf_run_iters(struct bench *b, const struct coll_size *cs, void *send, void *recv, int iters,
                   double *per)
{
    for (int i = 0; i < iters; i++) {
        double t0 = per != NULL ? perf_now_us() : 0;
        TRY(b, b->coll->launch(b, cs, send, recv, b->stream));
        if (per != NULL) {
            per[i] = perf_now_us() - t0;
        }
    }
    if (b->stream != NULL) {
        TRY(b, HcclStreamSynchronize(b->stream));
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The middle one of N values (the mean of the two middle ones of an even N); sorts V. */
double perf_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * Warms up, lines the ranks up with a barrier, and times ITERS runs: the average us per run,
 * or with -m the median run (one slow iteration, a hiccup of a loaded machine, moves a mean
 * of 20 by 5% of its size, and a median not at all).
 */
static int time_runs(struct bench *b, const struct coll_size *cs, void *send, void *recv,
                     double *us)
{
    if (perf_run_iters(b, cs, send, recv, b->opt.warmup, NULL) != 0) {
        return -1;
    }
    TRY(b, HcclBarrier(b->comm, NULL));
    double t0 = perf_now_us();
    if (perf_run_iters(b, cs, send, recv, b->opt.iters, b->iter_us) != 0) {
        return -1;
    }
    *us = b->iter_us != NULL ? perf_median(b->iter_us, b->opt.iters)
                             : (perf_now_us() - t0) / b->opt.iters;
    return 0;
}

struct mode_result {
    double time_us; /* slowest rank */
    double algbw;
    double busbw;
    uint64_t wrong; /* summed over ranks */
    int valid;      /* 0: no such mode (alltoall in place) */
};

/* Checks (if asked) and times one mode; the local results are reduced by the caller. */
static int run_mode(struct bench *b, const struct coll_size *cs, int inplace, double *us,
                    uint64_t *wrong)
{
    void *send, *recv;
    b->coll->buffers(b, cs, inplace, &send, &recv);
    *wrong = 0;
    if (b->opt.check && perf_check_once(b, cs, send, recv, wrong) != 0) {
        return -1;
    }
    return time_runs(b, cs, send, recv, us);
}

/* Runs one size in both modes and fills res[0] (out of place) and res[1] (in place). */
static int run_size(struct bench *b, const struct coll_size *cs, struct mode_result res[2])
{
    double us[2] = {0, 0}, us_max[2];
    uint64_t wrong[2] = {0, 0}, wrong_sum[2];
    if (run_mode(b, cs, 0, &us[0], &wrong[0]) != 0) {
        return -1;
    }
    if (b->coll->inplace == INPLACE_REAL && run_mode(b, cs, 1, &us[1], &wrong[1]) != 0) {
        return -1;
    }
    TRY(b, HcclAllReduce(us, us_max, 2, HCCL_DATA_TYPE_FP64, HCCL_REDUCE_MAX, b->comm, NULL));
    TRY(b,
        HcclAllReduce(wrong, wrong_sum, 2, HCCL_DATA_TYPE_UINT64, HCCL_REDUCE_SUM, b->comm, NULL));
    for (int m = 0; m < 2; m++) {
        int src = b->coll->inplace == INPLACE_SAME ? 0 : m;
        res[m].time_us = us_max[src];
        res[m].algbw = (double)cs->bytes / (us_max[src] * 1e3);
        res[m].busbw = res[m].algbw * b->coll->bus_factor(b->nranks);
        res[m].wrong = wrong_sum[src];
        res[m].valid = m == 0 || b->coll->inplace != INPLACE_NONE;
    }
    return 0;
}

/* ---- Output ---- */

static void print_header(const struct bench *b)
{
    const struct perf_opts *o = &b->opt;
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    printf("# hccl_perf_test: collective %s, nranks %u, dtype %s, redop %s, root %d\n",
           b->coll->name, b->nranks, dtype_name(o->dtype),
           b->coll->reduces ? redop_name(o->op) : "none", b->coll->rooted ? o->root : -1);
    if (o->factor > 1.0) {
        printf("# minBytes %zu maxBytes %zu step: %g(factor)", o->min_bytes, o->max_bytes,
               o->factor);
    } else {
        printf("# minBytes %zu maxBytes %zu step: %zu(bytes)", o->min_bytes, o->max_bytes, o->step);
    }
    printf(" warmup iters: %d iters: %d validation: %d%s\n", o->warmup, o->iters, o->check,
           o->median ? " time: median iteration" : "");
    printf("# buffers: %s, launch: %s, rank 0: pid %d on %s\n#\n",
           o->zero_copy       ? "HcclMemAlloc"
           : o->register_bufs ? "malloc, registered"
                              : "malloc",
           o->use_stream ? "stream" : "blocking", (int)getpid(), host);
    printf("# %81s %36s\n", "out-of-place", "in-place");
    printf("# %10s %12s %9s %7s %6s %9s %7s %7s %7s %9s %7s %7s %7s\n", "size", "count", "type",
           "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %9s %7s %6s %9s %7s %7s %7s %9s %7s %7s %7s\n", "(B)", "(elements)", "", "",
           "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static void print_mode(const struct bench *b, const struct mode_result *r)
{
    if (!r->valid) {
        printf(" %9s %7s %7s %7s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    printf(" %9.2f %7.2f %7.2f", r->time_us, r->algbw, r->busbw);
    if (b->opt.check) {
        printf(" %7llu", (unsigned long long)r->wrong);
    } else {
        printf(" %7s", "N/A");
    }
}

static void print_row(const struct bench *b, const struct coll_size *cs,
                      const struct mode_result res[2])
{
    printf("  %10zu %12zu %9s %7s %6d", cs->bytes, cs->count, dtype_name(b->opt.dtype),
           b->coll->reduces ? redop_name(b->opt.op) : "none", b->coll->rooted ? b->opt.root : -1);
    print_mode(b, &res[0]);
    print_mode(b, &res[1]);
    printf("\n");
    fflush(stdout);
}

static void json_mode(FILE *f, const struct bench *b, const struct mode_result *r)
{
    if (!r->valid) {
        fprintf(f, "null");
        return;
    }
    fprintf(f,
            "{\"time_us\": %.3f, \"time_stat\": \"%s\", \"algbw\": %.4f, \"busbw\": %.4f, "
            "\"wrong\": ",
            r->time_us, b->opt.median ? "median" : "mean", r->algbw, r->busbw);
    if (b->opt.check) {
        fprintf(f, "%llu}", (unsigned long long)r->wrong);
    } else {
        fprintf(f, "null}");
    }
}

static void json_record(struct bench *b, const struct coll_size *cs,
                        const struct mode_result res[2])
{
    FILE *f = b->json;
    if (f == NULL) {
        return;
    }
    fprintf(f,
            "%s  {\"collective\": \"%s\", \"size\": %zu, \"count\": %zu, \"type\": \"%s\", "
            "\"redop\": \"%s\", \"root\": %d, \"nranks\": %u, \"oop\": ",
            b->json_records++ ? ",\n" : "", b->coll->name, cs->bytes, cs->count,
            dtype_name(b->opt.dtype), b->coll->reduces ? redop_name(b->opt.op) : "none",
            b->coll->rooted ? b->opt.root : -1, b->nranks);
    json_mode(f, b, &res[0]);
    fprintf(f, ", \"ip\": ");
    json_mode(f, b, &res[1]);
    fprintf(f, "}");
}

/* ---- The sweep ---- */

size_t perf_next_size(const struct perf_opts *o, size_t bytes)
{
    if (o->factor > 1.0) {
        size_t next = (size_t)((double)bytes * o->factor);
        return next > bytes ? next : bytes + 1;
    }
    return bytes + o->step;
}

struct sweep_totals {
    uint64_t wrong;
    double busbw_sum;
    int busbw_n;
};

static void totals_add(struct sweep_totals *t, const struct bench *b,
                       const struct mode_result res[2])
{
    for (int m = 0; m < 2; m++) {
        if (res[m].valid) {
            /* Broadcast's in-place column repeats the out-of-place run: count it once. */
            t->wrong += m == 0 || b->coll->inplace == INPLACE_REAL ? res[m].wrong : 0;
            t->busbw_sum += res[m].busbw;
            t->busbw_n++;
        }
    }
}

static void print_footer(const struct bench *b, const struct sweep_totals *t)
{
    printf("# Out of bounds values : %llu %s\n", (unsigned long long)t->wrong,
           t->wrong == 0 ? "OK" : "FAILED");
    printf("# Avg bus bandwidth    : %g\n#\n", t->busbw_n ? t->busbw_sum / t->busbw_n : 0.0);
    fflush(stdout);
}

/* Runs every size of one collective; *wrong gets the total over sizes and modes. */
/* ---- hccl_latency_test ---- */

/* The value below which a fraction q of the sorted n values lie (nearest rank). */
static double percentile(const double *v, int n, double q)
{
    int k = (int)ceil(q * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static void print_latency_header(const struct bench *b)
{
    const struct perf_opts *o = &b->opt;
    printf("# hccl_latency_test: collective %s, nranks %u, dtype %s, redop %s, root %d\n",
           b->coll->name, b->nranks, dtype_name(o->dtype),
           b->coll->reduces ? redop_name(o->op) : "none", b->coll->rooted ? o->root : -1);
    printf("# minBytes %zu maxBytes %zu, warmup iters: %d iters: %d validation: %d\n", o->min_bytes,
           o->max_bytes, o->warmup, o->iters, o->check);
    printf("# each launch timed on its own, blocking, out of place; the slowest rank's "
           "percentiles\n#\n");
    printf("# %10s %12s %9s %7s %6s %9s %9s %9s %9s %7s\n", "size", "count", "type", "redop",
           "root", "p50", "p90", "p99", "max", "#wrong");
    printf("# %10s %12s %9s %7s %6s %9s %9s %9s %9s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(us)", "(us)", "(us)", "");
}

/* One size: checked once, warmed up, lined up by a barrier, then ITERS launches timed one by
 * one; rank 0 prints the slowest rank's p50, p90, p99 and max. */
static int latency_size(struct bench *b, const struct coll_size *cs, uint64_t *wrong_p)
{
    void *send, *recv;
    uint64_t wrong = 0, wrong_sum;
    double q[4], q_max[4];
    int n = b->opt.iters;

    b->coll->buffers(b, cs, 0, &send, &recv);
    if (b->opt.check && perf_check_once(b, cs, send, recv, &wrong) != 0) {
        return -1;
    }
    if (perf_run_iters(b, cs, send, recv, b->opt.warmup, NULL) != 0) {
        return -1;
    }
    TRY(b, HcclBarrier(b->comm, NULL));
    if (perf_run_iters(b, cs, send, recv, n, b->iter_us) != 0) {
        return -1;
    }
    qsort(b->iter_us, (size_t)n, sizeof(*b->iter_us), cmp_double);
    q[0] = percentile(b->iter_us, n, 0.50);
    q[1] = percentile(b->iter_us, n, 0.90);
    q[2] = percentile(b->iter_us, n, 0.99);
    q[3] = b->iter_us[n - 1];
    TRY(b, HcclAllReduce(q, q_max, 4, HCCL_DATA_TYPE_FP64, HCCL_REDUCE_MAX, b->comm, NULL));
    TRY(b, HcclAllReduce(&wrong, &wrong_sum, 1, HCCL_DATA_TYPE_UINT64, HCCL_REDUCE_SUM, b->comm,
                         NULL));
    if (b->rank == 0) {
        printf("  %10zu %12zu %9s %7s %6d %9.2f %9.2f %9.2f %9.2f", cs->bytes, cs->count,
               dtype_name(b->opt.dtype), b->coll->reduces ? redop_name(b->opt.op) : "none",
               b->coll->rooted ? b->opt.root : -1, q_max[0], q_max[1], q_max[2], q_max[3]);
        if (b->opt.check) {
            printf(" %7llu\n", (unsigned long long)wrong_sum);
        } else {
            printf(" %7s\n", "N/A");
        }
        fflush(stdout);
    }
    *wrong_p += wrong_sum;
    return 0;
}

static int run_collective(struct bench *b, const struct coll_ops *coll, uint64_t *wrong)
{
    struct sweep_totals totals = {0, 0, 0};
    b->coll = coll;
    perf_pattern_setup(b);
    if (b->rank == 0) {
        b->opt.latency ? print_latency_header(b) : print_header(b);
    }
    for (size_t bytes = b->opt.min_bytes; bytes <= b->opt.max_bytes;
         bytes = perf_next_size(&b->opt, bytes)) {
        struct coll_size cs;
        struct mode_result res[2];
        coll->sizes(bytes, b->esize, b->nranks, &cs);
        if (cs.count == 0) {
            continue; /* Too small to give every rank an element. */
        }
        if (b->opt.latency) { /* hccl_latency_test: its own row, no totals */
            if (latency_size(b, &cs, wrong) != 0) {
                return -1;
            }
            continue;
        }
        if (run_size(b, &cs, res) != 0) {
            return -1;
        }
        totals_add(&totals, b, res);
        if (b->rank == 0) {
            print_row(b, &cs, res);
            json_record(b, &cs, res);
        }
    }
    if (b->rank == 0 && !b->opt.latency) {
        print_footer(b, &totals);
    }
    *wrong += totals.wrong;
    return 0;
}

/* ---- Buffers ---- */

/*
 * Every collective needs at most max_bytes of input and of output, so one pair of buffers,
 * allocated and touched once, serves the whole run (pages are never faulted in while timing).
 */
static int buffers_alloc(struct bench *b)
{
    size_t bytes = b->opt.max_bytes / b->esize * b->esize;
    b->buf_bytes = bytes ? bytes : b->esize;
    if (b->opt.zero_copy) {
        TRY(b, HcclMemAlloc(&b->sendbuf, b->buf_bytes));
        TRY(b, HcclMemAlloc(&b->recvbuf, b->buf_bytes));
    } else {
        b->sendbuf = malloc(b->buf_bytes);
        b->recvbuf = malloc(b->buf_bytes);
    }
    if (b->opt.median || b->opt.latency) {
        b->iter_us = malloc((size_t)b->opt.iters * sizeof(*b->iter_us));
    }
    if (b->sendbuf == NULL || b->recvbuf == NULL ||
        ((b->opt.median || b->opt.latency) && b->iter_us == NULL)) {
        fprintf(stderr, "%s: rank %u: out of memory (%zu bytes)\n", perf_prog, b->rank,
                b->buf_bytes);
        return -1;
    }
    memset(b->sendbuf, 0, b->buf_bytes);
    memset(b->recvbuf, 0, b->buf_bytes);
    return 0;
}

static void buffers_free(struct bench *b)
{
    if (b->opt.zero_copy) {
        if (b->sendbuf != NULL) {
            HcclMemFree(b->sendbuf);
        }
        if (b->recvbuf != NULL) {
            HcclMemFree(b->recvbuf);
        }
    } else {
        free(b->sendbuf);
        free(b->recvbuf);
    }
    free(b->iter_us);
    b->sendbuf = b->recvbuf = NULL;
    b->iter_us = NULL;
}

/* ---- One rank ---- */

static int json_open(struct bench *b)
{
    if (b->rank != 0 || b->opt.json_path == NULL) {
        return 0;
    }
    b->json = fopen(b->opt.json_path, "w");
    if (b->json == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", perf_prog, b->opt.json_path, strerror(errno));
        return -1;
    }
    fprintf(b->json, "[\n");
    return 0;
}

static int json_close(struct bench *b)
{
    if (b->json == NULL) {
        return 0;
    }
    fprintf(b->json, "\n]\n");
    int rc = fclose(b->json);
    b->json = NULL;
    if (rc != 0) {
        fprintf(stderr, "%s: writing %s: %s\n", perf_prog, b->opt.json_path, strerror(errno));
        return -1;
    }
    return 0;
}

static int bench_setup(struct bench *b)
{
    TRY(b, HcclGetRankId(b->comm, &b->rank));
    TRY(b, HcclGetRankSize(b->comm, &b->nranks));
    if ((uint32_t)b->opt.root >= b->nranks) {
        fprintf(stderr, "%s: root %d out of range (nranks %u)\n", perf_prog, b->opt.root,
                b->nranks);
        return -1;
    }
    if (b->opt.use_stream) {
        TRY(b, HcclStreamCreate(&b->stream));
    }
    if (buffers_alloc(b) != 0) {
        return -1;
    }
    if (b->opt.register_bufs) {
        TRY(b, HcclCommRegister(b->comm, b->sendbuf, b->buf_bytes, &b->reg_send));
        TRY(b, HcclCommRegister(b->comm, b->recvbuf, b->buf_bytes, &b->reg_recv));
    }
    return json_open(b);
}

static void bench_teardown(struct bench *b)
{
    if (b->reg_send != NULL) {
        perf_hccl_failed(b, "HcclCommDeregister", HcclCommDeregister(b->comm, b->reg_send));
    }
    if (b->reg_recv != NULL) {
        perf_hccl_failed(b, "HcclCommDeregister", HcclCommDeregister(b->comm, b->reg_recv));
    }
    buffers_free(b);
    if (b->stream != NULL) {
        HcclStreamDestroy(b->stream);
        b->stream = NULL;
    }
}

/* Runs the whole benchmark on an initialised communicator; returns an exit status. */
int perf_bench_rank(const struct perf_opts *opt, HcclComm comm)
{
    struct bench b = {.opt = *opt, .comm = comm, .esize = dtype_size(opt->dtype)};
    uint64_t wrong = 0;
    int rc = bench_setup(&b);
    for (int i = 0; rc == 0 && i < opt->ncolls; i++) {
        if (b.rank == 0 && opt->ncolls > 1) {
            printf("# Collective: %s\n", perf_colls[opt->colls[i]].name);
        }
        const struct coll_ops *coll = &perf_colls[opt->colls[i]];
        rc = opt->algos != NULL ? perf_compare_collective(&b, coll, &wrong)
                                : run_collective(&b, coll, &wrong);
    }
    if (json_close(&b) != 0) {
        rc = -1;
    }
    bench_teardown(&b);
    if (perf_hccl_failed(&b, "HcclCommDestroy", HcclCommDestroy(comm))) {
        rc = -1;
    }
    if (rc != 0) {
        return EXIT_ERROR;
    }
    return wrong != 0 ? EXIT_WRONG : 0;
}

/* ---- Command line ---- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: hccl_perf_test [options]\n"
            "  -t COLL    "
            "allreduce|allgather|reducescatter|broadcast|reduce|alltoall|scatter|sendrecv|all\n"
            "             (default allreduce)\n"
            "  -b MIN     smallest size in bytes, K/M/G suffixes allowed (default 8)\n"
            "  -e MAX     largest size in bytes (default 32M)\n"
            "  -f FACTOR  multiply the size by FACTOR each step (default 2)\n"
            "  -i STEP    add STEP bytes each step instead\n"
            "  -g NRANKS  ranks to fork when not started by hccl-run (default 1)\n"
            "  -n ITERS   timed iterations (default 20)\n"
            "  -w WARMUP  warm-up iterations (default 5)\n"
            "  -d DTYPE   int8|uint8|int16|uint16|int32|uint32|int64|uint64|half|float|double|\n"
            "             bfloat16, or HCCL's names fp16|fp32|fp64|bf16 (default float)\n"
            "  -o OP      sum|prod|max|min (default sum)\n"
            "  -r ROOT    root of broadcast, reduce and scatter (default 0)\n"
            "  -c 0|1     check results (default 1)\n"
            "  -z         use HcclMemAlloc buffers (zero copy) instead of malloc\n"
            "  -R         register the malloc'ed buffers with HcclCommRegister\n"
            "  -S         issue the timed iterations on an HcclStream, synchronize once\n"
            "  -m         time column: the median iteration (of the slowest rank) instead\n"
            "             of the mean; not with -S\n"
            "  -J FILE    also write the results to FILE as JSON\n"
            "  -A LIST    compare level-1 algorithms (comma-separated: auto, ring, H-D_R,\n"
            "             fullmesh, tree, ...): one comm each (HcclCommSplit under HCCL_ALGO\n"
            "             level1:NAME; auto keeps the caller's HCCL_ALGO), their iterations\n"
            "             interleaved, each after a barrier; prints each one's median\n"
            "             iteration, out of place\n"
            "  -h, --help this help; --version: the version\n");
}

static int parse_dtype(const char *s, HcclDataType *dt)
{
    int v = dtype_from_name(s);
    if (v < 0) {
        return 0;
    }
    *dt = (HcclDataType)v;
    return 1;
}

static int parse_redop(const char *s, HcclReduceOp *op)
{
    int v = redop_from_name(s);
    if (v < 0) {
        return 0;
    }
    *op = (HcclReduceOp)v;
    return 1;
}

static int parse_colls(const char *s, struct perf_opts *o)
{
    if (strcmp(s, "all") == 0) {
        for (int i = 0; i < MAX_COLLS; i++) {
            o->colls[i] = i;
        }
        o->ncolls = MAX_COLLS;
        return 1;
    }
    for (int i = 0; i < MAX_COLLS; i++) {
        char num[8];
        snprintf(num, sizeof(num), "%d", i); /* or its number: 0 allreduce, 1 allgather, ... */
        if (strcmp(s, perf_colls[i].name) == 0 || strcmp(s, num) == 0) {
            o->colls[0] = i;
            o->ncolls = 1;
            return 1;
        }
    }
    return 0;
}

static int parse_opt(int c, const char *arg, struct perf_opts *o)
{
    switch (c) {
    case 't': return parse_colls(arg, o);
    case 'b': return arg_size(arg, &o->min_bytes);
    case 'e': return arg_size(arg, &o->max_bytes);
    case 'f': o->step = 0; return arg_factor(arg, &o->factor);
    case 'i': o->factor = 0; return arg_size(arg, &o->step) && o->step > 0;
    case 'g': return arg_int(arg, 1, 4096, &o->nranks);
    case 'n': return arg_int(arg, 1, 1000000000, &o->iters);
    case 'w': return arg_int(arg, 0, 1000000000, &o->warmup);
    case 'd': return parse_dtype(arg, &o->dtype);
    case 'o': return parse_redop(arg, &o->op);
    case 'r': return arg_int(arg, 0, 1 << 30, &o->root);
    case 'c': return arg_int(arg, 0, 1, &o->check);
    case 'z': o->zero_copy = 1; return 1;
    case 'R': o->register_bufs = 1; return 1;
    case 'S': o->use_stream = 1; return 1;
    case 'm': o->median = 1; return 1;
    case 'A': o->algos = arg; return 1;
    case 'J': o->json_path = arg; return 1;
    default: return 0;
    }
}

static void latency_usage(FILE *out)
{
    fprintf(out,
            "usage: hccl_latency_test [options]\n"
            "  Per size: the slowest rank's p50, p90, p99 and max latency of ITERS launches,\n"
            "  each timed on its own (blocking, out of place), after a checked run.\n"
            "  -t COLL    allreduce|allgather|reducescatter|broadcast|reduce|alltoall|scatter|\n"
            "             sendrecv|all, or its number in that list from 0 (default 0)\n"
            "  -b MIN     smallest size in bytes, K/M/G suffixes allowed (default 8)\n"
            "  -e MAX     largest size in bytes (default 1M)\n"
            "  -f FACTOR  multiply the size by FACTOR each step (default 2)\n"
            "  -i STEP    add STEP bytes each step instead\n"
            "  -g NRANKS  ranks to fork when not started by hccl-run (default 1)\n"
            "  -c ITERS   timed launches per size (default 100; -n says the same)\n"
            "  -w WARMUP  warm-up launches per size (default 10)\n"
            "  -d DTYPE   as hccl_perf_test (default float)\n"
            "  -o OP      sum|prod|max|min (default sum)\n"
            "  -r ROOT    root of broadcast, reduce and scatter (default 0)\n"
            "  -z         use HcclMemAlloc buffers (zero copy) instead of malloc\n"
            "  -h, --help this help; --version: the version\n");
}

/* What option c wants, for the line that refuses a bad value. */
static const char *opt_hint(int c)
{
    switch (c) {
    case 't':
        return "allreduce, allgather, reducescatter, broadcast, reduce, alltoall, scatter, "
               "sendrecv, all, or a number from 0 in that order";
    case 'b':
    case 'e':
    case 'i': return "a size in bytes: 8, 4K, 1M, 1G";
    case 'f': return "a factor above 1";
    case 'g': return "ranks, 1..4096";
    case 'n':
    case 'c': return "iterations, 1 or more";
    case 'w': return "iterations, 0 or more";
    case 'd': return "a data type: float, half, bfloat16, double, int8 .. uint64, fp16, fp32, bf16";
    case 'o': return "sum, prod, max or min";
    case 'r': return "a rank";
    default: return "see --help";
    }
}

/* The options loop of both names: 0 to run, 1 after --help or --version, -1 after refusing
 * something in one line. latency: hccl_latency_test, whose -c counts iterations. */
static int parse_loop(int argc, char **argv, const char *shorts, struct perf_opts *o,
                      void (*help)(FILE *), int latency)
{
    static const struct option lo[] = {
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        if (c == 'h') {
            help(stdout);
            return 1;
        }
        if (c == 'V') {
            cli_version(perf_prog);
            return 1;
        }
        if (c == '?' || c == ':') {
            cli_bad_option(perf_prog, NULL, argv, shorts, lo);
            return -1;
        }
        if (!parse_opt(latency && c == 'c' ? 'n' : c, optarg, o)) {
            cli_bad(perf_prog, "-%c '%s': %s", c, optarg,
                    !latency && c == 'c' ? "0 or 1 (check the results)" : opt_hint(c));
            return -1;
        }
    }
    if (optind < argc) {
        cli_bad(perf_prog, "unexpected argument '%s' (every setting is an option)", argv[optind]);
        return -1;
    }
    if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) {
        cli_bad(perf_prog, "-b %zu -e %zu: need 0 < MIN <= MAX", o->min_bytes, o->max_bytes);
        return -1;
    }
    return 0;
}

/* hccl_latency_test's command line. Returns 0 to run, 1 after -h, -1 on a usage error. */
static int parse_latency_args(int argc, char **argv, struct perf_opts *o)
{
    *o = (struct perf_opts){.ncolls = 1,
                            .min_bytes = 8,
                            .max_bytes = 1 << 20,
                            .factor = 2.0,
                            .nranks = 1,
                            .iters = 100,
                            .warmup = 10,
                            .dtype = HCCL_DATA_TYPE_FP32,
                            .op = HCCL_REDUCE_SUM,
                            .check = 1,
                            .latency = 1};
    return parse_loop(argc, argv, "t:b:e:f:i:g:n:c:w:d:o:r:zh", o, latency_usage, 1);
}

/* Returns 0 to run, 1 after -h, -1 on a usage error. */
static int parse_args(int argc, char **argv, struct perf_opts *o)
{
    *o = (struct perf_opts){.colls = {0},
                            .ncolls = 1,
                            .min_bytes = 8,
                            .max_bytes = 32 << 20,
                            .factor = 2.0,
                            .nranks = 1,
                            .iters = 20,
                            .warmup = 5,
                            .dtype = HCCL_DATA_TYPE_FP32,
                            .op = HCCL_REDUCE_SUM,
                            .check = 1};
    int rc = parse_loop(argc, argv, "t:b:e:f:i:g:n:w:d:o:r:c:zRSmA:J:h", o, usage, 0);
    if (rc != 0)
        return rc;
    if (o->algos != NULL && (o->use_stream || o->json_path != NULL)) {
        fprintf(stderr,
                "%s: -A times single blocking launches and prints a table "
                "of its own (not with -S or -J)\n",
                perf_prog);
        return -1;
    }
    if (o->median && o->use_stream) {
        fprintf(stderr, "%s: -m times every launch, -S only the whole batch\n", perf_prog);
        return -1;
    }
    return 0;
}

/* This machine's MemAvailable in bytes, 0 if unknown. */
static uint64_t mem_available(void)
{
    char line[256];
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return (uint64_t)kb << 10;
}

/* Whether nprocs ranks' buffers (a send and a receive buffer of -e bytes each) fit in the memory
 * this machine has available; says at once how much they need when they do not. */
static int memory_fits(const struct perf_opts *o, int nprocs)
{
    uint64_t need = 2 * o->max_bytes * (uint64_t)nprocs, avail = mem_available();

    if (o->zero_copy || avail == 0 || need <= avail) {
        return 1;
    }
    fprintf(stderr,
            "%s: %d rank(s) with -e %llu need %.1f GiB for their buffers (a send "
            "and a receive buffer of %llu bytes each), and this machine has %.1f GiB available "
            "(MemAvailable): use a smaller -e or fewer ranks\n",
            perf_prog, nprocs, (unsigned long long)o->max_bytes, (double)need / (1 << 30),
            (unsigned long long)o->max_bytes, (double)avail / (1 << 30));
    return 0;
}

int main(int argc, char **argv)
{
    struct perf_opts opt;
    const char *me = strrchr(argv[0], '/');
    int latency = strcmp(me != NULL ? me + 1 : argv[0], "hccl_latency_test") == 0;
    if (latency) {
        perf_prog = "hccl_latency_test";
    }
    int rc = latency ? parse_latency_args(argc, argv, &opt) : parse_args(argc, argv, &opt);
    if (rc != 0) {
        return rc < 0 ? EXIT_ERROR : 0;
    }
    const char *env_rank = getenv("HCCL_RANK");
    if (!memory_fits(&opt, env_rank != NULL ? 1 : opt.nranks)) {
        return EXIT_ERROR;
    }
    if (env_rank != NULL) {
        if (opt.nranks != 1 && strcmp(env_rank, "0") == 0) {
            fprintf(stderr, "%s: started by a launcher, -g %d ignored\n", perf_prog, opt.nranks);
        }
        return perf_run_from_env(&opt);
    }
    return perf_run_forked(&opt);
}
