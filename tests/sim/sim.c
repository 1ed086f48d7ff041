/*
 * The schedule simulator (see sim.h). Execution is a fixed point over rounds: a node posts
 * every step of its current round at once; a send and a receive match in order per
 * (sender, receiver) pair, and the match completes both (a send completes only when its
 * receive is posted, which is the strictest a transport can be); a node moves to its next
 * round when every step of this one is complete. If nodes remain unfinished when nothing can
 * move, the schedules deadlock.
 * Every node's OUT carries a validity bit per element: set by the layout for the input, by
 * receives and copies; sending an invalid element or reducing into one is an error. The
 * final result is compared element by element with a reference computed directly.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "shm.h"
#include "sim.h"

#define NONE UINT32_MAX
#define POISON 0xdeadbeefcafef00dull

typedef struct chan {
    uint32_t src;        /* the sending node; NONE marks a free slot */
    uint64_t head, tail; /* unmatched steps (global ids), all on one side */
} chan_t;

/* Channels into one node, keyed by sender: small per-node tables stay in cache. */
typedef struct ctab {
    chan_t *t;
    uint32_t cap, used;
} ctab_t;

typedef struct snode {
    sched_t s;
    ctab_t in; /* channels whose receiver is this node */
    uint64_t *out;
    uint64_t *valid;     /* one bit per OUT element */
    uint64_t *know;      /* BARRIER: nodes known to have arrived, as of this round's start */
    uint64_t *know_next; /* ... including what this round's receives taught */
    uint64_t gbase;      /* global id of step 0 */
    uint32_t round;
    uint32_t pending; /* steps of the current round not yet complete */
} snode_t;

typedef struct ival {
    uint64_t a, e;
    int write; /* 0 read, 1 write, 2 reduction (RECV_REDUCE) */
    uint32_t step;
} ival_t;

typedef struct ival_buf {
    ival_t *v;
    uint32_t cap;
} ival_buf_t;

typedef struct sim {
    int algo, kind;
    uint32_t n, root;
    uint64_t count;
    /* Kinds with a block per rank, nodes of different sizes (algo_build_ranks): node i holds
     * ranks[i] ranks of `count` elements each (prefix[i]: the ranks below node i). NULL: one
     * each. */
    const uint32_t *ranks;
    uint64_t *prefix;
    snode_t *nodes;
    uint64_t nsteps;
    uint64_t *next;  /* channel queue links, per global step id */
    uint32_t *owner; /* node of each global step id */
    ival_buf_t iv;   /* reused by the conflict check of every round */
    uint32_t *work;  /* nodes whose round just completed */
    uint32_t nwork;
    uint64_t know_words;
    sim_build_fn build;
    void *build_arg;
    sim_stats_t stats;
    char *err;
    size_t errlen;
    int failed;
} sim_t;

static int fail(sim_t *sm, const char *fmt, ...)
{
    va_list ap;

    if (!sm->failed && sm->err != NULL && sm->errlen > 0) {
        int k =
            snprintf(sm->err, sm->errlen, "%s/%d n=%u root=%u count=%llu: ", algo_name(sm->algo),
                     sm->kind, sm->n, sm->root, (unsigned long long)sm->count);
        va_start(ap, fmt);
        if (k >= 0 && (size_t)k < sm->errlen)
            vsnprintf(sm->err + k, sm->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    sm->failed = 1;
    return -1;
}

/* The input data: element k of node i's input, for every layout. */
static uint64_t hval(uint32_t i, uint64_t k)
{
    uint64_t z = ((uint64_t)i << 40) ^ k ^ 0x9e3779b97f4a7c15ull;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int bit_get(const uint64_t *bm, uint64_t i)
{
    return (int)(bm[i >> 6] >> (i & 63)) & 1;
}

static void bit_set(uint64_t *bm, uint64_t i)
{
    bm[i >> 6] |= 1ull << (i & 63);
}

/* Ranks on node i, and on the nodes below i (i <= n). */
static uint64_t ranks_on(const sim_t *sm, uint32_t i)
{
    return sm->ranks != NULL ? sm->ranks[i] : 1;
}

static uint64_t ranks_below(const sim_t *sm, uint64_t i)
{
    return sm->ranks != NULL ? sm->prefix[i] : i;
}

/* Where block j starts in node i's layout (i <= n): the per-node blocks of ALLGATHER,
 * REDUCE_SCATTER and SCATTER's IN, or, for ALLTOALL, node i's blocks to and from node j. */
static uint64_t blk_off(const sim_t *sm, uint32_t i, uint64_t j)
{
    uint64_t scale = sm->kind == DESC_ALLTOALL ? ranks_on(sm, i) : 1;

    return scale * ranks_below(sm, j) * sm->count;
}

/* The node whose block of node i's layout holds idx (< the layout's size). */
static uint32_t blk_owner(const sim_t *sm, uint32_t i, uint64_t idx)
{
    uint32_t lo = 0, hi = sm->n;

    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (blk_off(sm, i, mid) <= idx)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static uint64_t in_elems(const sim_t *sm, uint32_t node)
{
    if (sm->kind == DESC_ALLTOALL || (sm->kind == DESC_SCATTER && node == sm->root))
        return blk_off(sm, node, sm->n);
    return 0;
}

/* The OUT node i's result occupies (before any staging). */
static uint64_t layout_elems(const sim_t *sm, uint32_t i)
{
    switch (sm->kind) {
    case DESC_ALLGATHER:
    case DESC_REDUCE_SCATTER:
    case DESC_ALLTOALL: return blk_off(sm, i, sm->n);
    case DESC_SCATTER: return ranks_on(sm, i) * sm->count;
    case DESC_BARRIER: return 0;
    default: return sm->count;
    }
}

static const char *op_name(uint8_t op)
{
    switch (op) {
    case STEP_SEND: return "send";
    case STEP_RECV: return "recv";
    case STEP_RECV_REDUCE: return "recv-reduce";
    case STEP_COPY: return "copy";
    case STEP_REDUCE: return "reduce";
    default: return "bad-op";
    }
}

static int range_ok(uint64_t off, uint64_t len, uint64_t size)
{
    return len <= size && off <= size - len;
}

/* ---- Static checks of one node's schedule ---- */

static int is_local(const step_t *st)
{
    return st->op == STEP_COPY || st->op == STEP_REDUCE;
}

static int check_step(sim_t *sm, uint32_t i, uint32_t r, const step_t *st)
{
    const snode_t *nd = &sm->nodes[i];
    uint64_t insz = in_elems(sm, i);

    if (st->op < STEP_SEND || st->op > STEP_REDUCE || st->buf > SCHED_BUF_IN)
        return fail(sm, "node %u round %u: bad op %u or buf %u", i, r, st->op, st->buf);
    if (is_local(st) ? st->peer != i : (st->peer >= sm->n || st->peer == i))
        return fail(sm, "node %u round %u: %s with bad peer %u", i, r, op_name(st->op), st->peer);
    if (sm->kind == DESC_BARRIER && st->len != 0)
        return fail(sm, "node %u round %u: barrier step of length %llu", i, r,
                    (unsigned long long)st->len);
    if ((st->op == STEP_RECV || st->op == STEP_RECV_REDUCE) && st->buf != SCHED_BUF_OUT)
        return fail(sm, "node %u round %u: receive into IN", i, r);
    if (st->op != STEP_SEND && !range_ok(st->off, st->len, nd->s.out_elems))
        return fail(sm, "node %u round %u: %s writes OUT[%llu,+%llu) beyond %llu", i, r,
                    op_name(st->op), (unsigned long long)st->off, (unsigned long long)st->len,
                    (unsigned long long)nd->s.out_elems);
    uint64_t src = is_local(st) ? st->src_off : st->off;
    if (st->op == STEP_SEND || is_local(st)) {
        uint64_t size = st->buf == SCHED_BUF_IN ? insz : nd->s.out_elems;
        if (!range_ok(src, st->len, size))
            return fail(sm, "node %u round %u: %s reads %s[%llu,+%llu) beyond %llu", i, r,
                        op_name(st->op), st->buf ? "IN" : "OUT", (unsigned long long)src,
                        (unsigned long long)st->len, (unsigned long long)size);
    }
    return 0;
}

static int check_sched(sim_t *sm, uint32_t i)
{
    const sched_t *s = &sm->nodes[i].s;
    uint64_t scratch = 0;

    if (s->round_start == NULL || s->round_start[0] != 0 || s->round_start[s->nrounds] != s->nsteps)
        return fail(sm, "node %u: round_start does not cover the steps", i);
    if (s->out_elems < layout_elems(sm, i))
        return fail(sm, "node %u: out_elems %llu below the layout's %llu", i,
                    (unsigned long long)s->out_elems, (unsigned long long)layout_elems(sm, i));
    for (uint32_t r = 0; r < s->nrounds; r++) {
        uint64_t red = 0;
        if (s->round_start[r] > s->round_start[r + 1])
            return fail(sm, "node %u: round %u starts after it ends", i, r);
        for (uint32_t k = s->round_start[r]; k < s->round_start[r + 1]; k++) {
            if (check_step(sm, i, r, &s->steps[k]) != 0)
                return -1;
            if (s->steps[k].op == STEP_RECV_REDUCE)
                red += s->steps[k].len;
        }
        scratch = red > scratch ? red : scratch;
    }
    if (s->scratch_elems < scratch)
        return fail(sm, "node %u: scratch_elems %llu below the %llu a round reduces", i,
                    (unsigned long long)s->scratch_elems, (unsigned long long)scratch);
    return 0;
}

/* ---- Conflicts within a round: no write may overlap another write or a read of OUT ----
 * Reductions (RECV_REDUCE) are the exception among themselves: the executor applies them
 * after all of the round's transfers, one after another in step order, so several may
 * reduce into the same range (a fullmesh reduce-scatter does). */

static int ival_cmp(const void *pa, const void *pb)
{
    const ival_t *x = pa, *y = pb;

    return x->a < y->a ? -1 : x->a > y->a;
}

static uint32_t round_ivals(const step_t *st, uint32_t nst, ival_t *iv)
{
    uint32_t m = 0;

    for (uint32_t k = 0; k < nst; k++) {
        if (st[k].len == 0)
            continue;
        if (st[k].op != STEP_SEND)
            iv[m++] =
                (ival_t){st[k].off, st[k].off + st[k].len, st[k].op == STEP_RECV_REDUCE ? 2 : 1, k};
        if ((st[k].op == STEP_SEND || is_local(&st[k])) && st[k].buf == SCHED_BUF_OUT) {
            uint64_t a = is_local(&st[k]) ? st[k].src_off : st[k].off;
            iv[m++] = (ival_t){a, a + st[k].len, 0, k};
        }
    }
    return m;
}

static int check_conflicts(sim_t *sm, uint32_t i, uint32_t r)
{
    const sched_t *s = &sm->nodes[i].s;
    uint32_t nst = s->round_start[r + 1] - s->round_start[r], m;
    uint64_t rend = 0, wend = 0, xend = 0; /* ends of reads, writes, reductions so far */
    ival_t *iv;
    int rc = 0;

    if (2 * nst + 1 > sm->iv.cap) {
        free(sm->iv.v);
        sm->iv.cap = 2 * nst + 1;
        sm->iv.v = malloc((size_t)sm->iv.cap * sizeof(ival_t));
        if (sm->iv.v == NULL)
            return fail(sm, "out of memory");
    }
    iv = sm->iv.v;
    m = round_ivals(&s->steps[s->round_start[r]], nst, iv);
    qsort(iv, m, sizeof(*iv), ival_cmp);
    for (uint32_t k = 0; k < m && rc == 0; k++) {
        uint64_t a = iv[k].a, *end = iv[k].write == 0 ? &rend : iv[k].write == 1 ? &wend : &xend;
        int clash = a < wend || (iv[k].write != 2 && a < xend) || (iv[k].write && a < rend);
        if (clash)
            rc = fail(sm, "node %u round %u: step %u %s OUT[%llu,%llu) overlaps a write", i, r,
                      iv[k].step, iv[k].write ? "writes" : "reads", (unsigned long long)iv[k].a,
                      (unsigned long long)iv[k].e);
        *end = iv[k].e > *end ? iv[k].e : *end;
    }
    return rc;
}

/* ---- Data ---- */

static uint64_t src_val(sim_t *sm, uint32_t i, uint8_t buf, uint64_t idx, int *ok)
{
    snode_t *nd = &sm->nodes[i];

    if (buf == SCHED_BUF_IN)
        return hval(i, idx);
    if (!bit_get(nd->valid, idx))
        *ok = 0;
    return nd->out[idx];
}

static int put_val(sim_t *sm, uint32_t i, uint8_t op, uint64_t idx, uint64_t v)
{
    snode_t *nd = &sm->nodes[i];

    if (op == STEP_RECV_REDUCE) {
        if (!bit_get(nd->valid, idx))
            return fail(sm, "node %u reduces into uninitialised OUT[%llu]", i,
                        (unsigned long long)idx);
        nd->out[idx] += v;
    } else {
        nd->out[idx] = v;
        bit_set(nd->valid, idx);
    }
    return 0;
}

static int move_data(sim_t *sm, uint32_t si, const step_t *ss, uint32_t di, const step_t *ds)
{
    uint64_t src = is_local(ss) ? ss->src_off : ss->off;
    uint8_t op = ds->op == STEP_COPY     ? STEP_RECV
                 : ds->op == STEP_REDUCE ? STEP_RECV_REDUCE
                                         : ds->op;

    for (uint64_t k = 0; k < ss->len; k++) {
        int ok = 1;
        uint64_t v = src_val(sm, si, ss->buf, src + k, &ok);

        if (!ok)
            return fail(sm, "node %u %s to %u reads uninitialised OUT[%llu]", si, op_name(ss->op),
                        ds == ss ? si : di, (unsigned long long)(src + k));
        if (put_val(sm, di, op, ds->off + k, v) != 0)
            return -1;
    }
    return 0;
}

/* ---- Channels: per (src, dst), a FIFO of unmatched steps, all sends or all receives ---- */

static uint32_t mix(uint32_t x)
{
    return x * 0x9e3779b1u;
}

/* Grows the table to at least `want` slots (a power of two). */
static int ctab_grow(sim_t *sm, ctab_t *ct, uint64_t want)
{
    uint32_t cap = ct->cap ? ct->cap * 2 : 8, mask;
    chan_t *nt;

    while (cap < want)
        cap *= 2;
    mask = cap - 1;
    nt = malloc((size_t)cap * sizeof(*nt));
    if (nt == NULL)
        return fail(sm, "out of memory");
    for (uint32_t k = 0; k < cap; k++)
        nt[k].src = NONE;
    for (uint32_t k = 0; k < ct->cap; k++) {
        uint32_t h;
        if (ct->t[k].src == NONE)
            continue;
        for (h = mix(ct->t[k].src) & mask; nt[h].src != NONE; h = (h + 1) & mask)
            ;
        nt[h] = ct->t[k];
    }
    free(ct->t);
    ct->t = nt;
    ct->cap = cap;
    return 0;
}

static chan_t *chan_get(sim_t *sm, uint32_t src, uint32_t dst)
{
    ctab_t *ct = &sm->nodes[dst].in;
    uint32_t mask, h;

    if (2 * (ct->used + 1) > ct->cap && ctab_grow(sm, ct, 0) != 0)
        return NULL;
    mask = ct->cap - 1;
    for (h = mix(src) & mask; ct->t[h].src != NONE; h = (h + 1) & mask)
        if (ct->t[h].src == src)
            return &ct->t[h];
    ct->t[h] = (chan_t){.src = src, .head = NONE, .tail = NONE};
    ct->used++;
    return &ct->t[h];
}

static const step_t *gstep(const sim_t *sm, uint64_t gid)
{
    const snode_t *nd = &sm->nodes[sm->owner[gid]];

    return &nd->s.steps[gid - nd->gbase];
}

static void complete(sim_t *sm, uint32_t i)
{
    if (--sm->nodes[i].pending == 0)
        sm->work[sm->nwork++] = i;
}

static void learn(sim_t *sm, uint32_t from, uint32_t to)
{
    uint64_t *dst = sm->nodes[to].know_next, *src = sm->nodes[from].know;

    for (uint64_t w = 0; w < sm->know_words; w++)
        dst[w] |= src[w];
}

static int match(sim_t *sm, uint64_t sgid, uint64_t rgid)
{
    uint32_t si = sm->owner[sgid], ri = sm->owner[rgid];
    const step_t *ss = gstep(sm, sgid), *rs = gstep(sm, rgid);

    if (ss->len != rs->len)
        return fail(sm, "node %u sends %llu elements to %u, which receives %llu", si,
                    (unsigned long long)ss->len, ri, (unsigned long long)rs->len);
    if (move_data(sm, si, ss, ri, rs) != 0)
        return -1;
    if (sm->kind == DESC_BARRIER)
        learn(sm, si, ri);
    sm->stats.transfers++;
    complete(sm, si);
    complete(sm, ri);
    return 0;
}

/* Posts a transfer: matches the oldest unmatched opposite step of the pair, or queues. */
static int post(sim_t *sm, uint32_t i, uint64_t gid)
{
    const step_t *st = gstep(sm, gid);
    int is_send = st->op == STEP_SEND;
    chan_t *ch = is_send ? chan_get(sm, i, st->peer) : chan_get(sm, st->peer, i);
    uint64_t other;

    if (ch == NULL)
        return -1;
    if (ch->head != NONE && (gstep(sm, ch->head)->op == STEP_SEND) != is_send) {
        other = ch->head;
        ch->head = sm->next[other];
        if (ch->head == NONE)
            ch->tail = NONE;
        return is_send ? match(sm, gid, other) : match(sm, other, gid);
    }
    sm->next[gid] = NONE;
    if (ch->tail == NONE)
        ch->head = gid;
    else
        sm->next[ch->tail] = gid;
    ch->tail = gid;
    return 0;
}

static int enter_round(sim_t *sm, uint32_t i)
{
    snode_t *nd = &sm->nodes[i];
    uint32_t r = nd->round;

    if (r >= nd->s.nrounds)
        return 0;
    if (check_conflicts(sm, i, r) != 0)
        return -1;
    nd->pending = nd->s.round_start[r + 1] - nd->s.round_start[r] + 1;
    for (uint32_t k = nd->s.round_start[r]; k < nd->s.round_start[r + 1]; k++) {
        const step_t *st = &nd->s.steps[k];
        if (is_local(st)) {
            if (move_data(sm, i, st, i, st) != 0)
                return -1;
            complete(sm, i);
        } else if (post(sm, i, nd->gbase + k) != 0) {
            return -1;
        }
    }
    complete(sm, i); /* the extra count keeps the node off the work list while posting */
    return 0;
}

static int advance(sim_t *sm, uint32_t i)
{
    snode_t *nd = &sm->nodes[i];

    if (sm->kind == DESC_BARRIER)
        memcpy(nd->know, nd->know_next, sm->know_words * sizeof(uint64_t));
    nd->round++;
    return enter_round(sm, i);
}

static int run(sim_t *sm)
{
    for (uint32_t i = 0; i < sm->n; i++)
        if (enter_round(sm, i) != 0)
            return -1;
    while (sm->nwork > 0)
        if (advance(sm, sm->work[--sm->nwork]) != 0)
            return -1;
    for (uint32_t i = 0; i < sm->n; i++) {
        const snode_t *nd = &sm->nodes[i];
        if (nd->round < nd->s.nrounds) {
            const step_t *st = &nd->s.steps[nd->s.round_start[nd->round]];
            return fail(sm,
                        "deadlock: node %u stuck in round %u of %u (%u steps pending; "
                        "first step: %s peer %u)",
                        i, nd->round, nd->s.nrounds, nd->pending, op_name(st->op), st->peer);
        }
    }
    return 0;
}

/* ---- Setup ---- */

static void set_input(snode_t *nd, uint64_t off, uint64_t len, uint32_t who, uint64_t k0)
{
    for (uint64_t k = 0; k < len; k++) {
        nd->out[off + k] = hval(who, k0 + k);
        bit_set(nd->valid, off + k);
    }
}

static void layout(sim_t *sm, uint32_t i)
{
    snode_t *nd = &sm->nodes[i];
    uint64_t cnt = sm->count;

    switch (sm->kind) {
    case DESC_ALLREDUCE:
    case DESC_REDUCE: set_input(nd, 0, cnt, i, 0); break;
    case DESC_BROADCAST:
        if (i == sm->root)
            set_input(nd, 0, cnt, i, 0);
        break;
    case DESC_ALLGATHER:
        set_input(nd, blk_off(sm, i, i), blk_off(sm, i, i + 1) - blk_off(sm, i, i), i, 0);
        break;
    case DESC_REDUCE_SCATTER: set_input(nd, 0, blk_off(sm, i, sm->n), i, 0); break;
    default: break;
    }
}

static int alloc_node(sim_t *sm, uint32_t i)
{
    snode_t *nd = &sm->nodes[i];
    uint64_t e = nd->s.out_elems;

    nd->out = malloc((size_t)(e ? e : 1) * sizeof(uint64_t));
    nd->valid = calloc((size_t)(e / 64 + 1), sizeof(uint64_t));
    if (nd->out == NULL || nd->valid == NULL)
        return fail(sm, "out of memory for %llu elements", (unsigned long long)e);
    for (uint64_t k = 0; k < e; k++)
        nd->out[k] = POISON;
    if (sm->kind == DESC_BARRIER) {
        nd->know = calloc(sm->know_words, sizeof(uint64_t));
        nd->know_next = calloc(sm->know_words, sizeof(uint64_t));
        if (nd->know == NULL || nd->know_next == NULL)
            return fail(sm, "out of memory");
        bit_set(nd->know, i);
        bit_set(nd->know_next, i);
    }
    layout(sm, i);
    return 0;
}

/* Sizes each node's channel table for the senders its receives name, so that tables do not
 * grow while the run posts steps. */
static int presize_channels(sim_t *sm)
{
    for (uint32_t i = 0; i < sm->n; i++) {
        ctab_t *ct = &sm->nodes[i].in;
        uint64_t recvs = 0;
        for (uint32_t k = 0; k < sm->nodes[i].s.nsteps; k++)
            recvs += sm->nodes[i].s.steps[k].op == STEP_RECV ||
                     sm->nodes[i].s.steps[k].op == STEP_RECV_REDUCE;
        if (recvs > sm->n)
            recvs = sm->n;
        if (ctab_grow(sm, ct, 2 * recvs + 2) != 0)
            return -1;
    }
    return 0;
}

static int build_all(sim_t *sm)
{
    for (uint32_t i = 0; i < sm->n; i++) {
        snode_t *nd = &sm->nodes[i];
        int rc = sm->build(sm->build_arg, i, &nd->s);
        if (rc != 0)
            return fail(sm, "algo_build for node %u returned %d", i, rc);
        nd->gbase = sm->nsteps;
        sm->nsteps += nd->s.nsteps;
        if (nd->s.nrounds > sm->stats.max_rounds)
            sm->stats.max_rounds = nd->s.nrounds;
        if (check_sched(sm, i) != 0 || alloc_node(sm, i) != 0)
            return -1;
    }
    sm->stats.steps = sm->nsteps;
    sm->next = malloc((size_t)(sm->nsteps + 1) * sizeof(*sm->next));
    sm->owner = malloc((size_t)(sm->nsteps + 1) * sizeof(*sm->owner));
    if (sm->next == NULL || sm->owner == NULL)
        return fail(sm, "out of memory");
    for (uint32_t i = 0; i < sm->n; i++)
        for (uint64_t k = 0; k < sm->nodes[i].s.nsteps; k++)
            sm->owner[sm->nodes[i].gbase + k] = i;
    return presize_channels(sm);
}

/* ---- The reference ---- */

static uint64_t sum_over_nodes(const sim_t *sm, uint64_t idx)
{
    uint64_t s = 0;

    for (uint32_t i = 0; i < sm->n; i++)
        s += hval(i, idx);
    return s;
}

/* What node i's OUT[idx] must hold at the end, or 0 in *want when it need not hold anything. */
static uint64_t expect(const sim_t *sm, const uint64_t *sums, uint32_t i, uint64_t idx, int *want)
{
    uint64_t cnt = sm->count;

    *want = 1;
    switch (sm->kind) {
    case DESC_ALLREDUCE: return idx < cnt ? sums[idx] : (*want = 0);
    case DESC_REDUCE: return i == sm->root && idx < cnt ? sums[idx] : (*want = 0);
    case DESC_BROADCAST: return idx < cnt ? hval(sm->root, idx) : (*want = 0);
    case DESC_ALLGATHER:
    case DESC_ALLTOALL: {
        if (idx >= blk_off(sm, i, sm->n))
            return *want = 0;
        /* From node j: its own block (ALLGATHER), or what it sent i (ALLTOALL). */
        uint32_t j = blk_owner(sm, i, idx);
        uint64_t k = idx - blk_off(sm, i, j);
        return hval(j, sm->kind == DESC_ALLGATHER ? k : blk_off(sm, j, i) + k);
    }
    case DESC_REDUCE_SCATTER:
        return idx >= blk_off(sm, i, i) && idx < blk_off(sm, i, i + 1) ? sum_over_nodes(sm, idx)
                                                                       : (*want = 0);
    case DESC_SCATTER:
        return idx < ranks_on(sm, i) * cnt ? hval(sm->root, blk_off(sm, i, i) + idx) : (*want = 0);
    default: return *want = 0;
    }
}

static int check_node_result(sim_t *sm, const uint64_t *sums, uint32_t i)
{
    const snode_t *nd = &sm->nodes[i];
    uint64_t lim = layout_elems(sm, i);

    for (uint64_t idx = 0; idx < lim; idx++) {
        int want;
        uint64_t v = expect(sm, sums, i, idx, &want);
        if (!want)
            continue;
        if (!bit_get(nd->valid, idx))
            return fail(sm, "node %u: result OUT[%llu] never written", i, (unsigned long long)idx);
        if (nd->out[idx] != v)
            return fail(sm, "node %u: OUT[%llu] = %016llx, expected %016llx", i,
                        (unsigned long long)idx, (unsigned long long)nd->out[idx],
                        (unsigned long long)v);
    }
    return 0;
}

static int check_barrier(sim_t *sm)
{
    for (uint32_t i = 0; i < sm->n; i++)
        for (uint32_t j = 0; j < sm->n; j++)
            if (!bit_get(sm->nodes[i].know_next, j))
                return fail(sm, "barrier: node %u may leave before node %u arrived", i, j);
    return 0;
}

static int check_results(sim_t *sm)
{
    uint64_t *sums = NULL;
    int rc = 0;

    if (sm->kind == DESC_BARRIER)
        return check_barrier(sm);
    if (sm->kind == DESC_ALLREDUCE || sm->kind == DESC_REDUCE) {
        sums = malloc((size_t)(sm->count + 1) * sizeof(*sums));
        if (sums == NULL)
            return fail(sm, "out of memory");
        for (uint64_t k = 0; k < sm->count; k++)
            sums[k] = sum_over_nodes(sm, k);
    }
    for (uint32_t i = 0; i < sm->n && rc == 0; i++)
        rc = check_node_result(sm, sums, i);
    free(sums);
    return rc;
}

static void sim_free(sim_t *sm)
{
    for (uint32_t i = 0; sm->nodes != NULL && i < sm->n; i++) {
        sched_free(&sm->nodes[i].s);
        free(sm->nodes[i].out);
        free(sm->nodes[i].valid);
        free(sm->nodes[i].know);
        free(sm->nodes[i].know_next);
        free(sm->nodes[i].in.t);
    }
    free(sm->nodes);
    free(sm->next);
    free(sm->owner);
    free(sm->iv.v);
    free(sm->work);
}

static int run_all(sim_t *sm, sim_stats_t *stats)
{
    int rc = -1;

    if (sm->err != NULL && sm->errlen > 0)
        sm->err[0] = '\0';
    if (sm->n == 0)
        return fail(sm, "no nodes");
    sm->know_words = (sm->n + 63) / 64;
    sm->nodes = calloc(sm->n, sizeof(*sm->nodes));
    /* A node is on the work list at most once at a time. */
    sm->work = malloc((size_t)sm->n * sizeof(*sm->work));
    if (sm->nodes == NULL || sm->work == NULL)
        fail(sm, "out of memory");
    else if (build_all(sm) == 0 && run(sm) == 0 && check_results(sm) == 0)
        rc = 0;
    if (stats != NULL)
        *stats = sm->stats;
    sim_free(sm);
    return rc;
}

typedef struct algo_args {
    int algo, kind;
    uint32_t n, root;
    uint64_t count;
} algo_args_t;

static int build_algo(void *arg, uint32_t me, sched_t *out)
{
    const algo_args_t *a = arg;

    return algo_build(a->algo, a->kind, a->n, me, a->root, a->count, out);
}

int sim_run_stats(int algo, int kind, uint32_t nnodes, uint32_t root, uint64_t count,
                  sim_stats_t *stats, char *err, size_t errlen)
{
    algo_args_t a = {algo, kind, nnodes, root, count};
    sim_t sm = {.algo = algo,
                .kind = kind,
                .n = nnodes,
                .root = root,
                .count = count,
                .build = build_algo,
                .build_arg = &a,
                .err = err,
                .errlen = errlen};

    return run_all(&sm, stats);
}

int sim_run(int algo, int kind, uint32_t nnodes, uint32_t root, uint64_t count, char *err,
            size_t errlen)
{
    return sim_run_stats(algo, kind, nnodes, root, count, NULL, err, errlen);
}

typedef struct ranks_args {
    int algo, kind;
    uint32_t n, root;
    uint64_t unit;
    const uint32_t *ranks;
} ranks_args_t;

static int build_ranks(void *arg, uint32_t me, sched_t *out)
{
    const ranks_args_t *a = arg;

    return algo_build_ranks(a->algo, a->kind, a->n, me, a->root, a->unit, a->ranks, out);
}

int sim_run_ranks(int algo, int kind, uint32_t nnodes, uint32_t root, uint64_t unit,
                  const uint32_t *ranks, char *err, size_t errlen)
{
    ranks_args_t a = {algo, kind, nnodes, root, unit, ranks};
    sim_t sm = {.algo = algo,
                .kind = kind,
                .n = nnodes,
                .root = root,
                .count = unit,
                .ranks = ranks,
                .build = build_ranks,
                .build_arg = &a,
                .err = err,
                .errlen = errlen};
    int rc;

    if ((sm.prefix = malloc((nnodes + 1ull) * sizeof(*sm.prefix))) == NULL)
        return fail(&sm, "out of memory");
    sm.prefix[0] = 0;
    for (uint32_t i = 0; i < nnodes; i++)
        sm.prefix[i + 1] = sm.prefix[i] + ranks[i];
    rc = run_all(&sm, NULL);
    free(sm.prefix);
    return rc;
}

int sim_run_fn(int kind, uint32_t nnodes, uint32_t root, uint64_t count, sim_build_fn build,
               void *arg, char *err, size_t errlen)
{
    sim_t sm = {.algo = -1,
                .kind = kind,
                .n = nnodes,
                .root = root,
                .count = count,
                .build = build,
                .build_arg = arg,
                .err = err,
                .errlen = errlen};

    return run_all(&sm, NULL);
}

/* Elements a schedule holds and moves: its OUT and the lengths of all its steps. */
static uint64_t sched_volume(const sched_t *s)
{
    uint64_t v = s->out_elems;

    for (uint32_t k = 0; k < s->nsteps; k++)
        v += s->steps[k].len;
    return v;
}

int sim_estimate(int algo, int kind, uint32_t nnodes, uint32_t root, uint64_t count,
                 uint64_t *steps, uint64_t *elems)
{
    uint32_t probe[4] = {0, root < nnodes ? root : 0, nnodes / 2, nnodes ? nnodes - 1 : 0};
    uint64_t ts = 0, tv = 0;

    for (int k = 0; k < 4; k++) {
        sched_t s;
        if (nnodes == 0 || algo_build(algo, kind, nnodes, probe[k], root, count, &s) != 0)
            return -1;
        ts += s.nsteps;
        tv += sched_volume(&s);
        sched_free(&s);
    }
    *steps = ts / 4 * nnodes;
    *elems = tv / 4 * nnodes;
    return 0;
}
