/*
 * hccl_perf_test: bandwidth and correctness benchmark for hcclD collectives, in the manner of
 * nccl-tests (same sizes, counts, columns and bus-bandwidth factors), written against the
 * public HCCL API only.
 *
 * Ranks: under hccl-run (HCCL_RANK set) this process is one rank; otherwise it forks -g N
 * children that join one job made with HcclGetRootInfo, and exits with the worst status.
 * Only rank 0 prints. Exit status: 0 ok, 1 wrong values, 2 usage or HCCL error.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bind.h"
#include "dtype.h"
#include "env.h"
#include "hccl/hccl.h"
#include "perf_test.h"

/* ---- Data types and reduction operators ---- */

/*
 * The largest value below which every integer is exact in the dtype and no sum of inputs
 * wraps; inputs are kept under it so results can be checked bit for bit.
 */
static double dtype_exact_limit(HcclDataType dt)
{
    switch (dt) {
    case HCCL_DATA_TYPE_INT8: return 127;
    case HCCL_DATA_TYPE_UINT8: return 255;
    case HCCL_DATA_TYPE_INT16: return 32767;
    case HCCL_DATA_TYPE_UINT16: return 65535;
    case HCCL_DATA_TYPE_FP16: return 2048;
    case HCCL_DATA_TYPE_BFP16: return 256;
    case HCCL_DATA_TYPE_FP32: return 16777216.0;
    default: return 2147483647.0;
    }
}

/* Rounds a float to IEEE half, nearest-even; only needs to be right for the values we store. */
static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) {
        return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    }
    if (exp >= 31) {
        return (uint16_t)(sign | 0x7c00);
    }
    if (exp <= 0) {
        if (exp < -10) {
            return sign;
        }
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        half += rem > mid || (rem == mid && (half & 1));
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    half += rem > 0x1000 || (rem == 0x1000 && (half & 1));
    return (uint16_t)(sign | half);
}

static uint16_t float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffff) > 0x7f800000) {
        return (uint16_t)((x >> 16) | 0x40);
    }
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Stores v (an integer-valued double in range) as element idx of a dtype array. */
static void dtype_store(HcclDataType dt, void *buf, size_t idx, double v)
{
    switch (dt) {
    case HCCL_DATA_TYPE_INT8: ((int8_t *)buf)[idx] = (int8_t)v; break;
    case HCCL_DATA_TYPE_UINT8: ((uint8_t *)buf)[idx] = (uint8_t)v; break;
    case HCCL_DATA_TYPE_INT16: ((int16_t *)buf)[idx] = (int16_t)v; break;
    case HCCL_DATA_TYPE_UINT16: ((uint16_t *)buf)[idx] = (uint16_t)v; break;
    case HCCL_DATA_TYPE_INT32: ((int32_t *)buf)[idx] = (int32_t)v; break;
    case HCCL_DATA_TYPE_UINT32: ((uint32_t *)buf)[idx] = (uint32_t)v; break;
    case HCCL_DATA_TYPE_INT64: ((int64_t *)buf)[idx] = (int64_t)v; break;
    case HCCL_DATA_TYPE_UINT64: ((uint64_t *)buf)[idx] = (uint64_t)v; break;
    case HCCL_DATA_TYPE_FP16: ((uint16_t *)buf)[idx] = float_to_half((float)v); break;
    case HCCL_DATA_TYPE_BFP16: ((uint16_t *)buf)[idx] = float_to_bf16((float)v); break;
    case HCCL_DATA_TYPE_FP32: ((float *)buf)[idx] = (float)v; break;
    case HCCL_DATA_TYPE_FP64: ((double *)buf)[idx] = v; break;
    default: break;
    }
}

/* ---- Collectives ---- */

/* The input value of element j on rank r: small integers, exact in every dtype. */
static double input_value(const struct bench *b, uint32_t r, size_t j)
{
    if (b->coll->reduces && b->opt.op == HCCL_REDUCE_PROD) {
        /* At most one rank holds a 2 for any j, so products stay at 1 or 2. */
        return ((j * 3 + r) % (b->nranks + 1)) == 0 ? 2.0 : 1.0;
    }
    return (double)(((uint64_t)r * 31 + (uint64_t)j * 7) % b->pattern_mod);
}

/* The reduction over all ranks of element j's inputs, computed exactly in double. */
static double reduced_value(const struct bench *b, size_t j)
{
    double acc = input_value(b, 0, j);
    for (uint32_t r = 1; r < b->nranks; r++) {
        double v = input_value(b, r, j);
        switch (b->opt.op) {
        case HCCL_REDUCE_SUM: acc += v; break;
        case HCCL_REDUCE_PROD: acc *= v; break;
        case HCCL_REDUCE_MAX: acc = v > acc ? v : acc; break;
        case HCCL_REDUCE_MIN: acc = v < acc ? v : acc; break;
        default: break;
        }
    }
    return acc;
}

static double factor_allreduce(uint32_t n)
{
    return 2.0 * (n - 1) / n;
}
static double factor_gather(uint32_t n)
{
    return (double)(n - 1) / n;
}
static double factor_one(uint32_t n)
{
    return 1.0;
}

static void sizes_plain(size_t bytes, size_t esize, uint32_t n, struct coll_size *cs)
{
    size_t count = bytes / esize;
    *cs = (struct coll_size){count * esize, count, count, count};
}

/* Allgather: -b/-e give the gathered size, so each rank sends 1/n of it. */
static void sizes_allgather(size_t bytes, size_t esize, uint32_t n, struct coll_size *cs)
{
    size_t per_rank = bytes / esize / n;
    *cs = (struct coll_size){per_rank * n * esize, per_rank, per_rank, per_rank * n};
}

static void sizes_reducescatter(size_t bytes, size_t esize, uint32_t n, struct coll_size *cs)
{
    size_t per_rank = bytes / esize / n;
    *cs = (struct coll_size){per_rank * n * esize, per_rank, per_rank * n, per_rank};
}

/* Alltoall: the count is what goes to each peer. */
static void sizes_alltoall(size_t bytes, size_t esize, uint32_t n, struct coll_size *cs)
{
    size_t per_peer = bytes / esize / n;
    *cs = (struct coll_size){per_peer * n * esize, per_peer, per_peer * n, per_peer * n};
}

static void buffers_same(const struct bench *b, const struct coll_size *cs, int inplace,
                         void **send, void **recv)
{
    *recv = b->recvbuf;
    *send = inplace ? b->recvbuf : b->sendbuf;
}

static void buffers_allgather(const struct bench *b, const struct coll_size *cs, int inplace,
                              void **send, void **recv)
{
    *recv = b->recvbuf;
    *send = inplace ? (char *)b->recvbuf + b->rank * cs->send_count * b->esize : b->sendbuf;
}

static void buffers_reducescatter(const struct bench *b, const struct coll_size *cs, int inplace,
                                  void **send, void **recv)
{
    *send = b->sendbuf;
    *recv = inplace ? (char *)b->sendbuf + b->rank * cs->recv_count * b->esize : b->recvbuf;
}

/* Broadcast has one buffer; the receive buffer serves every mode. */
static void buffers_broadcast(const struct bench *b, const struct coll_size *cs, int inplace,
                              void **send, void **recv)
{
    *send = b->rank == (uint32_t)b->opt.root ? b->recvbuf : NULL;
    *recv = b->recvbuf;
}

static HcclResult launch_allreduce(const struct bench *b, const struct coll_size *cs, void *send,
                                   void *recv, HcclStream stream)
{
    return HcclAllReduce(send, recv, cs->count, b->opt.dtype, b->opt.op, b->comm, stream);
}

static HcclResult launch_allgather(const struct bench *b, const struct coll_size *cs, void *send,
                                   void *recv, HcclStream stream)
{
    return HcclAllGather(send, recv, cs->count, b->opt.dtype, b->comm, stream);
}

static HcclResult launch_reducescatter(const struct bench *b, const struct coll_size *cs,
                                       void *send, void *recv, HcclStream stream)
{
    return HcclReduceScatter(send, recv, cs->count, b->opt.dtype, b->opt.op, b->comm, stream);
}

static HcclResult launch_broadcast(const struct bench *b, const struct coll_size *cs, void *send,
                                   void *recv, HcclStream stream)
{
    return HcclBroadcast(recv, cs->count, b->opt.dtype, (uint32_t)b->opt.root, b->comm, stream);
}

static HcclResult launch_reduce(const struct bench *b, const struct coll_size *cs, void *send,
                                void *recv, HcclStream stream)
{
    return HcclReduce(send, recv, cs->count, b->opt.dtype, b->opt.op, (uint32_t)b->opt.root,
                      b->comm, stream);
}

static HcclResult launch_alltoall(const struct bench *b, const struct coll_size *cs, void *send,
                                  void *recv, HcclStream stream)
{
    return HcclAlltoAll(send, cs->count, b->opt.dtype, recv, cs->count, b->opt.dtype, b->comm,
                        stream);
}

static HcclResult launch_scatter(const struct bench *b, const struct coll_size *cs, void *send,
                                 void *recv, HcclStream stream)
{
    return HcclScatter(send, recv, cs->count, b->opt.dtype, (uint32_t)b->opt.root, b->comm, stream);
}

/* nccl-tests' sendrecv: every rank sends to the next and receives from the previous, both in
 * one HcclBatchSendRecv. */
static HcclResult launch_sendrecv(const struct bench *b, const struct coll_size *cs, void *send,
                                  void *recv, HcclStream stream)
{
    HcclSendRecvItem items[2] = {
        {HCCL_SEND, send, cs->count, b->opt.dtype, (b->rank + 1) % b->nranks},
        {HCCL_RECV, recv, cs->count, b->opt.dtype, (b->rank + b->nranks - 1) % b->nranks}};

    return HcclBatchSendRecv(items, 2, b->comm, stream);
}

static double expect_allreduce(const struct bench *b, const struct coll_size *cs, size_t k)
{
    return reduced_value(b, k);
}

static double expect_allgather(const struct bench *b, const struct coll_size *cs, size_t k)
{
    return input_value(b, (uint32_t)(k / cs->send_count), k % cs->send_count);
}

static double expect_reducescatter(const struct bench *b, const struct coll_size *cs, size_t k)
{
    return reduced_value(b, b->rank * cs->recv_count + k);
}

static double expect_broadcast(const struct bench *b, const struct coll_size *cs, size_t k)
{
    return input_value(b, (uint32_t)b->opt.root, k);
}

static double expect_reduce(const struct bench *b, const struct coll_size *cs, size_t k)
{
    return b->rank == (uint32_t)b->opt.root ? reduced_value(b, k) : NAN;
}

/* Rank p's block for this rank starts at element rank*count of p's input. */
static double expect_alltoall(const struct bench *b, const struct coll_size *cs, size_t k)
{
    size_t peer = k / cs->count;
    return input_value(b, (uint32_t)peer, b->rank * cs->count + k % cs->count);
}

/* This rank's block of the root's input. */
static double expect_scatter(const struct bench *b, const struct coll_size *cs, size_t k)
{
    return input_value(b, (uint32_t)b->opt.root, b->rank * cs->recv_count + k);
}

static double expect_sendrecv(const struct bench *b, const struct coll_size *cs, size_t k)
{
    return input_value(b, (b->rank + b->nranks - 1) % b->nranks, k);
}

static const struct coll_ops g_colls[MAX_COLLS] = {
    {"allreduce", 1, 0, INPLACE_REAL, factor_allreduce, sizes_plain, buffers_same, launch_allreduce,
     expect_allreduce},
    {"allgather", 0, 0, INPLACE_REAL, factor_gather, sizes_allgather, buffers_allgather,
     launch_allgather, expect_allgather},
    {"reducescatter", 1, 0, INPLACE_REAL, factor_gather, sizes_reducescatter, buffers_reducescatter,
     launch_reducescatter, expect_reducescatter},
    {"broadcast", 0, 1, INPLACE_SAME, factor_one, sizes_plain, buffers_broadcast, launch_broadcast,
     expect_broadcast},
    {"reduce", 1, 1, INPLACE_REAL, factor_one, sizes_plain, buffers_same, launch_reduce,
     expect_reduce},
    {"alltoall", 0, 0, INPLACE_NONE, factor_gather, sizes_alltoall, buffers_same, launch_alltoall,
     expect_alltoall},
    /* -b/-e give the root's whole input, as for reducescatter; in place, this rank's block of
     * its own send buffer receives. */
    {"scatter", 0, 1, INPLACE_REAL, factor_gather, sizes_reducescatter, buffers_reducescatter,
     launch_scatter, expect_scatter},
    {"sendrecv", 0, 0, INPLACE_NONE, factor_one, sizes_plain, buffers_same, launch_sendrecv,
     expect_sendrecv},
};

/* ---- Errors ---- */

int perf_hccl_failed(const struct bench *b, const char *call, HcclResult rc)
{
    if (rc == HCCL_SUCCESS) {
        return 0;
    }
    fprintf(stderr, "hccl_perf_test: rank %u: %s failed: %s (%d)\n", b->rank, call,
            HcclGetErrorString(rc), (int)rc);
    return 1;
}

/* ---- Checking ---- */

/*
 * Writes this rank's inputs for one run. The output region is poisoned first (0xff bytes are
 * NaN or -1 in every dtype, never a value we expect), so an element the collective failed to
 * write shows up as wrong.
 */
static void fill_inputs(const struct bench *b, const struct coll_size *cs, void *send, void *recv)
{
    memset(recv, 0xff, cs->recv_count * b->esize);
    if (send == NULL) {
        return;
    }
    for (size_t j = 0; j < cs->send_count; j++) {
        dtype_store(b->opt.dtype, send, j, input_value(b, b->rank, j));
    }
}

/* Counts output elements that differ, bit for bit, from the expected values. */
static uint64_t count_wrong(const struct bench *b, const struct coll_size *cs, const void *recv)
{
    uint64_t wrong = 0;
    const char *got = recv;
    char *want = b->expected;
    for (size_t k = 0; k < cs->recv_count; k++) {
        double v = b->coll->expect(b, cs, k);
        if (isnan(v)) {
            return 0;
        }
        dtype_store(b->opt.dtype, want, k, v);
        wrong += memcmp(got + k * b->esize, want + k * b->esize, b->esize) != 0;
    }
    return wrong;
}

/* One checked run, synchronous, with fresh inputs. Returns -1 on an HCCL error. */
int perf_check_once(struct bench *b, const struct coll_size *cs, void *send, void *recv,
                    uint64_t *wrong)
{
    fill_inputs(b, cs, send, recv);
    TRY(b, b->coll->launch(b, cs, send, recv, NULL));
    *wrong = count_wrong(b, cs, recv);
    return 0;
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
           o->zero_copy ? "HcclMemAlloc" : "malloc", o->use_stream ? "stream" : "blocking",
           (int)getpid(), host);
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

/* Values stay below pattern_mod so that a reduction over all ranks stays exact. */
void perf_pattern_setup(struct bench *b)
{
    double limit = dtype_exact_limit(b->opt.dtype);
    if (limit > 1000003) {
        limit = 1000003;
    }
    double mod = b->coll->reduces ? floor(limit / b->nranks) + 1 : limit;
    b->pattern_mod = mod < 2 ? 2 : (uint64_t)mod;
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
static int run_collective(struct bench *b, const struct coll_ops *coll, uint64_t *wrong)
{
    struct sweep_totals totals = {0, 0, 0};
    b->coll = coll;
    perf_pattern_setup(b);
    if (b->rank == 0) {
        print_header(b);
    }
    for (size_t bytes = b->opt.min_bytes; bytes <= b->opt.max_bytes;
         bytes = perf_next_size(&b->opt, bytes)) {
        struct coll_size cs;
        struct mode_result res[2];
        coll->sizes(bytes, b->esize, b->nranks, &cs);
        if (cs.count == 0) {
            continue; /* Too small to give every rank an element. */
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
    if (b->rank == 0) {
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
    b->expected = malloc(b->buf_bytes);
    if (b->opt.median) {
        b->iter_us = malloc((size_t)b->opt.iters * sizeof(*b->iter_us));
    }
    if (b->sendbuf == NULL || b->recvbuf == NULL || b->expected == NULL ||
        (b->opt.median && b->iter_us == NULL)) {
        fprintf(stderr, "hccl_perf_test: rank %u: out of memory (%zu bytes)\n", b->rank,
                b->buf_bytes);
        return -1;
    }
    memset(b->sendbuf, 0, b->buf_bytes);
    memset(b->recvbuf, 0, b->buf_bytes);
    memset(b->expected, 0, b->buf_bytes);
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
    free(b->expected);
    free(b->iter_us);
    b->sendbuf = b->recvbuf = b->expected = NULL;
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
        fprintf(stderr, "hccl_perf_test: cannot write %s: %s\n", b->opt.json_path, strerror(errno));
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
        fprintf(stderr, "hccl_perf_test: writing %s: %s\n", b->opt.json_path, strerror(errno));
        return -1;
    }
    return 0;
}

static int bench_setup(struct bench *b)
{
    TRY(b, HcclGetRankId(b->comm, &b->rank));
    TRY(b, HcclGetRankSize(b->comm, &b->nranks));
    if ((uint32_t)b->opt.root >= b->nranks) {
        fprintf(stderr, "hccl_perf_test: root %d out of range (nranks %u)\n", b->opt.root,
                b->nranks);
        return -1;
    }
    if (b->opt.use_stream) {
        TRY(b, HcclStreamCreate(&b->stream));
    }
    if (buffers_alloc(b) != 0) {
        return -1;
    }
    return json_open(b);
}

static void bench_teardown(struct bench *b)
{
    buffers_free(b);
    if (b->stream != NULL) {
        HcclStreamDestroy(b->stream);
        b->stream = NULL;
    }
}

/* Runs the whole benchmark on an initialised communicator; returns an exit status. */
static int bench_rank(const struct perf_opts *opt, HcclComm comm)
{
    struct bench b = {.opt = *opt, .comm = comm, .esize = dtype_size(opt->dtype)};
    uint64_t wrong = 0;
    int rc = bench_setup(&b);
    for (int i = 0; rc == 0 && i < opt->ncolls; i++) {
        if (b.rank == 0 && opt->ncolls > 1) {
            printf("# Collective: %s\n", g_colls[opt->colls[i]].name);
        }
        rc = opt->algos != NULL ? perf_compare_collective(&b, &g_colls[opt->colls[i]], &wrong)
                                : run_collective(&b, &g_colls[opt->colls[i]], &wrong);
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

/* ---- Processes ---- */

static int run_from_env(const struct perf_opts *opt)
{
    HcclComm comm;
    HcclResult rc = HcclCommInitFromEnv(&comm);
    if (rc != HCCL_SUCCESS) {
        fprintf(stderr, "hccl_perf_test: HcclCommInitFromEnv failed: %s (%d)\n",
                HcclGetErrorString(rc), (int)rc);
        return EXIT_ERROR;
    }
    return bench_rank(opt, comm);
}

static int child_main(const struct perf_opts *opt, const HcclRootInfo *root, uint32_t rank)
{
    HcclComm comm;
    HcclResult rc = HcclCommInitRootInfo((uint32_t)opt->nranks, root, rank, &comm);
    if (rc != HCCL_SUCCESS) {
        fprintf(stderr, "hccl_perf_test: rank %u: HcclCommInitRootInfo failed: %s (%d)\n", rank,
                HcclGetErrorString(rc), (int)rc);
        return EXIT_ERROR;
    }
    return bench_rank(opt, comm);
}

static int status_code(int status)
{
    if (WIFEXITED(status)) {
        return WEXITSTATUS(status);
    }
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : EXIT_ERROR;
}

/* The remaining ranks would wait for a dead peer until HCCL's timeouts; stop them sooner. */
static void kill_others(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        if (pids[i] > 0) {
            kill(pids[i], SIGTERM);
        }
    }
}

/*
 * Waits for all children and returns the worst status. A child that failed by anything but
 * wrong values (which every rank sees and reports alike) leaves its peers stuck, so after a
 * grace period the others are terminated; their SIGTERM deaths do not mask the real cause.
 */
static int wait_children(pid_t *pids, int n)
{
    int worst = 0, alive = n, killed = 0;
    double deadline = 0;
    while (alive > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, deadline > 0 ? WNOHANG : 0);
        if (pid < 0 && errno == EINTR) {
            continue;
        }
        if (pid < 0) {
            break;
        }
        if (pid == 0) {
            if (perf_now_us() > deadline) {
                kill_others(pids, n);
                killed = 1;
                deadline = 0;
            } else {
                usleep(10000);
            }
            continue;
        }
        for (int i = 0; i < n; i++) {
            pids[i] = pids[i] == pid ? 0 : pids[i];
        }
        alive--;
        if (killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) {
            continue;
        }
        int code = status_code(status);
        worst = code > worst ? code : worst;
        if (code > EXIT_WRONG && deadline == 0 && !killed) {
            deadline = perf_now_us() + 10e6;
        }
    }
    return worst;
}

static int run_forked(const struct perf_opts *opt)
{
    HcclRootInfo root;
    HcclResult hrc = HcclGetRootInfo(&root);
    if (hrc != HCCL_SUCCESS) {
        fprintf(stderr, "hccl_perf_test: HcclGetRootInfo failed: %s (%d)\n",
                HcclGetErrorString(hrc), (int)hrc);
        return EXIT_ERROR;
    }
    pid_t *pids = calloc((size_t)opt->nranks, sizeof(*pids));
    if (pids == NULL) {
        return EXIT_ERROR;
    }
    fflush(NULL); /* Children must not inherit and repeat buffered output. */
    int started = 0;
    for (; started < opt->nranks; started++) {
        pid_t pid = fork();
        if (pid == 0) {
            bind_local_rank((unsigned)started, (unsigned)opt->nranks);
            exit(child_main(opt, &root, (uint32_t)started));
        }
        if (pid < 0) {
            fprintf(stderr, "hccl_perf_test: fork: %s\n", strerror(errno));
            kill_others(pids, started);
            break;
        }
        pids[started] = pid;
    }
    int worst = wait_children(pids, started);
    free(pids);
    return started < opt->nranks ? EXIT_ERROR : worst;
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
            "  -S         issue the timed iterations on an HcclStream, synchronize once\n"
            "  -m         time column: the median iteration (of the slowest rank) instead\n"
            "             of the mean; not with -S\n"
            "  -J FILE    also write the results to FILE as JSON\n"
            "  -A LIST    compare level-1 algorithms (comma-separated: auto, ring, H-D_R,\n"
            "             fullmesh, tree, ...): one comm each (HcclCommSplit under HCCL_ALGO\n"
            "             level1:NAME; auto keeps the caller's HCCL_ALGO), their iterations\n"
            "             interleaved, each after a barrier; prints each one's median\n"
            "             iteration, out of place\n"
            "  -h         this help\n");
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
        if (strcmp(s, g_colls[i].name) == 0) {
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
    case 'S': o->use_stream = 1; return 1;
    case 'm': o->median = 1; return 1;
    case 'A': o->algos = arg; return 1;
    case 'J': o->json_path = arg; return 1;
    default: return 0;
    }
}

/* Returns 0 to run, 1 after -h, -1 on a usage error. */
static int parse_args(int argc, char **argv, struct perf_opts *o)
{
    int c;
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
    while ((c = getopt(argc, argv, "t:b:e:f:i:g:n:w:d:o:r:c:zSmA:J:h")) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if (!parse_opt(c, optarg, o)) {
            if (c != '?') {
                fprintf(stderr, "hccl_perf_test: bad value for -%c: %s\n", c, optarg);
            }
            usage(stderr);
            return -1;
        }
    }
    if (o->algos != NULL && (o->use_stream || o->json_path != NULL)) {
        fprintf(stderr, "hccl_perf_test: -A times single blocking launches and prints a table "
                        "of its own (not with -S or -J)\n");
        return -1;
    }
    if (o->median && o->use_stream) {
        fprintf(stderr, "hccl_perf_test: -m times every launch, -S only the whole batch\n");
        return -1;
    }
    if (optind < argc || o->min_bytes == 0 || o->min_bytes > o->max_bytes) {
        fprintf(stderr, "hccl_perf_test: need 0 < MIN <= MAX and no extra arguments\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct perf_opts opt;
    int rc = parse_args(argc, argv, &opt);
    if (rc != 0) {
        return rc < 0 ? EXIT_ERROR : 0;
    }
    const char *env_rank = getenv("HCCL_RANK");
    if (env_rank != NULL) {
        if (opt.nranks != 1 && strcmp(env_rank, "0") == 0) {
            fprintf(stderr, "hccl_perf_test: started by a launcher, -g %d ignored\n", opt.nranks);
        }
        return run_from_env(&opt);
    }
    return run_forked(&opt);
}
