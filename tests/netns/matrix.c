#include "matrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../integration/ref.h"
#include "dtype.h"

enum kind { K_ALLREDUCE, K_ALLGATHER, K_BROADCAST, K_REDUCESCATTER, K_ALLTOALL, K_COUNT };

static const char *const kind_names[K_COUNT] = {"allreduce", "allgather", "broadcast",
                                                "reducescatter", "alltoall"};
static const int dtypes[] = {HCCL_DATA_TYPE_INT8,  HCCL_DATA_TYPE_UINT16, HCCL_DATA_TYPE_INT32,
                             HCCL_DATA_TYPE_FP16,  HCCL_DATA_TYPE_BFP16,  HCCL_DATA_TYPE_FP32,
                             HCCL_DATA_TYPE_INT64, HCCL_DATA_TYPE_FP64};
static const uint64_t counts[] = {1, 3, 1000, 65537};
/* The big count only for a few types: it is there for the transport (many segments, a full
 * window, retransmissions), not for the kernels. */
static const int big_dtypes[] = {HCCL_DATA_TYPE_INT8, HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_FP32,
                                 HCCL_DATA_TYPE_INT64};
#define BIG_COUNT 1048579ull
#define NDT (sizeof(dtypes) / sizeof(dtypes[0]))
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
#define NBIG (sizeof(big_dtypes) / sizeof(big_dtypes[0]))

typedef struct mcase {
    int kind, dt, op, inplace;
    uint32_t root;
    uint64_t count;
} mcase_t;

static uint64_t out_len(const mcase_t *c, uint32_t n)
{
    return c->kind == K_ALLGATHER || c->kind == K_ALLTOALL ? n * c->count : c->count;
}

static uint64_t in_len(const mcase_t *c, uint32_t n)
{
    return c->kind == K_REDUCESCATTER || c->kind == K_ALLTOALL ? n * c->count : c->count;
}

static int64_t expect(const mcase_t *c, uint32_t r, uint32_t n, uint64_t i)
{
    uint64_t cnt = c->count;

    switch (c->kind) {
    case K_ALLREDUCE: return ref_reduced(c->dt, c->op, n, i);
    case K_ALLGATHER: return ref_val(c->dt, c->op, (uint32_t)(i / cnt), i % cnt);
    case K_BROADCAST: return ref_val(c->dt, c->op, c->root, i);
    case K_REDUCESCATTER: return ref_reduced(c->dt, c->op, n, r * cnt + i);
    default: return ref_val(c->dt, c->op, (uint32_t)(i / cnt), r * cnt + i % cnt);
    }
}

static HcclResult call(const mcase_t *c, HcclComm comm, uint8_t *s, uint8_t *o)
{
    switch (c->kind) {
    case K_ALLREDUCE: return HcclAllReduce(s, o, c->count, c->dt, c->op, comm, NULL);
    case K_ALLGATHER: return HcclAllGather(s, o, c->count, c->dt, comm, NULL);
    case K_BROADCAST: return HcclBroadcast(o, c->count, c->dt, c->root, comm, NULL);
    case K_REDUCESCATTER: return HcclReduceScatter(s, o, c->count, c->dt, c->op, comm, NULL);
    default: return HcclAlltoAll(s, c->count, c->dt, o, c->count, c->dt, comm, NULL);
    }
}

/* In place as HCCL defines it: the output is the input (allgather: this rank's block of the
 * output is the input; reducescatter: this rank's block of the input is the output). */
static void place(const mcase_t *c, uint8_t *send, uint8_t *recv, uint32_t r, uint8_t **s_p,
                  uint8_t **o_p)
{
    size_t es = dtype_size(c->dt);

    *s_p = send;
    *o_p = recv;
    if (!c->inplace)
        return;
    if (c->kind == K_ALLGATHER)
        *s_p = recv + r * c->count * es;
    else if (c->kind == K_REDUCESCATTER)
        *o_p = send + r * c->count * es;
    else
        *o_p = send;
}

/* 0: exact; 1: wrong result; 2: the call failed (the communicator may be unusable). */
static int run_case(HcclComm comm, uint32_t r, uint32_t n, const mcase_t *c, uint8_t *send,
                    uint8_t *recv)
{
    uint64_t bad = 0, first = 0, olen = out_len(c, n);
    uint8_t *s, *o;
    HcclResult rc;

    place(c, send, recv, r, &s, &o);
    memset(o, 0xEE, olen * dtype_size(c->dt));
    if (c->kind != K_BROADCAST)
        ref_fill(c->dt, c->op, r, s, 0, in_len(c, n));
    else if (r == c->root)
        ref_fill(c->dt, c->op, r, o, 0, c->count);
    if ((rc = call(c, comm, s, o)) != HCCL_SUCCESS) {
        fprintf(stderr, "rank %u: %s %s %s count %llu root %u%s: %s\n", r, kind_names[c->kind],
                dtype_name(c->dt), redop_name(c->op), (unsigned long long)c->count, c->root,
                c->inplace ? " in place" : "", HcclGetErrorString(rc));
        return 2;
    }
    for (uint64_t i = 0; i < olen; i++)
        if (!ref_equal(c->dt, o, i, expect(c, r, n, i)) && bad++ == 0)
            first = i;
    if (bad == 0)
        return 0;
    fprintf(stderr, "rank %u: %s %s %s count %llu root %u%s: %llu wrong, first at %llu\n", r,
            kind_names[c->kind], dtype_name(c->dt), redop_name(c->op), (unsigned long long)c->count,
            c->root, c->inplace ? " in place" : "", (unsigned long long)bad,
            (unsigned long long)first);
    return 1;
}

/* Case i of a kind: every type x count, then the big ones; op, root and placement rotate so
 * that each of them meets several types and counts. */
static int make_case(int kind, size_t i, uint32_t n, const matrix_arg_t *a, mcase_t *c)
{
    static const int ops[] = {HCCL_REDUCE_SUM, HCCL_REDUCE_PROD, HCCL_REDUCE_MAX, HCCL_REDUCE_MIN};
    int reduces = kind == K_ALLREDUCE || kind == K_REDUCESCATTER;

    if (i < NDT * NCOUNTS) {
        c->dt = dtypes[i / NCOUNTS];
        c->count = counts[i % NCOUNTS];
    } else if (a->big && i < NDT * NCOUNTS + NBIG) {
        c->dt = big_dtypes[i - NDT * NCOUNTS];
        c->count = BIG_COUNT;
    } else {
        return 0;
    }
    c->kind = kind;
    c->op = reduces ? ops[(i + i / NCOUNTS) % 4] : HCCL_REDUCE_SUM;
    c->root = (uint32_t)(i % n);
    c->inplace = kind != K_ALLTOALL && kind != K_BROADCAST && (i + i / NCOUNTS) % 2 == 1;
    return 1;
}

int matrix_run(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const matrix_arg_t *a = arg;
    size_t bytes = (size_t)n * BIG_COUNT * 8;
    uint8_t *send = malloc(bytes), *recv = malloc(bytes);
    int wrong = 0, st = 0;
    mcase_t c;

    if (send == NULL || recv == NULL)
        return 10;
    for (int kind = 0; kind < K_COUNT && st < 2 && wrong < 3; kind++) {
        if (a->allreduce && kind != K_ALLREDUCE)
            continue;
        for (size_t i = 0; make_case(kind, i, n, a, &c) && st < 2 && wrong < 3; i++) {
            st = run_case(comm, r, n, &c, send, recv);
            wrong += st == 1;
        }
    }
    free(send);
    free(recv);
    return st == 2 || wrong ? 1 : 0;
}
