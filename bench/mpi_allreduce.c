/*
 * mpi_allreduce: times MPI_Allreduce (fp32, sum), or with -t allgather MPI_Allgather (fp32), the
 * way hccl_perf_test times HcclAllReduce and HcclAllGather, so that bench/run.sh and
 * bench/latency.sh can put the two side by side. An allgather's size is its result's, as in
 * nccl-tests: each rank sends size / nranks; busbw = algbw * (n-1)/n.
 *
 * For each size: fresh send/receive buffers are malloc'ed and touched once, WARMUP calls run,
 * a barrier lines the ranks up, ITERS calls are timed with CLOCK_MONOTONIC, and the reported
 * time is the slowest rank's average (with -m: the slowest rank's median iteration, as
 * hccl_perf_test -m; with -q Q: its iteration at quantile Q, nearest rank, as hccl_latency_test's
 * percentiles). busbw = algbw * 2(n-1)/n as in nccl-tests.
 *
 *   mpirun -np N mpi_allreduce [-t allreduce|allgather] [-b MIN] [-e MAX] [-f FACTOR | -i STEP]
 *                              [-n ITERS] [-w WARMUP] [-l LATITERS] [-m | -q Q]
 *
 * Output (rank 0): one "size time_us algbw busbw" line per size, then a "# latency" line
 * for 8-byte messages timed over LATITERS calls (0 disables it).
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "env.h"

struct bench_opts {
    size_t min_bytes;
    size_t max_bytes;
    double factor;
    size_t step;
    int iters;
    int warmup;
    int lat_iters;
    int median;      /* 1: the median iteration; 2: the one at quantile */
    double quantile; /* -q */
};

struct bench_result {
    double time_us;
    long long wrong;
};

static int g_rank;
static int g_nranks;
static int g_allgather; /* -t allgather */

/* Every rank parses the same arguments; one complaint is enough. */
static void usage(FILE *out)
{
    if (g_rank != 0) {
        return;
    }
    fprintf(out, "usage: mpi_allreduce [-t allreduce|allgather] [-b MIN] [-e MAX] "
                 "[-f FACTOR | -i STEP] [-n ITERS] [-w WARMUP] [-l LATITERS] [-m | -q Q]\n"
                 "  sizes in bytes, K/M/G suffixes allowed (powers of 1024)\n"
                 "  -m: time the median iteration (of the slowest rank), not the mean\n"
                 "  -q Q: time the iteration at quantile Q, 0 < Q <= 1 (e.g. 0.99: p99)\n");
}

/* Parses "64", "4K", "1M", "2G" into bytes; returns 0 on a malformed value. */
static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    int c;
    *o = (struct bench_opts){.min_bytes = 8,
                             .max_bytes = 64 << 20,
                             .factor = 2.0,
                             .iters = 20,
                             .warmup = 5,
                             .lat_iters = 1000};
    opterr = g_rank == 0;
    while ((c = getopt(argc, argv, "t:b:e:f:i:n:w:l:mq:h")) != -1) {
        int ok = 1;
        switch (c) {
        case 't':
            g_allgather = strcmp(optarg, "allgather") == 0;
            ok = g_allgather || strcmp(optarg, "allreduce") == 0;
            break;
        case 'b': ok = arg_size(optarg, &o->min_bytes); break;
        case 'e': ok = arg_size(optarg, &o->max_bytes); break;
        case 'f':
            ok = arg_factor(optarg, &o->factor);
            o->step = 0;
            break;
        case 'i':
            ok = arg_size(optarg, &o->step) && o->step > 0;
            o->factor = 0;
            break;
        case 'n': ok = arg_int(optarg, 1, 1000000000, &o->iters); break;
        case 'w': ok = arg_int(optarg, 0, 1000000000, &o->warmup); break;
        case 'l': ok = arg_int(optarg, 0, 1000000000, &o->lat_iters); break;
        case 'm': o->median = 1; break;
        case 'q':
            o->quantile = strtod(optarg, NULL);
            ok = o->quantile > 0 && o->quantile <= 1;
            o->median = 2;
            break;
        case 'h': usage(stdout); return 1;
        default: ok = 0; break;
        }
        if (!ok) {
            usage(stderr);
            return -1;
        }
    }
    if (o->min_bytes < sizeof(float) || o->min_bytes > o->max_bytes) {
        if (g_rank == 0) {
            fprintf(stderr, "mpi_allreduce: need 4 <= MIN <= MAX\n");
        }
        return -1;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Small integers keep every partial sum exact, so the result can be checked bit for bit. */
static void fill_input(float *buf, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        buf[i] = (float)((g_rank + i) % 8);
    }
}

/* An allgather's result holds rank r's input at block r (count / nranks floats each). */
static long long count_wrong(const float *buf, size_t count)
{
    long long wrong = 0;
    size_t per = count / (size_t)g_nranks;
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        if (g_allgather) {
            want = (float)((i / per + i % per) % 8);
        } else {
            for (int r = 0; r < g_nranks; r++) {
                want += (float)((r + i) % 8);
            }
        }
        wrong += buf[i] != want;
    }
    return wrong;
}

/* One collective on count floats (the result's). */
static void one_op(float *send, float *recv, size_t count)
{
    if (g_allgather) {
        int per = (int)(count / (size_t)g_nranks);
        MPI_Allgather(send, per, MPI_FLOAT, recv, per, MPI_FLOAT, MPI_COMM_WORLD);
    } else {
        MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times ITERS allreduces of `count` floats; returns the slowest rank's average in us, or with
 * `median` the slowest rank's median iteration (iter_us: room for ITERS times, or NULL). */
static double g_quantile; /* -q, or 0 */

static double time_allreduce(float *send, float *recv, size_t count, int warmup, int iters,
                             double *iter_us)
{
    for (int i = 0; i < warmup; i++) {
        one_op(send, recv, count);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s(), t = t0;
    for (int i = 0; i < iters; i++) {
        one_op(send, recv, count);
        if (iter_us != NULL) {
            double t1 = now_s();
            iter_us[i] = (t1 - t) * 1e6;
            t = t1;
        }
    }
    double local = (now_s() - t0) * 1e6 / iters;
    if (iter_us != NULL) {
        qsort(iter_us, (size_t)iters, sizeof(*iter_us), cmp_double);
        int k = (int)ceil(g_quantile * iters) - 1;
        local = g_quantile > 0 ? iter_us[k < 0        ? 0
                                         : k >= iters ? iters - 1
                                                      : k]
                : iters % 2    ? iter_us[iters / 2]
                               : (iter_us[iters / 2 - 1] + iter_us[iters / 2]) / 2;
    }
    double slowest;
    MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/*
 * Allocates this size's buffers, touches them (so page faults stay out of the timing), times
 * the allreduce and checks the last result.
 */
static int run_size(size_t bytes, int warmup, int iters, int median, struct bench_result *res)
{
    size_t count = bytes / sizeof(float);
    float *send = malloc(count * sizeof(float));
    float *recv = malloc(count * sizeof(float));
    double *iter_us = median ? malloc((size_t)iters * sizeof(double)) : NULL;
    if (send == NULL || recv == NULL || (median && iter_us == NULL)) {
        fprintf(stderr, "mpi_allreduce: rank %d: malloc(%zu) failed\n", g_rank, bytes);
        free(send);
        free(recv);
        free(iter_us);
        return -1;
    }
    fill_input(send, count);
    memset(recv, 0, count * sizeof(float));
    res->time_us = time_allreduce(send, recv, count, warmup, iters, iter_us);
    long long wrong = count_wrong(recv, count);
    MPI_Allreduce(&wrong, &res->wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    free(send);
    free(recv);
    free(iter_us);
    return 0;
}

static void print_row(size_t bytes, const struct bench_result *res)
{
    double algbw = (double)bytes / (res->time_us * 1e-6) / 1e9;
    double busbw = algbw * (g_allgather ? 1.0 : 2.0) * (g_nranks - 1) / g_nranks;
    printf("%12zu %10.2f %8.3f %8.3f", bytes, res->time_us, algbw, busbw);
    if (res->wrong != 0) {
        printf("  # %lld wrong", res->wrong);
    }
    printf("\n");
    fflush(stdout);
}

static size_t next_size(const struct bench_opts *o, size_t bytes)
{
    if (o->step > 0) {
        return bytes + o->step;
    }
    size_t next = (size_t)((double)bytes * o->factor);
    return next > bytes ? next : bytes + 1;
}

static int run_sweep(const struct bench_opts *o, long long *wrong_total)
{
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes = next_size(o, bytes)) {
        struct bench_result res;
        size_t unit = sizeof(float) * (g_allgather ? (size_t)g_nranks : 1);
        size_t used = bytes / unit * unit;
        if (used == 0) {
            continue;
        }
        if (run_size(used, o->warmup, o->iters, o->median, &res) != 0) {
            return -1;
        }
        *wrong_total += res.wrong;
        if (g_rank == 0) {
            print_row(used, &res);
        }
    }
    return 0;
}

static int run_latency(const struct bench_opts *o, long long *wrong_total)
{
    struct bench_result res;
    int warmup = o->lat_iters / 10 > o->warmup ? o->lat_iters / 10 : o->warmup;
    if (run_size(8, warmup, o->lat_iters, o->median, &res) != 0) {
        return -1;
    }
    *wrong_total += res.wrong;
    if (g_rank == 0) {
        printf("# latency 8 B: %.2f us (%d iters)\n", res.time_us, o->lat_iters);
    }
    return 0;
}

static void print_header(const struct bench_opts *o)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, '\n');
    if (nl != NULL) {
        *nl = '\0';
    }
    printf("# mpi_allreduce: %s\n", lib);
    printf("# nranks %d, %s, warmup %d, iters %d%s\n", g_nranks,
           g_allgather ? "allgather float" : "allreduce float sum", o->warmup, o->iters,
           o->median == 2 ? ", time: the iteration at quantile -q"
           : o->median    ? ", time: median iteration"
                          : "");
    printf("# %10s %10s %8s %8s\n", "size(B)", "time(us)", "algbw", "busbw");
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0) {
        MPI_Finalize();
        return rc < 0 ? 2 : 0;
    }
    g_quantile = o.median == 2 ? o.quantile : 0;
    if (g_rank == 0) {
        print_header(&o);
    }
    long long wrong = 0;
    rc = run_sweep(&o, &wrong);
    if (rc == 0 && o.lat_iters > 0 && !g_allgather) { /* the latency line is allreduce's */
        rc = run_latency(&o, &wrong);
    }
    if (rc != 0) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (g_rank == 0 && wrong != 0) {
        fprintf(stderr, "mpi_allreduce: %lld wrong values\n", wrong);
    }
    MPI_Finalize();
    return wrong != 0 ? 1 : 0;
}
