/*
 * Descriptor validation: the daemon reads descriptors from a client's ring and must never act
 * on one that reaches outside that client's arena. Input: nranks, rank, arena bytes (32, 32 and
 * 64 bits, little-endian as on the host), then two descriptors as the ring holds them; missing
 * bytes are zero. Whatever desc_check accepts is checked here again with 128-bit arithmetic.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "desc_check.h"
#include "dtype.h"
#include "fuzz_common.h"
#include "hccl/hccl.h"

/* Every block of an accepted side lies inside the arena, and blocks never overlap. */
static void check_side(const desc_side_t *s, uint64_t bytes, uint64_t arena)
{
    unsigned __int128 end;

    if (s->nblocks == 0)
        return;
    if (s->bytes != bytes)
        abort();
    if (bytes == 0)
        return;
    if (s->nblocks > 1 && s->stride < s->bytes)
        abort();
    end = (unsigned __int128)s->off + (unsigned __int128)(s->nblocks - 1) * s->stride + s->bytes;
    if (end > arena)
        abort();
}

static void check_accepted(const desc_t *d, uint32_t nranks, uint32_t rank, uint64_t arena)
{
    desc_side_t s, r;
    unsigned __int128 bytes;

    if (d->kind == 0 || d->kind >= DESC_KIND_MAX || (d->root >= nranks && d->kind != DESC_BARRIER))
        abort();
    if (d->kind == DESC_BARRIER)
        return;
    if (!dtype_valid(d->dtype) || (desc_is_reduction(d->kind) && !redop_valid(d->redop)))
        abort();
    bytes = (unsigned __int128)d->count * dtype_size(d->dtype);
    if (bytes > arena)
        abort();
    desc_sides(d, nranks, rank, &s, &r);
    check_side(&s, (uint64_t)bytes, arena);
    check_side(&r, (uint64_t)bytes, arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    desc_input_t in;
    const char *why = NULL;

    memset(&in, 0, sizeof(in));
    memcpy(&in, data, size < sizeof(in) ? size : sizeof(in));
    if (desc_check(&in.a, in.nranks, in.rank, in.arena, &why) == HCCL_SUCCESS)
        check_accepted(&in.a, in.nranks, in.rank, in.arena);
    else if (why == NULL || why[0] == '\0')
        abort();
    /* Ranks compare their pieces of one operation in both directions. */
    if (desc_disagree(&in.a, &in.a) != NULL ||
        (desc_disagree(&in.a, &in.b) == NULL) != (desc_disagree(&in.b, &in.a) == NULL))
        abort();
    (void)desc_kind_name(in.a.kind);
    return 0;
}
