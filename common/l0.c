#include "l0.h"

#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "reduce.h"
#include "shm.h"

#define L0_MAX_FANIN 64      /* lanes with more inputs reduce in rounds */
#define L0_BLOCK (32u << 10) /* bytes per step: sources and destination stay in L1/L2 */

typedef struct lane {
    const void *src[L0_MAX_FANIN];
    unsigned nsrc;
    int reduce;
} lane_t;

static unsigned lane_count(const l0_op_t *op)
{
    switch (op->kind) {
    case DESC_ALLREDUCE:
    case DESC_REDUCE:
    case DESC_BROADCAST:
    case DESC_SEND: return 1;
    case DESC_ALLGATHER:
    case DESC_REDUCE_SCATTER:
    case DESC_SCATTER: return op->nranks;
    case DESC_ALLTOALL: return op->nranks * op->nranks;
    default: return 0;
    }
}

/* Destinations of lane i: writes them to out[] and returns how many. */
static unsigned lane_dsts_all(const l0_op_t *op, unsigned i, uint8_t **out)
{
    const l0_rank_t *rk = op->ranks;
    unsigned n = 0;

    switch (op->kind) {
    case DESC_ALLREDUCE:
    case DESC_BROADCAST:
        for (unsigned j = 0; j < op->nranks; j++)
            out[n++] = rk[j].recv;
        break;
    case DESC_REDUCE: out[n++] = rk[op->root].recv; break;
    case DESC_SEND: out[n++] = rk[1].recv; break;
    case DESC_REDUCE_SCATTER:
    case DESC_SCATTER: out[n++] = rk[i].recv; break;
    case DESC_ALLGATHER:
        for (unsigned j = 0; j < op->nranks; j++)
            out[n++] = rk[j].recv + (uint64_t)i * rk[j].recv_stride;
        break;
    case DESC_ALLTOALL: {
        unsigned src = i / op->nranks, dst = i % op->nranks;
        out[n++] = rk[dst].recv + (uint64_t)src * rk[dst].recv_stride;
        break;
    }
    default: break;
    }
    return n;
}

/* Sources of lane i (all ranks' blocks for reductions, one block for copies). */
static const uint8_t *lane_src(const l0_op_t *op, unsigned i, unsigned k)
{
    const l0_rank_t *rk = op->ranks;

    switch (op->kind) {
    case DESC_ALLREDUCE:
    case DESC_REDUCE: return rk[k].send;
    case DESC_REDUCE_SCATTER: return rk[k].send + (uint64_t)i * rk[k].send_stride;
    case DESC_BROADCAST: return rk[op->root].send;
    case DESC_SEND: return rk[0].send;
    case DESC_ALLGATHER: return rk[i].send;
    case DESC_SCATTER: return rk[op->root].send + (uint64_t)i * rk[op->root].send_stride;
    case DESC_ALLTOALL: {
        unsigned src = i / op->nranks, dst = i % op->nranks;
        return rk[src].send + (uint64_t)dst * rk[src].send_stride;
    }
    default: return NULL;
    }
}

/* The rank whose output lane i writes as its j-th destination. */
static uint32_t lane_dst_rank(const l0_op_t *op, unsigned i, unsigned j)
{
    switch (op->kind) {
    case DESC_ALLREDUCE:
    case DESC_BROADCAST:
    case DESC_ALLGATHER: return j;
    case DESC_REDUCE: return op->root;
    case DESC_SEND: return 1;
    case DESC_REDUCE_SCATTER:
    case DESC_SCATTER: return i;
    case DESC_ALLTOALL: return i % op->nranks;
    default: return UINT32_MAX;
    }
}

static unsigned lane_dsts(const l0_op_t *op, unsigned i, uint8_t **out)
{
    unsigned n = lane_dsts_all(op, i, out), k = 0;

    if (op->only_plus1 == 0)
        return n;
    for (unsigned j = 0; j < n; j++)
        if (lane_dst_rank(op, i, j) + 1 == op->only_plus1)
            out[k++] = out[j];
    return k;
}

uint64_t l0_bytes(const l0_op_t *op)
{
    return (uint64_t)lane_count(op) * op->count * dtype_size(op->dtype);
}

/* Reduces nsrc sources at byte offset off into dst, in rounds of at most L0_MAX_FANIN; the last
 * round streams its stores if asked to. */
static void reduce_span(const l0_op_t *op, unsigned lane, uint8_t *dst, uint64_t off, uint64_t n,
                        int stream)
{
    const void *src[L0_MAX_FANIN];
    size_t es = dtype_size(op->dtype);
    unsigned k = 0;

    while (k < op->nranks) {
        unsigned m = 0;
        if (k > 0)
            src[m++] = dst; /* the partial result so far */
        while (m < L0_MAX_FANIN && k < op->nranks)
            src[m++] = lane_src(op, lane, k++) + off;
        if (stream && k == op->nranks)
            reduce_n_stream(op->dtype, op->redop, dst, src, m, n / es);
        else
            reduce_n(op->dtype, op->redop, dst, src, m, n / es);
    }
}

static void copy_span(const l0_op_t *op, uint8_t *dst, const uint8_t *src, uint64_t n)
{
    const void *one[1] = {src};

    if (dst == src)
        return;
    if (op->stream)
        reduce_n_stream(HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_SUM, dst, one, 1, n);
    else
        memcpy(dst, src, n);
}

/* bounce: L0_BLOCK bytes, or NULL when the op does not stream. */
static void lane_span(const l0_op_t *op, unsigned lane, uint64_t off, uint64_t n, uint8_t *bounce)
{
    uint8_t *dsts[L0_MAX_FANIN * 4 > 256 ? L0_MAX_FANIN * 4 : 256];
    unsigned nd = lane_dsts(op, lane, dsts), first = 0;
    const uint8_t *src;

    if (nd == 0)
        return;
    if (op->kind == DESC_ALLREDUCE || op->kind == DESC_REDUCE || op->kind == DESC_REDUCE_SCATTER) {
        if (bounce != NULL && nd > 1) {
            reduce_span(op, lane, bounce, off, n, 0);
            src = bounce;
        } else {
            reduce_span(op, lane, dsts[0] + off, off, n, op->stream);
            src = dsts[0] + off;
            first = 1;
        }
    } else {
        src = lane_src(op, lane, 0) + off;
    }
    for (unsigned j = first; j < nd; j++)
        copy_span(op, dsts[j] + off, src, n);
}

void l0_run_part(const l0_op_t *op, unsigned part, unsigned nparts)
{
    size_t es = dtype_size(op->dtype);
    uint64_t lane_bytes = op->count * es, total = lane_count(op) * lane_bytes;
    uint64_t align = 64, begin, end;
    uint8_t *bounce = NULL;

    if (total == 0 || op->nranks > 256)
        return;
    /* A streamed result for several outputs is computed in this cache-resident block and then
     * streamed to each: reading it back from the first output would fetch it from memory
     * again. Without the block, the first output is read back. */
    if (op->stream)
        bounce = aligned_alloc(64, L0_BLOCK);
    /* Parts start on cache-line boundaries (and element boundaries) so they share no line. */
    while (align % es != 0)
        align += 64;
    begin = total / nparts * part / align * align;
    end = part + 1 == nparts ? total : total / nparts * (part + 1) / align * align;
    while (begin < end) {
        unsigned lane = (unsigned)(begin / lane_bytes);
        uint64_t off = begin % lane_bytes;
        uint64_t n = lane_bytes - off;
        if (n > end - begin)
            n = end - begin;
        if (n > L0_BLOCK)
            n = L0_BLOCK / es * es;
        lane_span(op, lane, off, n, bounce);
        begin += n;
    }
    free(bounce);
}
