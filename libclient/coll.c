/*
 * Running operations: each is cut into pieces of P elements per block (P is the same on every
 * rank: it depends only on the comm's chunk size, the kind and the rank count), each piece is
 * one descriptor. A side of the operation that lies in the arena (HcclMemAlloc) is used where it
 * is; any other side is staged through arena slots, with up to HC_PIPELINE pieces in flight so
 * that copying in and out overlaps the daemon's work.
 */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "desc_check.h"
#include "dtype.h"
#include "lane.h"
#include "log.h"
#include "reg.h"

/* Ops run together (a batch of sends and receives): each has a piece in flight, so a batch takes
 * at most as many as the process has submission slots. */
#define HC_MAX_OPS HCCL_BATCH_SEND_RECV_MAX
#define HC_STACK_PLANS 4       /* a call of up to this many ops plans on the stack */
#define HC_MIN_SLOT_BYTES 4096 /* pieces shrink for a crowded arena down to this chunk */

typedef struct inflight {
    op_plan_t *p;
    uint64_t piece;
    uint32_t slot;  /* completion slot */
    unsigned stage; /* staging slot */
    int r_staged;   /* its receive blocks are copied out of the slot */
} inflight_t;

/* Blocks a kind can have on one side at most, on any rank: fixes P for the whole comm. */
uint64_t hc_kind_max_blocks(uint8_t kind, uint32_t n)
{
    switch (kind) {
    case DESC_ALLGATHER:
    case DESC_REDUCE_SCATTER:
    case DESC_SCATTER: return (uint64_t)n + 1;
    case DESC_ALLTOALL: return 2ull * n;
    default: return 2;
    }
}

HcclResult hc_plan(hc_comm_t *comm, const hc_op_t *op, unsigned nstage, unsigned shrink,
                   op_plan_t *p)
{
    desc_t d = {.kind = op->kind, .dtype = op->dtype, .root = op->root, .count = op->count};
    uint64_t es = dtype_size(op->dtype), span;

    memset(p, 0, sizeof(*p));
    p->op = op;
    desc_sides(&d, comm->nranks, comm->rank, &p->s, &p->r);
    /* The root of a broadcast receives in place: the daemon skips it, we copy nothing out. */
    if (op->kind == DESC_BROADCAST && comm->rank == op->root)
        p->r.nblocks = 0;
    p->piece = comm->chunk_bytes / (es * hc_kind_max_blocks(op->kind, comm->nranks)) >> shrink;
    if (p->piece == 0)
        p->piece = 1;
    /* A small op stages only what it has (both sides of a transfer have the same count). */
    if (op->count > 0 && p->piece > op->count)
        p->piece = op->count;
    p->npieces = (op->count + p->piece - 1) / p->piece;
    /* A barrier, and a transfer of nothing inside alltoallv, still meets its peer so that the
     * daemon can check that both sides agree. */
    if (p->npieces == 0)
        p->npieces = 1;
    span = p->s.nblocks ? (p->s.nblocks - 1) * op->send_stride + p->s.bytes : 0;
    p->s_zc = p->s.nblocks == 0 || hc_mem_off(comm->c, op->send, span, &p->s_off);
    span = p->r.nblocks ? (p->r.nblocks - 1) * op->recv_stride + p->r.bytes : 0;
    p->r_zc = p->r.nblocks == 0 || hc_mem_off(comm->c, op->recv, span, &p->r_off);
    p->slot_bytes = ((p->s_zc ? 0 : p->s.nblocks) + (p->r_zc ? 0 : p->r.nblocks)) * p->piece * es;
    p->slot_bytes = (p->slot_bytes + 63) / 64 * 64;
    p->nstage = nstage;
    if (p->slot_bytes == 0)
        return HCCL_SUCCESS;
    p->stage_off = hc_arena_alloc(&comm->c->alloc, p->slot_bytes * nstage);
    if (p->stage_off == UINT64_MAX) {
        /* The caller may try again with fewer stages or smaller pieces. */
        p->slot_bytes = 0;
        return HCCL_E_MEMORY;
    }
    return HCCL_SUCCESS;
}

static void piece_range(const op_plan_t *p, uint64_t piece, uint64_t *first_p, uint64_t *n_p)
{
    uint64_t first = piece * p->piece;
    uint64_t n = p->op->count - first;

    *first_p = first;
    *n_p = n < p->piece ? n : p->piece;
}

/*
 * Whether one side of a piece (nblocks blocks of n elements from element `first`, stride apart)
 * lies in the arena: all of the op's side did (*off_p from the plan), or this piece's blocks lie
 * on registered pages (reg.h), which a registered buffer's partial end pages do not.
 */
int hc_piece_zc(hc_comm_t *comm, int op_zc, uint64_t op_off, const uint8_t *base, uint64_t stride,
                uint32_t nblocks, uint64_t es, uint64_t first, uint64_t n, uint64_t *off_p)
{
    if (op_zc || nblocks == 0) {
        *off_p = op_off + first * es;
        return 1;
    }
    return hc_mem_off(comm->c, base + first * es, (nblocks - 1) * stride + n * es, off_p);
}

/* Fills the descriptor for one piece, copying staged send blocks into the slot; *r_staged_p
 * says whether its receive blocks are staged (copied out at completion). */
void hc_piece_prep(hc_comm_t *comm, op_plan_t *p, uint64_t piece, unsigned stage, desc_t *d,
                   int *r_staged_p)
{
    const hc_op_t *op = p->op;
    uint64_t es = dtype_size(op->dtype), first, n, slot, s_off, r_off;
    uint8_t *arena = comm->c->arena;

    piece_range(p, piece, &first, &n);
    slot = p->stage_off + stage * p->slot_bytes;
    int s_zc = hc_piece_zc(comm, p->s_zc, p->s_off, op->send, op->send_stride, p->s.nblocks, es,
                           first, n, &s_off);
    int r_zc = hc_piece_zc(comm, p->r_zc, p->r_off, op->recv, op->recv_stride, p->r.nblocks, es,
                           first, n, &r_off);
    *d = (desc_t){.comm_id = comm->id,
                  .kind = op->kind,
                  .dtype = op->dtype,
                  .redop = op->redop,
                  .count = n,
                  .root = op->root,
                  .rank = comm->rank};
    if (s_zc) {
        d->send_off = s_off;
        d->send_stride = op->send_stride;
    } else {
        d->send_off = slot;
        d->send_stride = n * es;
        for (uint32_t b = 0; b < p->s.nblocks; b++)
            memcpy(arena + slot + b * n * es, op->send + b * op->send_stride + first * es, n * es);
    }
    /* The receive blocks follow the send blocks' place in the slot, used or not, as
     * hc_piece_copy_out expects. */
    slot += p->s_zc ? 0 : p->s.nblocks * n * es;
    *r_staged_p = !r_zc;
    if (r_zc) {
        d->recv_off = r_off;
        d->recv_stride = op->recv_stride;
    } else {
        d->recv_off = slot;
        d->recv_stride = n * es;
    }
    if (op->kind == DESC_BROADCAST && comm->rank == op->root) {
        d->recv_off = d->send_off;
        d->recv_stride = d->send_stride;
    }
    /* Every piece carries the operation's total count, so that the daemon notices at the first
     * piece when ranks, or a sender and its receiver, disagree. */
    d->total = op->count;
    if (op->own_algo != 0)
        desc_set_algo(d, op->own_algo - 1);
    /* The daemon's QoS counts the op as under way until its last piece. */
    if (piece + 1 < p->npieces)
        d->flags |= DESC_F_MORE;
    if (desc_is_collective(op->kind))
        d->seq = comm->coll_seq++;
    else if (comm->p2p_seq != NULL && op->root < comm->nranks)
        d->seq = comm->p2p_seq[(op->kind == DESC_SEND ? 0 : comm->nranks) + op->root]++;
    /* In place on arena memory: a daemon that restarts under it cannot run it again. */
    if (s_zc && r_zc && d->recv_off < d->send_off + p->s.nblocks * d->send_stride &&
        d->send_off < d->recv_off + p->r.nblocks * d->recv_stride &&
        !(op->kind == DESC_BROADCAST && comm->rank == op->root))
        d->flags |= DESC_F_OVERWRITES;
}

void hc_piece_copy_out(hc_comm_t *comm, const op_plan_t *p, uint64_t piece, unsigned stage)
{
    const hc_op_t *op = p->op;
    uint64_t es = dtype_size(op->dtype), first, n, slot;
    const uint8_t *arena = comm->c->arena;

    piece_range(p, piece, &first, &n);
    slot = p->stage_off + stage * p->slot_bytes + (p->s_zc ? 0 : p->s.nblocks * n * es);
    for (uint32_t b = 0; b < p->r.nblocks; b++)
        memcpy(op->recv + b * op->recv_stride + first * es, arena + slot + b * n * es, n * es);
}

static HcclResult retire(hc_comm_t *comm, inflight_t *f, uint64_t deadline)
{
    uint32_t culprit = 0;
    HcclResult rc = hc_wait_by(comm->c, f->slot, deadline, &culprit);

    if (rc == HCCL_SUCCESS && f->r_staged)
        hc_piece_copy_out(comm, f->p, f->piece, f->stage);
    if (rc == HCCL_E_REMOTE)
        hc_comm_log_culprit(comm, culprit);
    return rc;
}

void hc_comm_log_culprit(hc_comm_t *comm, uint32_t culprit)
{
    /* Once per comm: who it was (the daemons' logs also name the node). */
    if (culprit != 0 && !comm->culprit_logged) {
        comm->culprit_logged = 1;
        ERR("COLL",
            "rank %u: comm %u failed: rank %u died or left (its daemon's log, and the "
            "others', name its node)",
            comm->rank, comm->id, culprit - 1);
    }
}

/* Posts the pieces of all ops round-robin, at most nstage per op in flight (each owns one
 * staging slot; nstage * nops is at most HC_MAX_OPS), and retires them in posting order. The whole
 * call has one HCCL_EXEC_TIMEOUT; after a failure nothing more is posted, so a stuck peer costs one
 * timeout, not one per piece. */
static HcclResult pipeline(hc_comm_t *comm, op_plan_t *plans, unsigned nops)
{
    inflight_t q[HC_MAX_OPS];
    unsigned head = 0, n = 0, cap = plans[0].nstage * nops;
    unsigned busy[HC_MAX_OPS] = {0}, stage_next[HC_MAX_OPS] = {0};
    HcclResult first_err = HCCL_SUCCESS, rc;
    uint64_t deadline = hc_comm_deadline(comm);

    for (;;) {
        int posted = 0;
        for (unsigned i = 0; i < nops && first_err == HCCL_SUCCESS; i++) {
            op_plan_t *p = &plans[i];
            if (p->next >= p->npieces || busy[i] == p->nstage)
                continue;
            inflight_t *f = &q[(head + n) % cap];
            desc_t d;
            f->p = p;
            f->piece = p->next++;
            f->stage = stage_next[i]++ % p->nstage;
            hc_piece_prep(comm, p, f->piece, f->stage, &d, &f->r_staged);
            rc = hc_submit(comm, &d, &f->slot);
            if (rc != HCCL_SUCCESS)
                return rc;
            busy[i]++;
            n++;
            posted = 1;
        }
        if (posted)
            continue;
        if (n == 0)
            break;
        rc = retire(comm, &q[head], deadline);
        first_err = first_err ? first_err : rc;
        busy[q[head].p - plans]--;
        head = (head + 1) % cap;
        n--;
    }
    return first_err;
}

void hc_plan_free(hc_comm_t *comm, op_plan_t *p)
{
    if (p->slot_bytes != 0 && p->stage_off != UINT64_MAX)
        hc_arena_free(&comm->c->alloc, p->stage_off);
    p->slot_bytes = 0;
}

HcclResult hc_ops_run(hc_comm_t *comm, const hc_op_t *ops, unsigned nops)
{
    op_plan_t stack_plans[HC_STACK_PLANS], *plans = stack_plans;
    HcclResult rc = HCCL_SUCCESS;
    unsigned planned = 0;

    if (nops == 0 || nops > HC_MAX_OPS || nops > comm->c->nslots)
        return HCCL_E_PARA;
    if (nops > HC_STACK_PLANS && (plans = calloc(nops, sizeof(*plans))) == NULL)
        return HCCL_E_MEMORY;

    int lanes = comm->lanes != NULL && nops == 1 && desc_is_collective(ops[0].kind);
    if (lanes && hc_lanes_before(comm, &ops[0], &rc)) {
        lanes = 0; /* done over the lanes */
    } else if (comm->coop != NULL && nops == 1 && desc_is_collective(ops[0].kind)) {
        rc = hc_coop_run(comm, &ops[0]);
    } else {
        /* A batch of many ops, or a crowded arena, runs fewer pieces of each op at once (every
         * op the same number), then smaller ones, rather than failing. */
        unsigned want = HC_MAX_OPS / nops < HC_PIPELINE ? HC_MAX_OPS / nops : HC_PIPELINE;
        unsigned nstage = want, shrink = 0;
        for (;;) {
            rc = HCCL_SUCCESS;
            for (planned = 0; planned < nops && rc == HCCL_SUCCESS; planned++)
                rc = hc_plan(comm, &ops[planned], nstage, shrink, &plans[planned]);
            if (rc != HCCL_E_MEMORY)
                break;
            if (nstage == 1 && comm->chunk_bytes >> (shrink + 1) < HC_MIN_SLOT_BYTES) {
                ERR("COLL", "no room in the arena (HCCL_BUFFSIZE) to stage %u op(s) at once", nops);
                break;
            }
            for (unsigned i = 0; i < planned; i++)
                hc_plan_free(comm, &plans[i]);
            if (nstage > 1)
                nstage /= 2;
            else
                shrink++;
        }
        if (rc == HCCL_SUCCESS && (nstage < want || shrink > 0) && !comm->short_logged) {
            comm->short_logged = 1;
            INFO("COLL",
                 "comm %u: the arena is short (HCCL_BUFFSIZE) for %u op(s) at once: %u piece(s) "
                 "of each in flight instead of %u, of %u KiB at most (logged once per comm)",
                 comm->id, nops, nstage, want, (unsigned)((comm->chunk_bytes >> shrink) / 1024));
        }
        if (rc == HCCL_SUCCESS)
            rc = pipeline(comm, plans, nops);
        for (unsigned i = 0; i < planned; i++)
            hc_plan_free(comm, &plans[i]);
    }
    if (plans != stack_plans)
        free(plans);
    if (lanes)
        hc_lanes_after(comm, &ops[0], rc);
    if (rc != HCCL_SUCCESS)
        hc_comm_set_error(comm, rc);
    return rc;
}

/* Pairwise exchange: in step d every rank sends to rank+d and receives from rank-d, so each
 * step's transfers pair up and any sizes work with bounded staging. */
HcclResult hc_alltoallv_run(hc_comm_t *comm, const uint8_t *send, const uint64_t *scounts,
                            const uint64_t *sdispls, uint8_t *recv, const uint64_t *rcounts,
                            const uint64_t *rdispls, uint8_t dtype)
{
    uint32_t n = comm->nranks, me = comm->rank;
    uint64_t es = dtype_size(dtype);
    HcclResult first_err = HCCL_SUCCESS;

    if (scounts[me] != rcounts[me]) {
        ERR("COLL", "alltoallv: rank %u sends itself %llu elements but expects %llu", me,
            (unsigned long long)scounts[me], (unsigned long long)rcounts[me]);
        return HCCL_E_PARA;
    }
    memmove(recv + rdispls[me] * es, send + sdispls[me] * es, scounts[me] * es);
    for (uint32_t d = 1; d < n; d++) {
        uint32_t to = (me + d) % n, from = (me + n - d) % n;
        hc_op_t ops[2] = {
            {.kind = DESC_SEND,
             .dtype = dtype,
             .root = to,
             .count = scounts[to],
             .send = send + sdispls[to] * es},
            {.kind = DESC_RECV,
             .dtype = dtype,
             .root = from,
             .count = rcounts[from],
             .recv = recv + rdispls[from] * es},
        };
        HcclResult rc = hc_ops_run(comm, ops, 2);
        first_err = first_err ? first_err : rc;
    }
    return first_err;
}
