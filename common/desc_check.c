#include "desc_check.h"

#include "algo_id.h"
#include "dtype.h"
#include "hccl/hccl.h"

static const char *const kind_names[DESC_KIND_MAX] = {
    [DESC_ALLREDUCE] = "allreduce", [DESC_BROADCAST] = "broadcast",
    [DESC_ALLGATHER] = "allgather", [DESC_REDUCE_SCATTER] = "reducescatter",
    [DESC_ALLTOALL] = "alltoall",   [DESC_REDUCE] = "reduce",
    [DESC_SCATTER] = "scatter",     [DESC_BARRIER] = "barrier",
    [DESC_SEND] = "send",           [DESC_RECV] = "recv",
};

const char *desc_kind_name(uint8_t kind)
{
    return kind > 0 && kind < DESC_KIND_MAX ? kind_names[kind] : "invalid";
}

int desc_is_collective(uint8_t kind)
{
    return kind > 0 && kind < DESC_SEND;
}

int desc_is_reduction(uint8_t kind)
{
    return kind == DESC_ALLREDUCE || kind == DESC_REDUCE_SCATTER || kind == DESC_REDUCE;
}

int desc_is_rooted(uint8_t kind)
{
    return kind == DESC_BROADCAST || kind == DESC_REDUCE || kind == DESC_SCATTER;
}

const char *desc_algo_named(const desc_t *d)
{
    return desc_algo(d) >= 0 ? algo_name(desc_algo(d)) : "the comm's algorithm";
}

const char *desc_disagree(const desc_t *a, const desc_t *b)
{
    if (a->kind != b->kind)
        return "operation";
    if (a->count != b->count || a->total != b->total)
        return "count";
    if (a->kind != DESC_BARRIER && a->dtype != b->dtype)
        return "data type";
    if (desc_is_reduction(a->kind) && a->redop != b->redop)
        return "reduce op";
    if (a->root != b->root && desc_is_rooted(a->kind))
        return "root";
    if ((a->flags & DESC_F_INLINE) != (b->flags & DESC_F_INLINE))
        return "protocol";
    if (desc_algo(a) != desc_algo(b))
        return "algorithm";
    return NULL;
}

static void side_set(desc_side_t *s, uint64_t off, uint64_t stride, uint64_t bytes, uint32_t n)
{
    s->off = off;
    s->stride = stride;
    s->bytes = bytes;
    s->nblocks = n;
}

void desc_sides(const desc_t *d, uint32_t nranks, uint32_t rank, desc_side_t *send_p,
                desc_side_t *recv_p)
{
    uint64_t b = d->count * dtype_size(d->dtype);
    uint32_t ns = 0, nr = 0;
    int root = d->root == rank;

    switch (d->kind) {
    case DESC_ALLREDUCE:
        ns = 1;
        nr = 1;
        break;
    case DESC_BROADCAST:
        ns = root;
        nr = 1;
        break;
    case DESC_ALLGATHER:
        ns = 1;
        nr = nranks;
        break;
    case DESC_REDUCE_SCATTER:
        ns = nranks;
        nr = 1;
        break;
    case DESC_ALLTOALL:
        ns = nranks;
        nr = nranks;
        break;
    case DESC_REDUCE:
        ns = 1;
        nr = root;
        break;
    case DESC_SCATTER:
        ns = root ? nranks : 0;
        nr = 1;
        break;
    case DESC_SEND: ns = 1; break;
    case DESC_RECV: nr = 1; break;
    default: break;
    }
    side_set(send_p, d->send_off, d->send_stride, b, ns);
    side_set(recv_p, d->recv_off, d->recv_stride, b, nr);
}

/* Whether nblocks blocks of bytes, stride apart from off, fit in [0, arena) without overlap. */
static int side_fits(const desc_side_t *s, uint64_t arena)
{
    uint64_t span, end;

    if (s->nblocks == 0 || s->bytes == 0)
        return 1;
    if (s->nblocks > 1 && s->stride < s->bytes)
        return 0;
    if (__builtin_mul_overflow((uint64_t)(s->nblocks - 1), s->stride, &span) ||
        __builtin_add_overflow(span, s->bytes, &span) || __builtin_add_overflow(s->off, span, &end))
        return 0;
    return end <= arena;
}

int desc_check(const desc_t *d, uint32_t nranks, uint32_t rank, uint64_t arena_bytes,
               const char **why)
{
    desc_side_t s, r;
    uint64_t bytes;

    if (d->kind == 0 || d->kind >= DESC_KIND_MAX)
        return *why = "unknown operation kind", HCCL_E_PARA;
    if (desc_algo(d) >= 0 && !algo_serves(desc_algo(d), d->kind))
        return *why = "its own algorithm does not serve the operation", HCCL_E_PARA;
    if (d->kind == DESC_BARRIER)
        return d->count == 0 ? HCCL_SUCCESS : (*why = "barrier with a count", HCCL_E_PARA);
    if (!dtype_valid(d->dtype))
        return *why = "invalid data type", HCCL_E_PARA;
    if (desc_is_reduction(d->kind) && !redop_valid(d->redop))
        return *why = "invalid reduce operation", HCCL_E_PARA;
    if (d->root >= nranks)
        return *why = "root or peer rank out of range", HCCL_E_PARA;
    if (__builtin_mul_overflow(d->count, (uint64_t)dtype_size(d->dtype), &bytes) ||
        bytes > arena_bytes)
        return *why = "count too large for the arena", HCCL_E_PARA;
    desc_sides(d, nranks, rank, &s, &r);
    if (!side_fits(&s, arena_bytes))
        return *why = "send blocks outside the client's arena", HCCL_E_PARA;
    if (!side_fits(&r, arena_bytes))
        return *why = "receive blocks outside the client's arena", HCCL_E_PARA;
    return HCCL_SUCCESS;
}
