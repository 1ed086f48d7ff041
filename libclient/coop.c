/*
 * Cooperative level 0 (see common/coop.h): the ranks of a communicator run its collectives
 * among themselves. Pieces small enough travel inline in the control block. Larger pieces read
 * every rank's input where it lies (its HcclMemAlloc buffer, or a copy in its staging area).
 * When every rank's output lies in its arena, each rank computes one share of the piece into all
 * outputs (two barriers: posted, done); otherwise each rank computes its own output straight
 * into its own buffer, whatever memory that is (one barrier, plus "done" for a rank whose input
 * others read in place). Staging is double-buffered by piece parity: a rank overwrites a slot
 * two pieces later, after every peer posted the piece in between and so finished with it.
 * Waiting spins briefly, yielding the core, then sleeps on a futex in the control block.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"
#include "coop.h"
#include "dtype.h"
#include "futex.h"
#include "l0.h"
#include "log.h"
#include "prof.h"
#include "reduce.h"
#include "reg.h"

#define SLEEP_SLICE_NS 100000000ll
#define COOP_ZC_STREAM_FACTOR 4

struct hc_coop {
    coop_ctl_t *ctl;
    uint64_t ctl_bytes;
    int ctl_fd;      /* kept for a restarted daemon (rejoin.c) */
    uint8_t **arena; /* every rank's arena as mapped here */
    uint64_t *arena_bytes;
    l0_rank_t *l0r;
    uint64_t stage_off; /* two staging slots of stage_slot bytes in our arena */
    uint64_t stage_slot;
    int broken;
};

static void coop_free(hc_comm_t *comm, hc_coop_t *cp)
{
    if (cp->stage_slot != 0)
        hc_arena_free(&comm->c->alloc, cp->stage_off);
    if (cp->ctl != NULL)
        munmap(cp->ctl, cp->ctl_bytes);
    if (cp->ctl_fd >= 0)
        close(cp->ctl_fd);
    for (uint32_t q = 0; cp->arena != NULL && q < comm->nranks; q++)
        if (cp->arena[q] != NULL && q != comm->rank)
            munmap(cp->arena[q], cp->arena_bytes[q]);
    free(cp->arena);
    free(cp->arena_bytes);
    free(cp->l0r);
    free(cp);
}

HcclResult hc_coop_attach(hc_comm_t *comm, const Hccld__CommInitResp *r, int *fds, int nfds)
{
    uint32_t n = comm->nranks;
    hc_coop_t *cp = calloc(1, sizeof(*cp));
    HcclResult rc = HCCL_E_INTERNAL;

    if (cp == NULL || nfds != (int)n + 1 || r->n_arena_bytes != n)
        goto out;
    cp->ctl_fd = -1;
    cp->arena = calloc(n, sizeof(*cp->arena));
    cp->arena_bytes = calloc(n, sizeof(*cp->arena_bytes));
    cp->l0r = calloc(n, sizeof(*cp->l0r));
    if (cp->arena == NULL || cp->arena_bytes == NULL || cp->l0r == NULL)
        goto out;
    cp->ctl_bytes = r->ctl_bytes;
    cp->ctl = mmap(NULL, cp->ctl_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (cp->ctl == MAP_FAILED) {
        cp->ctl = NULL;
        ERR("INIT", "mmap() of the coop control block failed: %s", strerror(errno));
        goto out;
    }
    for (uint32_t q = 0; q < n; q++) {
        cp->arena_bytes[q] = r->arena_bytes[q];
        if (q == comm->rank) {
            cp->arena[q] = comm->c->arena;
            continue;
        }
        cp->arena[q] =
            mmap(NULL, cp->arena_bytes[q], PROT_READ | PROT_WRITE, MAP_SHARED, fds[q + 1], 0);
        if (cp->arena[q] == MAP_FAILED) {
            cp->arena[q] = NULL;
            ERR("INIT", "mmap() of rank %u's arena failed: %s", q, strerror(errno));
            goto out;
        }
    }
    if (cp->ctl->magic != COOP_MAGIC || cp->ctl->nranks != n)
        goto out;
    cp->stage_slot = comm->chunk_bytes;
    cp->stage_off = hc_arena_alloc(&comm->c->alloc, 2 * cp->stage_slot);
    if (cp->stage_off == UINT64_MAX) {
        cp->stage_slot = 0;
        ERR("INIT", "no room for coop staging in the arena (HCCL_BUFFSIZE)");
        rc = HCCL_E_MEMORY;
        goto out;
    }
    cp->ctl_fd = fds[0];
    fds[0] = -1;
    comm->coop = cp;
    cp = NULL;
    rc = HCCL_SUCCESS;
out:
    for (int i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (cp != NULL)
        coop_free(comm, cp);
    return rc;
}

int hc_coop_ctl_fd(const hc_comm_t *comm)
{
    return comm->coop != NULL ? comm->coop->ctl_fd : -1;
}

void hc_coop_detach(hc_comm_t *comm)
{
    if (comm->coop != NULL)
        coop_free(comm, comm->coop);
    comm->coop = NULL;
}

/* Stores k, then rings only if someone sleeps: either the sleeper's recheck sees k, or this
 * load sees the sleeper (both sides fence between their store and their load). */
static void publish(coop_ctl_t *ctl, uint64_t *field, uint64_t k)
{
    __atomic_store_n(field, k, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&ctl->sleepers, __ATOMIC_RELAXED) != 0) {
        __atomic_add_fetch(&ctl->bell, 1, __ATOMIC_SEQ_CST);
        futex_wake(&ctl->bell, INT32_MAX);
    }
}

/* Writes the descriptor, its sequence last, so that a peer that sees the sequence sees it all. */
static void post(coop_ctl_t *ctl, desc_t *slot, const desc_t *d)
{
    desc_t tmp = *d;

    /* The old sequence (k - 2) stays until the release store: nobody waits for it any more. */
    tmp.seq = slot->seq;
    *slot = tmp;
    publish(ctl, &slot->seq, d->seq);
}

static int all_reached(const coop_ctl_t *ctl, uint32_t n, int done, uint64_t k)
{
    for (uint32_t q = 0; q < n; q++) {
        const uint64_t *f = done ? &ctl->slot[q].done : &ctl->slot[q].pkt[k & 1].d.seq;
        if (__atomic_load_n(f, __ATOMIC_ACQUIRE) < k)
            return 0;
    }
    return 1;
}

/* Waits until every rank's posted (or done) counter reached k. */
static HcclResult wait_all(hc_comm_t *comm, int done, uint64_t k)
{
    hc_client_t *c = comm->c;
    coop_ctl_t *ctl = comm->coop->ctl;
    uint64_t spin_until = now_ns() + c->spin_ns, deadline = hc_comm_deadline(comm);

    for (unsigned i = 0;; i++) {
        if (all_reached(ctl, comm->nranks, done, k))
            return HCCL_SUCCESS;
        if (__atomic_load_n(&ctl->abort, __ATOMIC_ACQUIRE))
            return HCCL_E_REMOTE;
        /* Spin, but let a peer that shares this core run; look at the clock rarely. */
        if ((i & 63) != 63) {
            cpu_relax();
            continue;
        }
        if (now_ns() < spin_until) {
            sched_yield();
            continue;
        }
        if (hc_daemon_gone(c))
            return HCCL_E_REMOTE;
        if (now_ns() > deadline) {
            ERR("COLL", "rank %u: a collective did not complete within %s", comm->rank,
                comm->cfg.exec_timeout_ns != 0 ? "hcclExecTimeOut" : "HCCL_EXEC_TIMEOUT");
            return HCCL_E_TIMEOUT;
        }
        __atomic_add_fetch(&ctl->sleepers, 1, __ATOMIC_SEQ_CST);
        uint32_t bell = __atomic_load_n(&ctl->bell, __ATOMIC_SEQ_CST);
        if (!all_reached(ctl, comm->nranks, done, k) &&
            !__atomic_load_n(&ctl->abort, __ATOMIC_SEQ_CST))
            futex_wait(&ctl->bell, bell, SLEEP_SLICE_NS);
        __atomic_sub_fetch(&ctl->sleepers, 1, __ATOMIC_SEQ_CST);
    }
}

/* wait_all for every rank's post of the op's first piece, timed for the profile: how long
 * this rank waited for the last one (hc_prof_coop_wait). */
static HcclResult wait_posted(hc_comm_t *comm, uint64_t k, int first)
{
    uint64_t t0 = first && hc_prof_enabled() ? now_ns() : 0;
    HcclResult rc = wait_all(comm, 0, k);

    if (t0 != 0)
        hc_prof_coop_wait(now_ns() - t0);
    return rc;
}

/* Every rank's descriptor for this piece must agree with rank 0's and stay inside that rank's
 * memory: a peer is trusted no more than a client is. All ranks judge the same slots, so all
 * reach the same verdict. */
static HcclResult check_slots(hc_comm_t *comm, unsigned par)
{
    hc_coop_t *cp = comm->coop;
    const desc_t *d0 = &cp->ctl->slot[0].pkt[par].d;
    const char *why = NULL;

    for (uint32_t q = 0; q < comm->nranks; q++) {
        desc_t d = cp->ctl->slot[q].pkt[par].d;
        int inl = d.flags & DESC_F_INLINE;
        const char *what = desc_disagree(d0, &d);
        if (what != NULL && strcmp(what, "algorithm") == 0) {
            ERR("COLL",
                "rank %u: ranks disagree on the algorithm: rank 0 asked for %s, rank %u for %s",
                comm->rank, desc_algo_named(d0), q, desc_algo_named(&d));
            return HCCL_E_PARA;
        }
        if (what != NULL) {
            ERR("COLL",
                "rank %u: ranks disagree on the %s: rank 0 posted %s(count %llu), rank "
                "%u posted %s(count %llu)",
                comm->rank, what, desc_kind_name(d0->kind), (unsigned long long)d0->total, q,
                desc_kind_name(d.kind), (unsigned long long)d.total);
            return HCCL_E_PARA;
        }
        if (desc_check(&d, comm->nranks, q, inl ? COOP_INLINE : cp->arena_bytes[q], &why) != 0) {
            ERR("COLL", "rank %u: rank %u's descriptor is invalid: %s", comm->rank, q, why);
            return HCCL_E_PARA;
        }
    }
    return HCCL_SUCCESS;
}

static int fits_inline(const hc_comm_t *comm, const hc_op_t *op)
{
    uint64_t es = dtype_size(op->dtype);

    return op->count <= COOP_INLINE / es / hc_kind_max_blocks(op->kind, comm->nranks);
}

/* Small operation: inputs inline, every rank computes its own output, one barrier. */
static HcclResult run_inline(hc_comm_t *comm, const hc_op_t *op)
{
    hc_coop_t *cp = comm->coop;
    uint32_t me = comm->rank, n = comm->nranks;
    uint64_t k = ++comm->coll_seq, es = dtype_size(op->dtype), b = op->count * es;
    unsigned par = k & 1;
    coop_slot_t *mine = &cp->ctl->slot[me];
    desc_t d = {.comm_id = comm->id,
                .kind = op->kind,
                .dtype = op->dtype,
                .redop = op->redop,
                .flags = DESC_F_INLINE,
                .seq = k,
                .count = op->count,
                .root = op->root,
                .rank = me,
                .send_stride = b,
                .recv_stride = b,
                .total = op->count};
    desc_side_t s, r;
    HcclResult rc;

    if (op->own_algo != 0) /* no level 1 here, but every rank must have asked the same */
        desc_set_algo(&d, op->own_algo - 1);

    desc_sides(&d, n, me, &s, &r);
    for (uint32_t i = 0; i < s.nblocks; i++)
        memcpy(mine->pkt[par].data + i * b, op->send + i * op->send_stride, b);
    post(cp->ctl, &mine->pkt[par].d, &d);
    if ((rc = wait_posted(comm, k, 1)) != HCCL_SUCCESS || (rc = check_slots(comm, par)) != 0)
        return rc;
    for (uint32_t q = 0; q < n; q++)
        cp->l0r[q] = (l0_rank_t){.send = cp->ctl->slot[q].pkt[par].data, .send_stride = b};
    cp->l0r[me].recv = op->recv;
    cp->l0r[me].recv_stride = op->recv_stride;
    l0_op_t l0 = {.kind = op->kind,
                  .dtype = op->dtype,
                  .redop = op->redop,
                  .root = op->root,
                  .nranks = n,
                  .count = op->count,
                  .only_plus1 = me + 1,
                  .ranks = cp->l0r};
    l0_run_part(&l0, 0, 1);
    return HCCL_SUCCESS;
}

/* How this rank's buffers take part in one piece of a large operation. */
typedef struct coop_sides {
    uint64_t s_off, r_off; /* arena offsets of the piece's first blocks, where zero-copy */
    int zc_in, zc_out;
    int in_place;  /* zero-copy input overlapping the output */
    int stage_out; /* output staged in the arena so that peers can write shares */
} coop_sides_t;

/* How this rank's buffers take part in a large operation: `all` holds for every piece when the
 * whole op lies in the arena; pieces on registered pages are found piece by piece. */
typedef struct coop_plan {
    const hc_op_t *op;
    desc_side_t s, r;
    coop_sides_t all; /* offsets of the op's first blocks */
    int overlap;      /* the input and output spans overlap */
    int stream;       /* outputs too large to stay in cache: written with streaming stores */
    int stream_zc;    /* the same for zero-copy outputs that every rank writes a share of */
    uint64_t piece, npieces;
} coop_plan_t;

static int spans_overlap(const uint8_t *a, uint64_t alen, const uint8_t *b, uint64_t blen)
{
    return alen && blen && a < b + blen && b < a + alen;
}

static void coop_plan(hc_comm_t *comm, const hc_op_t *op, coop_plan_t *p)
{
    desc_t d = {.kind = op->kind, .dtype = op->dtype, .root = op->root, .count = op->count};
    uint64_t es = dtype_size(op->dtype), slen, rlen;

    memset(p, 0, sizeof(*p));
    p->op = op;
    desc_sides(&d, comm->nranks, comm->rank, &p->s, &p->r);
    if (op->kind == DESC_BROADCAST && comm->rank == op->root)
        p->r.nblocks = 0; /* the root's buffer already holds the result */
    slen = p->s.nblocks ? (p->s.nblocks - 1) * op->send_stride + p->s.bytes : 0;
    rlen = p->r.nblocks ? (p->r.nblocks - 1) * op->recv_stride + p->r.bytes : 0;
    p->all.zc_in = p->s.nblocks == 0 || hc_mem_off(comm->c, op->send, slen, &p->all.s_off);
    p->all.zc_out = p->r.nblocks == 0 || hc_mem_off(comm->c, op->recv, rlen, &p->all.r_off);
    p->overlap = spans_overlap(op->send, slen, op->recv, rlen);
    /* Streaming pays where the outputs of all ranks together outgrow the shared cache and lie
     * out of place; in place, every output line was just read, so writing it through the cache
     * costs nothing extra. */
    p->stream =
        comm->c->stream_min != 0 && rlen * comm->nranks >= comm->c->stream_min && !p->overlap;
    /* Zero-copy shares keep every rank's inputs and outputs in play at once: with real data
     * they gain from streaming only once the outputs reach COOP_ZC_STREAM_FACTOR times that
     * (below, 2 ranks at 8 MiB lost a quarter; bench/RESULTS.md). */
    p->stream_zc = p->stream && rlen * comm->nranks / COOP_ZC_STREAM_FACTOR >= comm->c->stream_min;
    p->piece = comm->chunk_bytes / (es * hc_kind_max_blocks(op->kind, comm->nranks));
    p->piece = p->piece ? p->piece : 1;
    p->npieces = (op->count + p->piece - 1) / p->piece;
}

/* Where this rank's blocks of the piece at element `first` lie. */
static void coop_piece_sides(hc_comm_t *comm, const coop_plan_t *p, uint64_t first, uint64_t n,
                             coop_sides_t *ps)
{
    const hc_op_t *op = p->op;
    uint64_t es = dtype_size(op->dtype);

    memset(ps, 0, sizeof(*ps));
    ps->zc_in = hc_piece_zc(comm, p->all.zc_in, p->all.s_off, op->send, op->send_stride,
                            p->s.nblocks, es, first, n, &ps->s_off);
    ps->zc_out = hc_piece_zc(comm, p->all.zc_out, p->all.r_off, op->recv, op->recv_stride,
                             p->r.nblocks, es, first, n, &ps->r_off);
    /* Peers may still read a zero-copy input that this rank's own output overwrites. */
    ps->in_place = ps->zc_in && p->overlap;
    /* Computing its own output costs each rank a read of every input: fine for two ranks,
     * wasteful beyond, where shares into staged outputs move less memory. */
    ps->stage_out = !ps->zc_out && comm->nranks > COOP_OWN_OUTPUT_MAX;
}

static void coop_piece_desc(hc_comm_t *comm, const coop_plan_t *p, const coop_sides_t *ps,
                            uint64_t k, uint64_t first, uint64_t n, desc_t *d)
{
    const hc_op_t *op = p->op;
    hc_coop_t *cp = comm->coop;
    uint64_t es = dtype_size(op->dtype);

    *d = (desc_t){.comm_id = comm->id,
                  .kind = op->kind,
                  .dtype = op->dtype,
                  .redop = op->redop,
                  .seq = k,
                  .count = n,
                  .root = op->root,
                  .rank = comm->rank,
                  .total = op->count};
    if (op->own_algo != 0)
        desc_set_algo(d, op->own_algo - 1);
    if (ps->zc_in) {
        d->send_off = ps->s_off;
        d->send_stride = op->send_stride;
    } else {
        d->send_off = cp->stage_off + (k & 1) * cp->stage_slot;
        d->send_stride = n * es;
        for (uint32_t b = 0; b < p->s.nblocks; b++)
            memcpy(comm->c->arena + d->send_off + b * n * es,
                   op->send + b * op->send_stride + first * es, n * es);
    }
    if (ps->zc_out) {
        d->flags |= DESC_F_ZC_OUT;
        d->recv_off = ps->r_off;
        d->recv_stride = op->recv_stride;
    } else if (ps->stage_out) {
        d->flags |= DESC_F_ZC_OUT;
        d->recv_off =
            cp->stage_off + (k & 1) * cp->stage_slot + (ps->zc_in ? 0 : p->s.nblocks * n * es);
        d->recv_stride = n * es;
    } else {
        d->recv_off = d->send_off; /* never used by peers; kept inside the arena */
        d->recv_stride = d->send_stride;
    }
    if (op->kind == DESC_BROADCAST && comm->rank == op->root) {
        d->recv_off = d->send_off;
        d->recv_stride = d->send_stride;
    }
}

/* Copies a finished result into the user's buffer, streaming if the plan says so. */
static void copy_out(const coop_plan_t *p, uint8_t *dst, const uint8_t *src, uint64_t n)
{
    const void *one[1] = {src};

    if (p->stream)
        reduce_n_stream(HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_SUM, dst, one, 1, n);
    else
        memcpy(dst, src, n);
}

static int all_zc_out(const hc_coop_t *cp, uint32_t n, unsigned par)
{
    for (uint32_t q = 0; q < n; q++)
        if (!(cp->ctl->slot[q].pkt[par].d.flags & DESC_F_ZC_OUT))
            return 0;
    return 1;
}

/* One piece of a large operation. */
static HcclResult run_piece(hc_comm_t *comm, const coop_plan_t *p, uint64_t piece)
{
    hc_coop_t *cp = comm->coop;
    uint32_t me = comm->rank, n = comm->nranks;
    coop_slot_t *mine = &cp->ctl->slot[me];
    uint64_t k = ++comm->coll_seq, first = piece * p->piece, cnt = p->op->count - first;
    unsigned par = k & 1;
    coop_sides_t ps;
    desc_t d;
    HcclResult rc;

    cnt = cnt < p->piece ? cnt : p->piece;
    coop_piece_sides(comm, p, first, cnt, &ps);
    coop_piece_desc(comm, p, &ps, k, first, cnt, &d);
    post(cp->ctl, &mine->pkt[par].d, &d);
    if ((rc = wait_posted(comm, k, piece == 0)) != HCCL_SUCCESS ||
        (rc = check_slots(comm, par)) != 0)
        return rc;
    for (uint32_t q = 0; q < n; q++) {
        const desc_t *dq = &cp->ctl->slot[q].pkt[par].d;
        cp->l0r[q] = (l0_rank_t){.send = cp->arena[q] + dq->send_off,
                                 .recv = cp->arena[q] + dq->recv_off,
                                 .send_stride = dq->send_stride,
                                 .recv_stride = dq->recv_stride};
    }
    l0_op_t l0 = {.kind = d.kind,
                  .dtype = d.dtype,
                  .redop = d.redop,
                  .root = d.root,
                  .nranks = n,
                  .count = cnt,
                  .ranks = cp->l0r};
    if (all_zc_out(cp, n, par)) {
        /* Everyone's output is reachable: each rank computes one share into all of them. A
         * staged output is read again at once, so only the final copy streams. */
        l0.stream = ps.stage_out ? 0 : p->stream_zc;
        l0_run_part(&l0, me, n);
        publish(cp->ctl, &mine->done, k);
        if ((rc = wait_all(comm, 1, k)) != HCCL_SUCCESS || !ps.stage_out)
            return rc;
        uint64_t es = dtype_size(d.dtype);
        for (uint32_t b = 0; b < p->r.nblocks; b++)
            copy_out(p, p->op->recv + b * p->op->recv_stride + first * es,
                     comm->c->arena + d.recv_off + b * cnt * es, cnt * es);
        return HCCL_SUCCESS;
    }
    /* Each rank computes its own output, wherever it is; in place, into the (unused) staging
     * slot first, copied out once no peer reads the input any more. */
    uint64_t es = dtype_size(d.dtype);
    uint8_t *scratch = comm->c->arena + cp->stage_off + (k & 1) * cp->stage_slot;
    cp->l0r[me].recv = ps.in_place ? scratch : p->op->recv + first * es;
    cp->l0r[me].recv_stride = ps.in_place ? cnt * es : p->op->recv_stride;
    l0.only_plus1 = me + 1;
    l0.stream = p->stream && !ps.in_place;
    if (p->r.nblocks > 0)
        l0_run_part(&l0, 0, 1);
    publish(cp->ctl, &mine->done, k);
    if (ps.zc_in && (rc = wait_all(comm, 1, k)) != HCCL_SUCCESS)
        return rc;
    for (uint32_t b = 0; ps.in_place && b < p->r.nblocks; b++)
        copy_out(p, p->op->recv + b * p->op->recv_stride + first * es, scratch + b * cnt * es,
                 cnt * es);
    return HCCL_SUCCESS;
}

int hc_coop_aborted(const hc_comm_t *comm)
{
    return (__atomic_load_n(&comm->coop->ctl->abort, __ATOMIC_ACQUIRE) & COOP_ABORT_BROKEN) != 0;
}

void hc_coop_abort(hc_comm_t *comm)
{
    hc_coop_t *cp = comm->coop;

    if (cp == NULL)
        return;
    __atomic_fetch_or(&cp->ctl->abort, COOP_ABORT_BROKEN, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&cp->ctl->bell, 1, __ATOMIC_SEQ_CST);
    futex_wake(&cp->ctl->bell, INT32_MAX);
}

HcclResult hc_coop_run(hc_comm_t *comm, const hc_op_t *op)
{
    hc_coop_t *cp = comm->coop;
    coop_plan_t p;
    HcclResult rc = HCCL_SUCCESS;
    uint64_t t0 = comm->rank == 0 ? now_ns() : 0;

    if (cp->broken || __atomic_load_n(&cp->ctl->abort, __ATOMIC_ACQUIRE)) {
        hc_comm_log_culprit(comm, __atomic_load_n(&cp->ctl->culprit, __ATOMIC_ACQUIRE));
        return HCCL_E_REMOTE;
    }
    if (fits_inline(comm, op)) {
        rc = run_inline(comm, op);
    } else {
        coop_plan(comm, op, &p);
        for (uint64_t piece = 0; piece < p.npieces && rc == HCCL_SUCCESS; piece++)
            rc = run_piece(comm, &p, piece);
    }
    /* After a failure the ranks' sequences no longer line up: the comm is done for. */
    if (rc == HCCL_E_REMOTE)
        hc_comm_log_culprit(comm, __atomic_load_n(&cp->ctl->culprit, __ATOMIC_ACQUIRE));
    if (rc != HCCL_SUCCESS)
        cp->broken = 1;
    else if (comm->rank == 0) { /* for the daemon's histogram (coop_ctl_t.lat4) */
        uint64_t us = (now_ns() - t0) / 1000;
        __atomic_fetch_add(&cp->ctl->lat4[shm_lat_bucket(us)], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&cp->ctl->lat_sum_us, us, __ATOMIC_RELAXED);
    }
    return rc;
}
