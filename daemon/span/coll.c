/*
 * Collectives across daemons. The engine gathers the node's share from its local ranks into a
 * node buffer (level 0), runs the level-1 schedule between daemons over the transport, and
 * writes each local rank's result (level 0). Per-rank blocks go by position (place.h): a
 * node's blocks are contiguous and each byte crosses the network once per node, not once per
 * rank, wherever the ranks sit; node blocks have their own sizes (algo_build_ranks). The engine
 * starts a collective once every local rank posted it (span_coll_start); its end is an event.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desc_check.h"
#include "dtype.h"
#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "reduce.h"
#include "span/span_int.h"
#include "span/tag.h"
#include "span/xfer_result.h"
#include "text.h"

/* Elements of one node block for the level-1 op of piece d, as if every node held as many
 * ranks as the fullest (exact with equal nodes): what the cost model and buffers go by. */
static uint64_t node_count(const span_comm_t *mu, int kind, uint64_t count)
{
    uint64_t L = mu->pl.L;

    switch (kind) {
    case DESC_ALLGATHER:
    case DESC_REDUCE_SCATTER:
    case DESC_SCATTER: return L * count;
    case DESC_ALLTOALL: return L * L * count;
    case DESC_BARRIER: return 0;
    default: return count;
    }
}

static const uint8_t *send_block(const span_comm_t *sc, uint32_t l, uint64_t b)
{
    return (const uint8_t *)sc->ranks[l].send + b * sc->ranks[l].send_stride;
}

static uint8_t *recv_block(const span_comm_t *sc, uint32_t l, uint64_t b)
{
    return (uint8_t *)sc->ranks[l].recv + b * sc->ranks[l].recv_stride;
}

/* dst = reduction over local ranks of their send block b (count elements). */
static void reduce_locals(const span_comm_t *sc, const desc_t *d, uint8_t *dst, uint64_t b)
{
    const void *src[64];
    uint32_t k = 0;

    while (k < sc->nlocal) {
        uint32_t m = 0;
        if (k > 0)
            src[m++] = dst;
        while (m < 64 && k < sc->nlocal)
            src[m++] = send_block(sc, k++, b);
        reduce_n(d->dtype, d->redop, dst, src, m, d->count);
    }
}

/* Level 0 in: lay out the node's data as algo.h says (algo_build_ranks), per-rank blocks by
 * position (place.h). */
static void gather_in(span_comm_t *mu, const desc_t *d)
{
    const span_place_t *pl = &mu->pl;
    uint32_t me = mu->me, k = mu->nlocal;
    uint64_t b = d->count * dtype_size(d->dtype);

    switch (d->kind) {
    case DESC_ALLREDUCE:
    case DESC_REDUCE: reduce_locals(mu, d, mu->work, 0); break;
    case DESC_BROADCAST:
        if (pl->node[d->root] == me)
            memmove(mu->work, send_block(mu, span_local(mu, d->root), 0), b);
        break;
    case DESC_ALLGATHER:
        for (uint32_t l = 0; l < mu->nlocal; l++)
            memmove(mu->work + ((uint64_t)pl->first[me] + l) * b, send_block(mu, l, 0), b);
        break;
    case DESC_REDUCE_SCATTER:
        for (uint32_t q = 0; q < pl->nranks; q++)
            reduce_locals(mu, d, mu->work + (uint64_t)q * b, pl->pos_rank[q]);
        break;
    case DESC_ALLTOALL:
        /* IN block j (for node j) holds, for each rank of j (position q), what each of our
         * k local ranks l sends it, at q * k + l. */
        for (uint64_t q = 0; q < pl->nranks; q++)
            for (uint32_t l = 0; l < k; l++)
                memcpy(mu->in + (q * k + l) * b, send_block(mu, l, pl->pos_rank[q]), b);
        break;
    case DESC_SCATTER:
        for (uint64_t q = 0; pl->node[d->root] == me && q < pl->nranks; q++)
            memcpy(mu->in + q * b, send_block(mu, span_local(mu, d->root), pl->pos_rank[q]), b);
        break;
    default: break;
    }
}

/* Level 0 out: every local rank's result from the node buffer. */
static void scatter_out(span_comm_t *mu, const desc_t *d)
{
    const span_place_t *pl = &mu->pl;
    uint64_t b = d->count * dtype_size(d->dtype), k = mu->nlocal;

    /* With a direct OUT, local rank 0 already holds its result (see direct_out()). A rank
     * that left while the op ran wants nothing. */
    for (uint32_t l = mu->work != mu->out; l < mu->nlocal; l++) {
        uint32_t g = mu->global_of[l];
        if (mu->gone[l])
            continue;
        switch (d->kind) {
        case DESC_ALLREDUCE:
        case DESC_BROADCAST: memmove(recv_block(mu, l, 0), mu->work, b); break;
        case DESC_REDUCE:
            if (g == d->root)
                memmove(recv_block(mu, l, 0), mu->work, b);
            break;
        case DESC_ALLGATHER:
            for (uint32_t q = 0; q < pl->nranks; q++)
                memmove(recv_block(mu, l, q), mu->work + (uint64_t)pl->pos[q] * b, b);
            break;
        case DESC_REDUCE_SCATTER:
            memmove(recv_block(mu, l, 0), mu->work + (uint64_t)pl->pos[g] * b, b);
            break;
        case DESC_ALLTOALL:
            /* From node i's rank at position q, its li-th: OUT block i (k * first[i] on) holds
             * what i's ranks sent our local rank l at l * count[i] + li. */
            for (uint32_t q = 0; q < pl->nranks; q++) {
                uint32_t i = pl->node[pl->pos_rank[q]];
                uint64_t at = k * pl->first[i] + (uint64_t)l * pl->count[i] + (q - pl->first[i]);
                memcpy(recv_block(mu, l, pl->pos_rank[q]), mu->work + at * b, b);
            }
            break;
        case DESC_SCATTER: memmove(recv_block(mu, l, 0), mu->work + (uint64_t)l * b, b); break;
        default: break;
        }
    }
}

static int buf_reserve(uint8_t **buf, uint64_t *cap, uint64_t bytes);

/* Where gather_in() leaves the node's share of piece d: in IN (1) or OUT, at *off, *len bytes. */
static int node_input(const span_comm_t *mu, const desc_t *d, uint64_t *off, uint64_t *len)
{
    const span_place_t *pl = &mu->pl;
    uint64_t b = d->count * dtype_size(d->dtype);
    int root_here = desc_is_rooted(d->kind) && pl->node[d->root] == mu->me;

    *off = 0;
    switch (d->kind) {
    case DESC_ALLREDUCE:
    case DESC_REDUCE: *len = b; return 0;
    case DESC_BROADCAST: *len = root_here ? b : 0; return 0;
    case DESC_ALLGATHER:
        *off = (uint64_t)pl->first[mu->me] * b;
        *len = (uint64_t)mu->nlocal * b;
        return 0;
    case DESC_REDUCE_SCATTER: *len = (uint64_t)pl->nranks * b; return 0;
    case DESC_ALLTOALL: *len = (uint64_t)pl->nranks * mu->nlocal * b; return 1;
    case DESC_SCATTER: *len = root_here ? (uint64_t)pl->nranks * b : 0; return 1;
    default: *len = 0; return 0;
    }
}

/* Keeps the level-1 input of piece d, read from src where level 1 reads it in place (rerun.c):
 * -ENOMEM if it cannot, and then the piece could not run again. */
static int snap_save(span_comm_t *mu, const desc_t *d, const uint8_t *src)
{
    uint64_t off, len;
    int in_in = node_input(mu, d, &off, &len);

    if (mu->snap_cur == NULL && (mu->snap_cur = calloc(1, sizeof(*mu->snap_cur))) == NULL)
        return -ENOMEM;
    if (mu->snap_done == NULL && (mu->snap_done = calloc(1, sizeof(*mu->snap_done))) == NULL)
        return -ENOMEM;
    span_snap_t *s = mu->snap_cur;
    s->valid = 0;
    if (buf_reserve(&s->buf, &s->cap, len + 1) != 0)
        return -ENOMEM;
    memcpy(s->buf, src != NULL ? src : (in_in ? mu->in : mu->work) + off, len);
    s->d = *d;
    s->in_in = in_in;
    s->off = off;
    s->len = len;
    s->valid = 1;
    return 0;
}

void span_snaps_free(span_comm_t *mu)
{
    for (int i = 0; i < 2; i++) {
        span_snap_t *s = i ? mu->snap_done : mu->snap_cur;
        if (s != NULL)
            free(s->buf);
        free(s);
    }
    mu->snap_cur = mu->snap_done = NULL;
}

/* The settings' choice, else the cost model's, cached per kind and power-of-two size. The
 * figures come from the links measured at init (probe.c), the same on every node; under
 * HCCL_DETERMINISTIC from algo_cost_fixed(), the same in every run. */
static const struct algo_pick *pick_algo(span_comm_t *mu, int kind, uint64_t bytes)
{
    unsigned bucket = bytes ? 64 - (unsigned)__builtin_clzll(bytes) : 0;
    struct algo_pick *p = &mu->picks[kind][bucket];
    uint64_t size = bytes ? 1ull << (bucket - 1) : 0;

    if (p->algo >= 0)
        return p;
    const link_cost_t fixed = algo_cost_fixed(), *lc = mu->deterministic ? &fixed : &mu->lc;
    double costs[ALGO_COUNT];
    int best = algo_select_costs(kind, mu->nnodes, size, lc, costs);

    for (int a = 0; a < ALGO_COUNT; a++)
        p->cost_us[a] = (float)costs[a];
    p->algo = (int8_t)(mu->forced[kind] >= 0 ? mu->forced[kind] : best >= 0 ? best : ALGO_RING);
    p->src = (uint8_t)(mu->forced[kind] >= 0 ? mu->forced_src[kind] : mu->deterministic);
    return p;
}

/* "ring 725 us, H-D_R 801 us, ..." for the log. */
static void costs_text(const struct algo_pick *p, char *buf, size_t cap)
{
    size_t n = 0;

    buf[0] = '\0';
    for (int a = 0; a < ALGO_COUNT; a++)
        if (p->cost_us[a] >= 0)
            text_add(buf, cap, &n, "%s%s %.0f us", n ? ", " : "", algo_name(a), p->cost_us[a]);
}

/* Node buffers live as long as the comm: pieces of one size come back again and again, and
 * pages stay touched. */
static int buf_reserve(uint8_t **buf, uint64_t *cap, uint64_t bytes)
{
    uint8_t *p;

    if (bytes <= *cap)
        return 0;
    if ((p = realloc(*buf, bytes)) == NULL)
        return -ENOMEM;
    *buf = p;
    *cap = bytes;
    return 0;
}

/* The kinds with a block per rank: node blocks of their own sizes where nodes hold different
 * numbers of ranks (algo_build_ranks). */
static int per_rank(int kind)
{
    return kind == DESC_ALLGATHER || kind == DESC_REDUCE_SCATTER || kind == DESC_SCATTER ||
           kind == DESC_ALLTOALL;
}

/*
 * Level 1 works straight in local rank 0's receive range when that range is the layout of
 * algo.h (one block, or the blocks of every rank back to back) and the schedule stages
 * nothing beyond it: level 0 then copies one way less, and not at all for a single in-place
 * rank. Returns NULL when the node buffer must be used.
 */
static uint8_t *direct_out(span_comm_t *mu, const desc_t *d, uint64_t cnt)
{
    switch (d->kind) {
    case DESC_ALLREDUCE:
    case DESC_BROADCAST: return mu->sched.out_elems == cnt ? recv_block(mu, 0, 0) : NULL;
    case DESC_ALLGATHER:
        return mu->sched.out_elems == (uint64_t)mu->pl.nranks * d->count && mu->pl.in_order &&
                       mu->ranks[0].recv_stride == d->count * dtype_size(d->dtype)
                   ? recv_block(mu, 0, 0)
                   : NULL;
    default: return NULL;
    }
}

/* The input level 1 may read where local rank 0 left it instead of a copy in OUT, or NULL:
 * when sched_prepare() found the schedule fit for it, and it overwrites all of the input's
 * range (REDUCE on a node other than the root wants no result there). */
static const uint8_t *direct_in(const span_comm_t *mu, const desc_t *d, uint64_t bytes)
{
    const uint8_t *src;

    if (mu->fresh_rc != 0)
        return NULL;
    if (!mu->fresh_all && (d->kind != DESC_REDUCE || mu->pl.node[d->root] == mu->me))
        return NULL;
    src = send_block(mu, 0, 0);
    if (src != mu->work && src < mu->work + bytes && mu->work < src + bytes)
        return NULL; /* overlapping in part: reads would see the schedule's writes */
    return src;
}

/* Builds the schedule for key unless it is the one kept from the last op. With one rank on
 * this node, an allreduce's or reduce's input is one block at OUT[0]: which of the schedule's
 * reads may take it where the rank left it is worked out here, once per schedule. */
static int sched_prepare(span_comm_t *mu, const sched_key_t *key)
{
    int rc;

    if (mu->sched.steps != NULL && memcmp(key, &mu->sched_key, sizeof(*key)) == 0)
        return 0;
    sched_free(&mu->sched);
    memset(&mu->sched, 0, sizeof(mu->sched));
    free(mu->fresh);
    mu->fresh = NULL;
    uint64_t cnt = node_count(mu, key->kind, key->count);
    if (per_rank(key->kind) && !mu->pl.equal)
        rc = algo_build_ranks(key->algo, key->kind, mu->nnodes, mu->me, key->root, key->count,
                              mu->pl.count, &mu->sched);
    else
        rc = algo_build(key->algo, key->kind, mu->nnodes, mu->me, key->root, cnt, &mu->sched);
    if (rc != 0)
        return rc;
    mu->sched_key = *key;
    mu->fresh_rc = -EINVAL;
    if (mu->pl.count[mu->me] != 1 || (key->kind != DESC_ALLREDUCE && key->kind != DESC_REDUCE))
        return 0;
    mu->fresh = malloc((size_t)mu->sched.nsteps + 1);
    mu->fresh_rc =
        mu->fresh == NULL ? -ENOMEM : sched_fresh_reads(&mu->sched, cnt, mu->fresh, &mu->fresh_all);
    return 0;
}

/* The op check (l1_args_t.check): what every node must agree on for piece d, its level-1
 * algorithm included (nodes whose HCCL_ALGO, HCCL_ALGORITHM or HCCL_DETERMINISTIC differ would
 * run schedules that do not fit together: they fail as a mismatch instead of waiting on each
 * other). Fields a kind does not use stay 0, whatever the ranks left in them. */
static void op_check_fill(const desc_t *d, int algo, uint64_t out[4])
{
    out[0] = 0x48434f50ull << 32 | (uint64_t)(uint8_t)(algo + 1) << 24 | (uint64_t)d->kind << 16 |
             (uint64_t)(d->kind == DESC_BARRIER ? 0 : d->dtype) << 8 |
             (desc_is_reduction(d->kind) ? d->redop : 0);
    out[1] = desc_is_rooted(d->kind) ? d->root : 0;
    out[2] = d->count;
    out[3] = d->seq;
}

/* The op's part of its data tags (tag.h): 1..255, from everything but the sequence. */
static uint8_t op_check_digest(const uint64_t c[4])
{
    uint64_t h = (c[0] ^ c[1] * 0x9e3779b97f4a7c15ull ^ c[2] * 0xc2b2ae3d27d4eb4full) *
                 0x165667b19e3779f9ull;

    return (uint8_t)(1 + (h >> 32) % 255);
}

/* "allreduce of 4096 x fp32 (sum)", "broadcast of 10 x int8 from rank 3" for the log. */
static void op_check_text(const uint64_t c[4], char *buf, size_t cap)
{
    int kind = (int)(c[0] >> 16 & 0xff), dt = (int)(c[0] >> 8 & 0xff), op = (int)(c[0] & 0xff);
    size_t n = 0;

    text_add(buf, cap, &n, "%s of %llu x %s", desc_kind_name((uint8_t)kind),
             (unsigned long long)c[2], dtype_name(dt));
    if (desc_is_reduction((uint8_t)kind))
        text_add(buf, cap, &n, " (%s)", redop_name(op));
    if (desc_is_rooted((uint8_t)kind))
        text_add(buf, cap, &n, " rooted at rank %llu", (unsigned long long)c[1]);
    if ((c[0] >> 24 & 0xff) != 0)
        text_add(buf, cap, &n, " by %s", algo_name((int)(c[0] >> 24 & 0xff) - 1));
}

/* QoS: may this comm's next round put `bytes` on the wire now? Counts the time it may not. */
static int admit_round(void *ctx, uint64_t bytes)
{
    span_comm_t *mu = ctx;
    uint64_t now = now_ns();
    int ok = mu->qos_class < 0 || mu->qos.admit(mu->qos.ctx, mu->qos_class, bytes, now);

    if (!ok && mu->qos_since_ns == 0)
        mu->qos_since_ns = now;
    else if (ok && mu->qos_since_ns != 0) {
        mu->qos_wait_ns += now - mu->qos_since_ns;
        mu->qos_since_ns = 0;
    }
    return ok;
}

/* Between two pieces of one op, its class counts as busy for at most this long: a rank that
 * stalls mid-op lets lower classes on the wire again. */
#define MULTI_MORE_NS 2000000ull

/* Starts the level-1 part of the collective every local rank posted. */
/* How often a collective in flight looks at its connections' failures (MaxCnt). */
#define RETRY_LOOK_NS 1000000ull

/* MaxCnt: each connection's resumes so far, where the collective that starts counts from. */
static void retry_mark(span_comm_t *mu)
{
    if (!mu->retry.enabled || mu->retry_max_cnt == 0)
        return;
    if (mu->op_resumes == NULL &&
        (mu->op_resumes = calloc(mu->nnodes, sizeof(*mu->op_resumes))) == NULL)
        return;
    for (uint32_t i = 0; i < mu->nnodes; i++) {
        tp_retry_stats_t st = {0};
        if (mu->conns[i] != NULL)
            tp_retry_stats(mu->conns[i], &st);
        mu->op_resumes[i] = st.resumes;
    }
    mu->retry_look_ns = now_ns() + RETRY_LOOK_NS; /* an op shorter than that is not looked at */
}

/* The node whose connection failed more than MaxCnt times during the collective in flight
 * (each failure counts once it happened, resumed or not), and how often; UINT32_MAX: none. */
static uint32_t retry_spent(span_comm_t *mu, uint32_t *times)
{
    uint64_t now;

    if (mu->op_resumes == NULL || mu->retry_max_cnt == 0 || (now = now_ns()) < mu->retry_look_ns)
        return UINT32_MAX;
    mu->retry_look_ns = now + RETRY_LOOK_NS;
    for (uint32_t i = 0; i < mu->nnodes; i++) {
        tp_retry_stats_t st = {0};
        if (mu->conns[i] == NULL)
            continue;
        tp_retry_stats(mu->conns[i], &st);
        *times = st.resumes - mu->op_resumes[i] + (st.suspended != 0);
        if (*times > mu->retry_max_cnt)
            return i;
    }
    return UINT32_MAX;
}

/* Starts level 1 of piece d: from the ranks' buffers, or from the snapshot `from` (a piece that
 * runs again, rerun.c), straight in the node buffers then. */
static int coll_start(span_comm_t *mu, const desc_t *d, const span_snap_t *from)
{
    uint64_t cnt = node_count(mu, d->kind, d->count), es = dtype_size(d->dtype);
    const struct algo_pick *pick = pick_algo(mu, d->kind, cnt * es);
    struct algo_pick own;
    int algo = pick->algo, rc;

    /* The op's own algorithm (desc_check made sure it serves the op) before the comm's. */
    if (desc_algo(d) >= 0) {
        own = *pick;
        own.algo = (int8_t)desc_algo(d);
        own.src = ALGO_SRC_CALL;
        pick = &own;
        algo = own.algo;
    }

    /* Pieces of one op, and ops of one size, come again and again: keep the last schedule. */
    sched_key_t key = {.algo = algo,
                       .kind = d->kind,
                       .root = desc_is_rooted(d->kind) ? mu->pl.node[d->root] : 0,
                       .count = d->count};
    if ((rc = sched_prepare(mu, &key)) != 0)
        return rc;
    if (buf_reserve(&mu->out, &mu->out_cap, (mu->sched.out_elems + 1) * es) != 0 ||
        buf_reserve(&mu->in, &mu->in_cap, ((uint64_t)mu->nnodes * cnt + 1) * es) != 0 ||
        buf_reserve(&mu->scratch, &mu->scratch_cap, (mu->sched.scratch_elems + 1) * es) != 0)
        return -ENOMEM;
    mu->t0_ns = now_ns();
    mu->work = from != NULL ? NULL : direct_out(mu, d, cnt);
    if (mu->work == NULL)
        mu->work = mu->out;
    const uint8_t *src = from != NULL ? NULL : direct_in(mu, d, cnt * es);
    if (from != NULL)
        memcpy((from->in_in ? mu->in : mu->out) + from->off, from->buf, from->len);
    else if (src == NULL)
        gather_in(mu, d);
    if (from == NULL && mu->crash_safe && (rc = snap_save(mu, d, src)) != 0)
        return rc;
    mu->t_l1_ns = now_ns();
    mu->qos_since_ns = mu->qos_wait_ns = 0;
    op_check_fill(d, algo, mu->check);
    mu->prof = (span_prof_t){
        .t_start = mu->t0_ns, .l0_ns = mu->t_l1_ns - mu->t0_ns, .algo = algo, .src = pick->src};
    l1_args_t a = {.sched = &mu->sched,
                   .conns = mu->conns,
                   .me = mu->me,
                   .nnodes = mu->nnodes,
                   .out = mu->work,
                   .in = mu->in,
                   .scratch = mu->scratch,
                   .src = src,
                   .fresh = src != NULL ? mu->fresh : NULL,
                   .dtype = d->dtype,
                   .redop = d->redop,
                   .tag = tag_coll(mu->tag, d->seq, op_check_digest(mu->check)),
                   .admit = admit_round,
                   .admit_ctx = mu,
                   .check = mu->check,
                   .check_in = mu->check_in,
                   .check_len = sizeof(mu->check),
                   .check_tag = tag_coll(mu->tag, d->seq, 0)};
    if ((rc = l1_start(&a, &mu->run)) != 0)
        return rc;
    if (from == NULL || from != mu->snap_done) { /* not a run for the other node only */
        mu->d0 = *d;
        mu->busy = 1;
    }
    mu->started++; /* a run for the other node counts: it runs the piece too (drain.c) */
    retry_mark(mu);
    if (log_level_cur >= LOG_INFO || mu->log_ops) {
        char why[256];
        costs_text(pick, why, sizeof(why));
        log_msg(LOG_INFO, "COLL", "comm %u seq %llu: %s, %llu B per node, %u nodes: %s (%s%s: %s)",
                mu->id, (unsigned long long)d->seq, desc_kind_name(d->kind),
                (unsigned long long)(cnt * es), mu->nnodes, algo_name(algo),
                pick->src == ALGO_SRC_MODEL ? "predicted"
                : pick->src == ALGO_SRC_DETERMINISTIC || pick->src == ALGO_SRC_RETRY
                    ? "predicted on fixed link figures, "
                    : "forced by ",
                pick->src == ALGO_SRC_MODEL ? "" : algo_src_name(pick->src), why);
    }
    return 0;
}

void span_coll_end(span_comm_t *mu)
{
    l1_free(mu->run);
    mu->run = NULL;
    mu->busy = 0;
    mu->held = 0;
}

void span_coll_hold(span_comm_t *mu)
{
    if (!mu->busy || mu->run == NULL)
        return;
    l1_free(mu->run);
    mu->run = NULL;
    mu->held = 2;
}

int span_coll_shadow(span_comm_t *mu)
{
    int rc;

    if (mu->run != NULL || mu->snap_done == NULL || !mu->snap_done->valid)
        return -EINVAL;
    if ((rc = coll_start(mu, &mu->snap_done->d, mu->snap_done)) != 0)
        return rc;
    mu->shadow = 1;
    return 0;
}

int span_coll_start(span_comm_t *mu, const desc_t *d, const l0_rank_t *ranks)
{
    int rc;

    memcpy(mu->ranks, ranks, mu->nlocal * sizeof(*ranks));
    /* A node back from a restart has not said where it is yet (rerun.c), or the nodes left
     * have not opened their connections again (drain.c, BACK): the piece waits. */
    if (span_rerun_waits(mu) || span_drain_back_holds(mu) || mu->run != NULL) {
        mu->d0 = *d;
        mu->busy = 1;
        mu->held = 1;
        return 0;
    }
    span_rerun_announce(mu, d->seq);
    if (span_rerun_check(mu, d->seq) != 0) {
        mu->d0 = *d; /* fails with the comm */
        mu->busy = 1;
        mu->held = 1;
        return 0;
    }
    if ((rc = coll_start(mu, d, NULL)) != 0) {
        ERR("COLL", "comm %u: starting a collective between daemons failed (%d)", mu->id, rc);
        span_coll_end(mu);
    }
    return rc;
}

/* The op ended with status; the comm breaks too (with brk) if why is set. */
static int coll_done(span_comm_t *mu, HcclResult status, HcclResult brk, const char *why)
{
    span_ev_t *ev = span_ev_push(mu, SPAN_EV_COLL_DONE);

    ev->status = status;
    ev->prof = mu->prof;
    memset(&mu->prof, 0, sizeof(mu->prof));
    if (why != NULL)
        span_break(mu, brk, "%s", why);
    return 1;
}

/* Runs the collective in flight. */
/* The end of a piece run again for the other node only (span_coll_shadow). */
static int shadow_done(span_comm_t *mu, int rc)
{
    l1_free(mu->run);
    mu->run = NULL;
    mu->shadow = 0;
    if (rc == 1) {
        INFO("COLL", "comm %u: piece %llu ran again for the node back from a crash", mu->id,
             (unsigned long long)mu->snap_done->d.seq);
        return 1;
    }
    return span_break(mu, HCCL_E_REMOTE,
                      "piece %llu, run again for the node back from a crash, failed (%d)",
                      (unsigned long long)mu->snap_done->d.seq, rc);
}

/* A piece that waited (span_coll_start, span_coll_hold) starts once it may. */
static int held_start(span_comm_t *mu)
{
    int again = mu->held == 2, rc;

    if (!mu->busy || !mu->held || span_rerun_waits(mu) || span_drain_back_holds(mu))
        return 0;
    mu->held = 0;
    if (again && (mu->snap_cur == NULL || !mu->snap_cur->valid))
        return span_break(mu, HCCL_E_REMOTE, "piece %llu cannot run again: its input is gone",
                          (unsigned long long)mu->d0.seq);
    if ((rc = coll_start(mu, &mu->d0, again ? mu->snap_cur : NULL)) != 0) {
        ERR("COLL", "comm %u: starting a collective between daemons failed (%d)", mu->id, rc);
        span_coll_end(mu);
        return coll_done(mu, HCCL_E_INTERNAL, HCCL_E_REMOTE, "a piece could not start again");
    }
    if (again)
        INFO("COLL", "comm %u: piece %llu runs again from its start", mu->id,
             (unsigned long long)mu->d0.seq);
    return 1;
}

int span_coll_progress(span_comm_t *mu)
{
    int rc;

    if (mu->run == NULL)
        return held_start(mu);
    rc = l1_progress(mu->run);
    if (mu->shadow)
        return rc == 0 ? 0 : shadow_done(mu, rc);
    if (rc == 0) {
        uint32_t times, node = retry_spent(mu, &times);
        if (node == UINT32_MAX)
            return 0;
        ERR("COLL",
            "comm %u piece %llu: its data connection to node %u (%s) failed %u times during "
            "the op, more than op retry allows (MaxCnt %u): the op fails",
            mu->id, (unsigned long long)mu->d0.seq, node, mu->node_addrs[node].tcp, times,
            mu->retry_max_cnt);
        span_coll_end(mu);
        return coll_done(mu, HCCL_E_OPRETRY_FAIL, HCCL_E_OPRETRY_FAIL,
                         "a data connection failed more often than op retry allows (MaxCnt)");
    }
    uint64_t t_end = now_ns();
    mu->prof.l1_ns = t_end - mu->t_l1_ns;
    mu->prof.qos_wait_ns = mu->qos_wait_ns;
    mu->more_until_ns = rc == 1 && (mu->d0.flags & DESC_F_MORE) ? t_end + MULTI_MORE_NS : 0;
    if (rc == 1) {
        uint64_t tx, rx, es = dtype_size(mu->d0.dtype);
        sched_traffic(&mu->sched, &tx, &rx);
        mu->prof.tx_bytes = tx * es;
        mu->prof.rx_bytes = rx * es;
        scatter_out(mu, &mu->d0);
        mu->prof.l0_ns += now_ns() - t_end;
        mu->done_seq = mu->d0.seq;
        mu->done_any = 1;
        if (mu->crash_safe && mu->snap_cur != NULL) { /* kept until the next one is done */
            span_snap_t *t = mu->snap_done;
            mu->snap_done = mu->snap_cur;
            mu->snap_cur = t;
        }
    }
    /* -EPROTO: a message of another length than the schedule says, which the same op on
     * every node never sends: the nodes run different ops (the check may not be in yet). */
    if (rc == -EBADE || rc == -EPROTO) {
        char mine[96], theirs[96];
        uint32_t prev = (mu->me + mu->nnodes - 1) % mu->nnodes;
        op_check_text(mu->check, mine, sizeof(mine));
        op_check_text(mu->check_in, theirs, sizeof(theirs));
        if (rc == -EBADE)
            ERR("COLL",
                "comm %u piece %llu: node %u (%s) runs %s where this node runs %s: ranks posted "
                "different collectives",
                mu->id, (unsigned long long)mu->d0.seq, prev, mu->node_addrs[prev].tcp, theirs,
                mine);
        else
            ERR("COLL",
                "comm %u piece %llu: a message of another length than %s needs came in: ranks "
                "posted different collectives",
                mu->id, (unsigned long long)mu->d0.seq, mine);
        /* The run stays until the comm goes (span_ops_t.free): a send of it partly on the
         * wire, withdrawn now, would fail its connection, and with it the notice that tells
         * the nodes that did not see the mismatch; left alone, it finishes and the notice
         * follows. */
        return coll_done(mu, HCCL_E_PARA, HCCL_E_PARA, "nodes posted different collectives");
    }
    /* A peer that went away may have said why first: its notice, heard now, comes first
     * (e.g. HCCL_E_PARA for ranks that posted different collectives); the engine then fails
     * the op's descriptors with the comm and ignores the op's end. */
    if (rc < 0 && tp_peer_gone(rc))
        span_abort_listen_now(mu);
    HcclResult status = rc == 1 ? HCCL_SUCCESS : xfer_result(l1_failed_transport(mu->run), rc);
    span_coll_end(mu);
    return coll_done(mu, status, HCCL_E_REMOTE,
                     rc < 0 ? "a transfer between daemons failed" : NULL);
}
