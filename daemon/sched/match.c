/* Communicators in the engine: queues per rank, matching of peers' descriptors, execution. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desc_check.h"
#include "dtype.h"
#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "sched/engine_int.h"

static int dq_push(dq_t *q, const desc_t *d, uint64_t t_in)
{
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 16;
        desc_t *v = malloc(cap * sizeof(*v));
        uint64_t *t = malloc(cap * sizeof(*t));
        if (v == NULL || t == NULL) {
            free(v);
            free(t);
            return -1;
        }
        for (uint32_t i = 0; i < q->n; i++) {
            v[i] = q->v[(q->head + i) % q->cap];
            t[i] = q->t_in[(q->head + i) % q->cap];
        }
        free(q->v);
        free(q->t_in);
        q->v = v;
        q->t_in = t;
        q->head = 0;
        q->cap = cap;
    }
    q->v[(q->head + q->n) % q->cap] = *d;
    q->t_in[(q->head + q->n) % q->cap] = t_in;
    q->n++;
    return 0;
}

int dq_push_front(dq_t *q, const desc_t *d, uint64_t t_in)
{
    if (dq_push(q, d, t_in) != 0) /* the room */
        return -1;
    q->n--;
    q->head = (q->head + q->cap - 1) % q->cap;
    q->v[q->head] = *d;
    q->t_in[q->head] = t_in;
    q->n++;
    return 0;
}

desc_t *dq_at(dq_t *q, uint32_t i)
{
    return &q->v[(q->head + i) % q->cap];
}

uint64_t dq_t_in(const dq_t *q, uint32_t i)
{
    return q->t_in[(q->head + i) % q->cap];
}

void dq_remove(dq_t *q, uint32_t i)
{
    if (i == 0) {
        q->head = (q->head + 1) % q->cap;
        q->n--;
        return;
    }
    for (uint32_t k = i; k + 1 < q->n; k++) {
        *dq_at(q, k) = *dq_at(q, k + 1);
        q->t_in[(q->head + k) % q->cap] = q->t_in[(q->head + k + 1) % q->cap];
    }
    q->n--;
}

eng_comm_t *eng_comm_find(engine_t *eng, uint32_t id)
{
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

void eng_comm_unmake(engine_t *eng, uint32_t id)
{
    pthread_mutex_lock(&eng->lock);
    for (eng_comm_t **pp = &eng->comms; *pp != NULL; pp = &(*pp)->next) {
        eng_comm_t *c = *pp;
        if (c->id == id) {
            *pp = c->next;
            eng_comm_free(c);
            break;
        }
    }
    pthread_mutex_unlock(&eng->lock);
}

void eng_comm_free(eng_comm_t *c)
{
    if (c == NULL)
        return;
    for (uint32_t r = 0; c->m != NULL && r < c->nranks; r++) {
        free(c->m[r].coll.v);
        free(c->m[r].coll.t_in);
        free(c->m[r].p2p.v);
        free(c->m[r].p2p.t_in);
    }
    if (c->span != NULL)
        c->sops->free(c->span);
    free(c->m);
    free(c->p2p_done);
    free(c->l0r);
    free(c->global_of);
    free(c->local_of);
    free(c);
}

int eng_comm_set_ranks(eng_comm_t *c, uint32_t nglobal, const uint32_t *global)
{
    uint32_t *g = malloc(c->nranks * sizeof(*g)), *l = malloc(nglobal * sizeof(*l));

    if (g == NULL || l == NULL) {
        free(g);
        free(l);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < nglobal; i++)
        l[i] = UINT32_MAX;
    for (uint32_t i = 0; i < c->nranks; i++) {
        g[i] = global != NULL ? global[i] : i;
        l[g[i]] = i;
    }
    free(c->global_of);
    free(c->local_of);
    c->global_of = g;
    c->local_of = l;
    c->nglobal = nglobal;
    return 0;
}

/* Completes a descriptor of comm c with a failure, naming the rank at fault if known. */
static void fail_desc(engine_t *eng, const eng_comm_t *c, eng_session_t *s, uint64_t tag,
                      HcclResult status)
{
    cqe_t e = {.tag = tag, .status = status, .algo = -1};

    if (status == HCCL_E_REMOTE && c->culprit != UINT32_MAX)
        e.culprit = c->culprit + 1;
    if (s != NULL)
        eng_session_post(eng, s, &e);
}

/* Fails the entries of q from index `from` on. */
static unsigned fail_queue_from(engine_t *eng, const eng_comm_t *c, eng_member_t *m, dq_t *q,
                                uint32_t from, HcclResult status)
{
    unsigned n = 0;

    while (q->n > from) {
        fail_desc(eng, c, m->s, dq_at(q, from)->tag, status);
        dq_remove(q, from);
        n++;
    }
    return n;
}

static unsigned fail_queue(engine_t *eng, const eng_comm_t *c, eng_member_t *m, dq_t *q,
                           HcclResult status)
{
    return fail_queue_from(eng, c, m, q, 0, status);
}

void eng_comm_break(engine_t *eng, eng_comm_t *c, const char *why)
{
    eng_comm_break_status(eng, c, HCCL_E_REMOTE, why);
}

void eng_comm_break_status(engine_t *eng, eng_comm_t *c, HcclResult status, const char *why)
{
    unsigned n = 0;

    for (uint32_t r = 0; r < c->nranks; r++) {
        n += fail_queue(eng, c, &c->m[r], &c->m[r].coll, status);
        n += fail_queue(eng, c, &c->m[r], &c->m[r].p2p, status);
    }
    if (c->span != NULL) {
        n += c->sops->p2p_cancel(c->span, status);
        if (!c->broken)
            c->sops->notify(c->span, c->culprit,
                            status == HCCL_E_PARA ? SPAN_NOTICE_MISMATCH : SPAN_NOTICE_BROKE, 0);
    }
    /* A clean HcclCommDestroy leaves nothing queued and is no news. */
    if (!c->broken && n > 0)
        WARN("COLL", "comm %u: %s; %u queued operations fail with %s", c->id, why, n,
             status == HCCL_E_TIMEOUT ? "HCCL_E_TIMEOUT"
             : status == HCCL_E_PARA  ? "HCCL_E_PARA"
                                      : "HCCL_E_REMOTE");
    else if (!c->broken)
        INFO("COLL", "comm %u: %s", c->id, why);
    /* Ops posted later fail the same way: a rank that posts its part of a mismatched
     * collective after the mismatch was found learns it as the others did. */
    if (!c->broken) {
        c->broken_status = status;
        snprintf(c->why, sizeof(c->why), "%s", why);
    }
    c->broken = 1;
    /* The withdrawn transfers complete now, after the break: what follows sees it. */
    eng_span_drain(eng, c);
}

/* Fails the queued p2p operations of rank r whose peer is `peer` (or all if peer < 0). */
static unsigned fail_p2p_with(engine_t *eng, const eng_comm_t *c, eng_member_t *m, uint32_t peer,
                              HcclResult status)
{
    unsigned n = 0;

    for (uint32_t i = 0; i < m->p2p.n;) {
        desc_t *d = dq_at(&m->p2p, i);
        if (d->root != peer) {
            i++;
            continue;
        }
        fail_desc(eng, c, m->s, d->tag, status);
        dq_remove(&m->p2p, i);
        n++;
    }
    return n;
}

/* Index of the first collective in q from sequence `limit` on (q is in sequence order). */
static uint32_t coll_index_from(dq_t *q, uint64_t limit)
{
    uint32_t i = 0;

    while (i < q->n && dq_at(q, i)->seq < limit)
        i++;
    return i;
}

void eng_comm_rank_left(engine_t *eng, eng_comm_t *c, uint32_t rank, uint64_t limit)
{
    unsigned n = 0;
    int local = eng_comm_local(c, rank) != UINT32_MAX;
    int busy = c->span != NULL && c->sops->busy(c->span);
    /* The op running between daemons may work straight in the leaver's buffer (span/coll.c,
     * direct_out()), which may be unmapped soon. */
    int in_use = local && c->span != NULL && c->sops->rank_left(c->span, eng_comm_local(c, rank));

    if (c->culprit == UINT32_MAX)
        c->culprit = rank;

    /* Collectives need every rank: those the leaver took no part in cannot complete. Here
     * that is every one not yet started; one already running between daemons has every
     * rank's input and the other nodes in it: it runs to its end and completes for the ranks
     * still here (its descriptors stay queued until then). Another node's leaver may have
     * finished pieces this node has yet to run (a broadcast's root is done first): those go
     * on. Transfers between the ranks that stay go on; those with the leaver fail. */
    if (local)
        limit = c->next_seq + (uint64_t)busy;
    /* Then, or when it needs a node whose rank left before taking part, the comm stops at
     * once, and with it every request on its connections. */
    if (busy && (in_use || (!local && c->next_seq >= limit))) {
        c->culprit = rank;
        eng_comm_break(eng, c,
                       local ? "local rank 0 left while an op between daemons used its buffer"
                             : "a rank of another node left before this op");
        return;
    }
    if (limit < c->coll_limit)
        c->coll_limit = limit;
    for (uint32_t r = 0; r < c->nranks; r++) {
        dq_t *q = &c->m[r].coll;
        n += fail_queue_from(eng, c, &c->m[r], q, coll_index_from(q, c->coll_limit), HCCL_E_REMOTE);
        /* A rank of another node may have sent before it left: its data is on the wire. */
        if (local)
            n += fail_p2p_with(eng, c, &c->m[r], rank, HCCL_E_REMOTE);
    }
    /* The other nodes hear of it only when ranks here were left waiting: then theirs wait
     * too. A comm that ends cleanly (every op done) sends nothing: a notice unread by a node
     * that already closed its side would make its kernel reset the connection. */
    if (c->span != NULL && local && n > 0)
        c->sops->notify(c->span, rank, SPAN_NOTICE_LEFT, limit);
    if (n > 0)
        WARN("COLL",
             "comm %u: rank %u left with %u operations of others waiting for it; they "
             "fail with HCCL_E_REMOTE",
             c->id, rank, n);
}

/* A piece a rank posts again after a daemon restart (engine_resume_t) that some rank's
 * completion proves the old daemon wrote for every rank: completed at once. 1 if it was. */
static int resumed_done(engine_t *eng, eng_comm_t *c, eng_session_t *s, const desc_t *d,
                        uint32_t local)
{
    uint64_t done;

    if (desc_is_collective(d->kind)) {
        done = c->done_below;
    } else if (c->p2p_done != NULL && d->root < c->nranks) {
        uint32_t from = d->kind == DESC_SEND ? local : d->root;
        uint32_t to = d->kind == DESC_SEND ? d->root : local;
        done = c->p2p_done[(size_t)from * c->nranks + to];
    } else {
        return 0;
    }
    if (d->seq >= done)
        return 0;
    eng_session_complete(eng, s, d->tag, HCCL_SUCCESS);
    return 1;
}

/* Whether the collective piece every rank posted (d0 is rank 0's) may have begun under the
 * daemon before a restart and overwrites some rank's input: it cannot run again. (A transfer
 * never writes where it reads: it always runs again.) */
static int resumed_unsafe(const eng_comm_t *c, const desc_t *d0)
{
    if (d0->seq < c->done_below || d0->seq >= c->maybe_started)
        return 0;
    for (uint32_t r = 0; r < c->nranks; r++)
        if (dq_at(&c->m[r].coll, 0)->flags & DESC_F_OVERWRITES)
            return 1;
    return 0;
}

void eng_comm_route(engine_t *eng, eng_session_t *s, const desc_t *d)
{
    eng_comm_t *c = eng_comm_find(eng, d->comm_id);
    const char *why = NULL;
    int rc;

    uint32_t local = c != NULL ? eng_comm_local(c, d->rank) : UINT32_MAX;

    if (c == NULL || local == UINT32_MAX || c->m[local].s != s) {
        WARN("IPC", "client %llu: descriptor for comm %u rank %u it is not a member of",
             (unsigned long long)s->sid, d->comm_id, d->rank);
        eng_session_complete(eng, s, d->tag, HCCL_E_PARA);
        eng->st.descs_rejected++;
        return;
    }
    if (c->broken) {
        fail_desc(eng, c, s, d->tag, c->broken_status);
        return;
    }
    if ((desc_is_collective(d->kind) && d->seq >= c->coll_limit) ||
        (!desc_is_collective(d->kind) && eng_comm_local(c, d->root) != UINT32_MAX &&
         c->m[eng_comm_local(c, d->root)].s == NULL)) {
        fail_desc(eng, c, s, d->tag, HCCL_E_REMOTE);
        return;
    }
    rc = desc_check(d, c->nglobal, d->rank, s->l.arena_bytes, &why);
    if (rc != HCCL_SUCCESS) {
        WARN("IPC", "client %llu comm %u rank %u: rejected %s descriptor: %s",
             (unsigned long long)s->sid, c->id, d->rank, desc_kind_name(d->kind), why);
        eng_session_complete(eng, s, d->tag, rc);
        eng->st.descs_rejected++;
        return;
    }
    if (resumed_done(eng, c, s, d, local))
        return;
    eng_member_t *m = &c->m[local];
    if (dq_push(desc_is_collective(d->kind) ? &m->coll : &m->p2p, d, now_ns()) != 0) {
        ERR("COLL", "comm %u: out of memory queueing a descriptor", c->id);
        eng_session_complete(eng, s, d->tag, HCCL_E_MEMORY);
    }
}

static uint8_t *arena_at(eng_member_t *m, uint64_t off)
{
    return m->s->arena + off;
}

static void run_op(engine_t *eng, eng_comm_t *c, const desc_t *d, uint32_t nranks)
{
    l0_op_t op = {.kind = d->kind,
                  .dtype = d->dtype,
                  .redop = d->redop,
                  .root = d->root,
                  .nranks = nranks,
                  .count = d->count,
                  .ranks = c->l0r};

    exec_run(eng->exec, &op);
}

/* Whether rank r's head descriptor agrees with rank 0's; logs the first difference when say
 * (once per mismatch: it is looked at again until MISMATCH_GRACE_NS has passed). */
static int coll_agrees(eng_comm_t *c, const desc_t *a, const desc_t *b, uint32_t r, int say)
{
    const char *what = desc_disagree(a, b);

    if (what == NULL)
        return 1;
    if (!say)
        return 0;
    if (strcmp(what, "algorithm") == 0) {
        ERR("COLL",
            "comm %u seq %llu: ranks disagree on the algorithm: rank 0 asked for %s, rank %u for "
            "%s",
            c->id, (unsigned long long)a->seq, desc_algo_named(a), r, desc_algo_named(b));
        return 0;
    }
    ERR("COLL",
        "comm %u seq %llu: ranks disagree on the %s: rank 0 posted %s(count %llu of %llu, %s, "
        "root %u), rank %u posted %s(count %llu of %llu, %s, root %u)",
        c->id, (unsigned long long)a->seq, what, desc_kind_name(a->kind),
        (unsigned long long)a->count, (unsigned long long)a->total, dtype_name(a->dtype), a->root,
        r, desc_kind_name(b->kind), (unsigned long long)b->count, (unsigned long long)b->total,
        dtype_name(b->dtype), b->root);
    return 0;
}

/* Completes every rank's head descriptor with the comm's op profile, which it then clears. */
static void coll_complete_all(engine_t *eng, eng_comm_t *c, HcclResult status)
{
    for (uint32_t r = 0; r < c->nranks; r++) {
        eng_member_t *m = &c->m[r];
        cqe_t e = {.tag = dq_at(&m->coll, 0)->tag, .status = status};
        prof_cqe(&e, &c->prof, dq_t_in(&m->coll, 0));
        /* A rank that left while the op ran between daemons gets nothing. */
        if (m->s != NULL)
            eng_session_post(eng, m->s, &e);
        dq_remove(&m->coll, 0);
    }
    memset(&c->prof, 0, sizeof(c->prof));
    c->next_seq++;
}

/* How long ranks whose next collectives disagree wait for a death that explains it (eng_comm_t.
 * mismatch_ns) before they fail with HCCL_E_PARA. */
#define MISMATCH_GRACE_NS 200000000ull

/* The head descriptor of rank 0 when every local rank posted the next collective and they
 * agree; otherwise NULL, after failing what cannot go on (then *acted_p is set). */
static desc_t *coll_head(engine_t *eng, eng_comm_t *c, int *acted_p)
{
    desc_t *d0;

    *acted_p = 0;
    for (uint32_t r = 0; r < c->nranks; r++) {
        eng_member_t *m = &c->m[r];
        if (m->coll.n == 0)
            return NULL;
        desc_t *d = dq_at(&m->coll, 0);
        if (d->seq != c->next_seq) {
            ERR("COLL", "comm %u rank %u: sequence %llu posted where %llu was due", c->id, r,
                (unsigned long long)d->seq, (unsigned long long)c->next_seq);
            eng_session_complete(eng, m->s, d->tag, HCCL_E_PARA);
            dq_remove(&m->coll, 0);
            *acted_p = 1;
            return NULL;
        }
    }
    d0 = dq_at(&c->m[0].coll, 0);
    for (uint32_t r = 1; r < c->nranks; r++)
        if (!coll_agrees(c, d0, dq_at(&c->m[r].coll, 0), r, c->mismatch_ns == 0)) {
            uint64_t now = now_ns();
            if (c->mismatch_ns == 0)
                c->mismatch_ns = now;
            if (now - c->mismatch_ns < MISMATCH_GRACE_NS)
                return NULL; /* a rank's death, if that is why, is heard first */
            c->mismatch_ns = 0;
            /* The ranks' later pieces no longer line up either: end the comm cleanly. */
            coll_complete_all(eng, c, HCCL_E_PARA);
            eng_comm_break_status(eng, c, HCCL_E_PARA, "ranks posted different collectives");
            *acted_p = 1;
            return NULL;
        }
    c->mismatch_ns = 0;
    if (resumed_unsafe(c, d0)) {
        WARN("COLL",
             "comm %u: piece %llu was under way when the daemon restarted and overwrites its "
             "own input on some rank (in place, on HcclMemAlloc or registered memory): it cannot "
             "run again, and fails on every rank",
             c->id, (unsigned long long)d0->seq);
        coll_complete_all(eng, c, HCCL_E_REMOTE);
        *acted_p = 1;
        return NULL;
    }
    return d0;
}

desc_t *coll_ready(engine_t *eng, eng_comm_t *c)
{
    int acted;

    return coll_head(eng, c, &acted);
}

/* The latency histogram (hccld-ctl metrics): how long the daemon ran the piece, from its
 * start (every rank had posted it) to its completion, inside the node or across daemons. */
static void count_latency(engine_t *eng, const op_prof_t *p)
{
    uint64_t us = (now_ns() - p->t_start) / 1000;
    unsigned k = 0;

    while (k + 1 < ENGINE_LAT_BUCKETS && us >= (1ull << k))
        k++;
    eng->st.lat_bucket[k]++;
    eng->st.lat_sum_us += us;
    eng->st.lat_count++;
}

void coll_finish(engine_t *eng, eng_comm_t *c, HcclResult status)
{
    if (status == HCCL_SUCCESS && c->prof.t_start != 0)
        count_latency(eng, &c->prof);
    coll_complete_all(eng, c, status);
    c->ops_done++;
    eng->st.ops_done++;
}

/* Runs the next collective if every rank posted it. Returns 1 if it did something. */
static int coll_progress(engine_t *eng, eng_comm_t *c)
{
    int acted;
    desc_t *d0 = coll_head(eng, c, &acted);

    if (d0 == NULL)
        return acted;
    for (uint32_t r = 0; r < c->nranks; r++) {
        eng_member_t *m = &c->m[r];
        desc_t *d = dq_at(&m->coll, 0);
        c->l0r[r] = (l0_rank_t){.send = arena_at(m, d->send_off),
                                .recv = arena_at(m, d->recv_off),
                                .send_stride = d->send_stride,
                                .recv_stride = d->recv_stride};
    }
    c->prof = (op_prof_t){.t_start = now_ns(), .algo = -1};
    run_op(eng, c, d0, c->nranks);
    c->prof.l0_ns = now_ns() - c->prof.t_start;
    coll_finish(eng, c, HCCL_SUCCESS);
    return 1;
}

/* Index of the first entry of kind `kind` with peer `peer` in q, or -1. */
static int p2p_first(dq_t *q, uint8_t kind, uint32_t peer)
{
    for (uint32_t i = 0; i < q->n; i++) {
        desc_t *d = dq_at(q, i);
        if (d->kind == kind && d->root == peer)
            return (int)i;
    }
    return -1;
}

static void p2p_run(engine_t *eng, eng_comm_t *c, uint32_t src, int si, uint32_t dst, int ri)
{
    eng_member_t *ms = &c->m[src], *md = &c->m[dst];
    desc_t s = *dq_at(&ms->p2p, (uint32_t)si), r = *dq_at(&md->p2p, (uint32_t)ri);
    cqe_t es = {.tag = s.tag}, er = {.tag = r.tag};
    op_prof_t prof = {.t_start = now_ns(), .algo = -1};
    HcclResult status = HCCL_SUCCESS;

    if (s.total != r.total || s.count != r.count || s.dtype != r.dtype) {
        ERR("COLL", "comm %u: rank %u sends %llu x %s to rank %u, which receives %llu x %s from it",
            c->id, src, (unsigned long long)s.total, dtype_name(s.dtype), dst,
            (unsigned long long)r.total, dtype_name(r.dtype));
        status = HCCL_E_PARA;
    } else {
        c->l0r[0] = (l0_rank_t){.send = arena_at(ms, s.send_off)};
        c->l0r[1] = (l0_rank_t){.recv = arena_at(md, r.recv_off)};
        run_op(eng, c, &s, 2);
        prof.l0_ns = now_ns() - prof.t_start;
        c->ops_done++;
        eng->st.ops_done++;
    }
    prof_cqe(&es, &prof, dq_t_in(&ms->p2p, (uint32_t)si));
    prof_cqe(&er, &prof, dq_t_in(&md->p2p, (uint32_t)ri));
    es.status = er.status = status;
    /* Remove the later index first when both sit in the same queue (send to self). */
    if (src == dst && ri > si) {
        dq_remove(&md->p2p, (uint32_t)ri);
        dq_remove(&ms->p2p, (uint32_t)si);
    } else {
        dq_remove(&ms->p2p, (uint32_t)si);
        dq_remove(&md->p2p, (uint32_t)ri);
    }
    eng_session_post(eng, ms->s, &es);
    eng_session_post(eng, md->s, &er);
    if (status != HCCL_SUCCESS)
        eng_comm_break(eng, c, "a sender and its receiver disagree");
}

/* Matches the oldest send from each rank to each peer with that peer's oldest receive. */
static int p2p_progress(engine_t *eng, eng_comm_t *c)
{
    /* Peers are global ranks; members are this node's (c->global_of). */
    for (uint32_t src = 0; src < c->nranks; src++) {
        dq_t *q = &c->m[src].p2p;
        for (uint32_t i = 0; i < q->n; i++) {
            desc_t *d = dq_at(q, i);
            uint32_t dst = eng_comm_local(c, d->root);
            if (d->kind != DESC_SEND || dst == UINT32_MAX ||
                p2p_first(q, DESC_SEND, d->root) != (int)i)
                continue;
            int ri = p2p_first(&c->m[dst].p2p, DESC_RECV, c->global_of[src]);
            if (ri >= 0) {
                p2p_run(eng, c, src, (int)i, dst, ri);
                return 1;
            }
        }
    }
    return 0;
}

int eng_comm_local_p2p(engine_t *eng, eng_comm_t *c)
{
    int n = 0;

    while (!c->broken && p2p_progress(eng, c))
        n++;
    return n;
}

int eng_comm_local_progress(engine_t *eng, eng_comm_t *c)
{
    int n = 0;

    while (coll_progress(eng, c))
        n++;
    return n + eng_comm_local_p2p(eng, c);
}

int eng_comm_progress(engine_t *eng, eng_comm_t *c)
{
    switch (eng_comm_state(c)) {
    case ENG_COMM_BROKEN:
        /* A broken comm only pushes out its notice to the other nodes. */
        return c->span != NULL ? eng_span_progress(eng, c) : 0;
    case ENG_COMM_READY:
        if (c->span == NULL)
            return eng_comm_local_progress(eng, c);
        break;
    case ENG_COMM_CONNECTING:
    case ENG_COMM_PROBING: break;
    }
    return eng_span_progress(eng, c);
}
