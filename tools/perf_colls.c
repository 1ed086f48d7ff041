/*
 * hccl_perf_test's collectives: for each one, nccl-tests' sizes and bus-bandwidth factor, the
 * buffers in and out of place, the HCCL call, and the value every output element must hold;
 * the inputs are chosen so that any reduction of them is exact, and checked bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
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

const struct coll_ops perf_colls[MAX_COLLS] = {
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
    char want[16]; /* one element at a time: no third buffer as large as the output */
    for (size_t k = 0; k < cs->recv_count; k++) {
        double v = b->coll->expect(b, cs, k);
        if (isnan(v)) {
            return 0;
        }
        dtype_store(b->opt.dtype, want, 0, v);
        wrong += memcmp(got + k * b->esize, want, b->esize) != 0;
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
