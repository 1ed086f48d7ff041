/*
 * Comms that span daemons, as the engine drives them: through the span layer's table
 * (span/span.h), handing it the collectives every local rank posted and the transfers with
 * other nodes, and acting on the events it reports (an op done, the comm broken, a rank of
 * another node gone). The engine's lock is held throughout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "sched/engine_int.h"

_Static_assert(ENGINE_ADDR_MAX == SPAN_ADDR_MAX, "data addresses have one size");
_Static_assert(ENGINE_LINK_MAX == SPAN_LINK_MAX, "a link description fits the engine's stats");
_Static_assert(ENGINE_RANK_MAX <= SPAN_RANK_MAX, "a comm's ranks fit the span layer's");

/* A transfer with another node ended. */
static void p2p_done(engine_t *eng, eng_comm_t *c, const span_ev_t *ev)
{
    eng_session_t *s = ev->local < c->nranks ? c->m[ev->local].s : NULL;

    if (ev->status == HCCL_SUCCESS) {
        if (ev->is_send)
            eng->st.net_tx_bytes += ev->bytes;
        else
            eng->st.net_rx_bytes += ev->bytes;
        c->ops_done++;
        eng->st.ops_done++;
    }
    if (s == NULL)
        return;
    if (ev->t_post == 0) {
        eng_session_complete(eng, s, ev->tag, ev->status);
        return;
    }
    op_prof_t prof = {.t_start = ev->prof.t_start, .l1_ns = ev->prof.l1_ns, .algo = -1};
    cqe_t e = {.tag = ev->tag, .status = ev->status};
    prof_cqe(&e, &prof, ev->t_in);
    eng_session_post(eng, s, &e);
}

static void on_event(engine_t *eng, eng_comm_t *c, const span_ev_t *ev)
{
    switch (ev->kind) {
    case SPAN_EV_COLL_DONE:
        /* A break reported first failed the op's descriptors with the comm. */
        if (c->broken)
            return;
        c->prof = (op_prof_t){.t_start = ev->prof.t_start,
                              .l0_ns = ev->prof.l0_ns,
                              .l1_ns = ev->prof.l1_ns,
                              .qos_wait_ns = ev->prof.qos_wait_ns,
                              .algo = ev->prof.algo,
                              .src = ev->prof.src};
        eng->st.net_tx_bytes += ev->prof.tx_bytes;
        eng->st.net_rx_bytes += ev->prof.rx_bytes;
        coll_finish(eng, c, ev->status);
        return;
    case SPAN_EV_P2P_DONE: p2p_done(eng, c, ev); return;
    case SPAN_EV_BROKEN:
        if (ev->set_culprit)
            c->culprit = ev->culprit;
        eng_comm_break_status(eng, c, ev->status, ev->why);
        return;
    case SPAN_EV_RANK_LEFT:
        c->culprit = ev->culprit;
        eng_comm_rank_left(eng, c, ev->culprit, ev->limit);
        return;
    case SPAN_EV_P2P_AGAIN:
        if (ev->local < c->nranks && dq_push_front(&c->m[ev->local].p2p, &ev->d, ev->t_in) != 0)
            eng_comm_break_status(eng, c, HCCL_E_MEMORY,
                                  "no memory to post a receive again after a restart");
        return;
    }
}

/* Acts on what the span comm reported, oldest first. */
int eng_span_drain(engine_t *eng, eng_comm_t *c)
{
    span_ev_t ev;
    int n = 0;

    while (c->span != NULL && c->sops->event(c->span, &ev)) {
        on_event(eng, c, &ev);
        n++;
    }
    return n;
}

static int drive(engine_t *eng, eng_comm_t *c)
{
    int n = c->sops->progress(c->span, c->broken);

    return n + eng_span_drain(eng, c);
}

int eng_span_post_p2p(engine_t *eng, eng_comm_t *c)
{
    int n = 0;

    for (uint32_t l = 0; l < c->nranks && !c->broken; l++) {
        eng_member_t *m = &c->m[l];
        for (uint32_t i = 0; i < m->p2p.n;) {
            const desc_t *d = dq_at(&m->p2p, i);
            if (eng_comm_local(c, d->root) != UINT32_MAX) {
                i++;
                continue;
            }
            int rc =
                c->sops->p2p_post(c->span, l, d, dq_t_in(&m->p2p, i),
                                  m->s->arena + (d->kind == DESC_SEND ? d->send_off : d->recv_off));
            if (rc < 0) {
                eng_comm_break(eng, c, "a transfer to another daemon failed");
                return 1;
            }
            if (rc == 0) {
                i++;
                continue;
            }
            dq_remove(&m->p2p, i);
            n++;
        }
    }
    return n;
}

/* Hands the span comm what the local ranks posted: the next collective when none runs, the
 * transfers; matches those within the node. */
static int offer(engine_t *eng, eng_comm_t *c)
{
    int n = 0;

    if (!c->sops->busy(c->span)) {
        desc_t *d0 = coll_ready(eng, c);
        if (d0 != NULL) {
            for (uint32_t r = 0; r < c->nranks; r++) {
                eng_member_t *m = &c->m[r];
                const desc_t *d = dq_at(&m->coll, 0);
                c->l0r[r] = (l0_rank_t){.send = m->s->arena + d->send_off,
                                        .recv = m->s->arena + d->recv_off,
                                        .send_stride = d->send_stride,
                                        .recv_stride = d->recv_stride};
            }
            if (c->sops->coll_start(c->span, d0, c->l0r) != 0)
                coll_finish(eng, c, HCCL_E_INTERNAL);
            n++;
        }
    }
    if (!c->broken)
        n += eng_comm_local_p2p(eng, c);
    if (!c->broken)
        n += eng_span_post_p2p(eng, c);
    return n;
}

int eng_span_progress(engine_t *eng, eng_comm_t *c)
{
    int n = drive(eng, c), k;

    if (c->broken || eng_comm_state(c) != ENG_COMM_READY)
        return n;
    /* What started now makes its first steps in the same pass. */
    if ((k = offer(eng, c)) > 0 && !c->broken)
        k += drive(eng, c);
    return n + k;
}

int eng_span_waiting(engine_t *eng)
{
    if (span_env_accepting(eng->senv))
        return 1;
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        if ((c->span != NULL && c->sops->waits(c->span, c->broken)) ||
            (c->mismatch_ns != 0 && !c->broken))
            return 1; /* a mismatch's grace runs out on time too */
    return 0;
}

int eng_span_poll_fds(engine_t *eng, struct pollfd *pfd, int max, int *ncm_p)
{
    int n = *ncm_p = span_env_poll_fds(eng->senv, pfd, max);

    for (eng_comm_t *c = eng->comms; c != NULL && n < max; c = c->next)
        if (c->span != NULL)
            n += c->sops->poll_fds(c->span, c->broken, pfd + n, max - n);
    return n;
}

int engine_listen(engine_t *eng, const char *ip, char *addr_out, char *rdma_out)
{
    pthread_mutex_lock(&eng->lock);
    int rc = span_env_listen(eng->senv, ip, addr_out, rdma_out);
    pthread_mutex_unlock(&eng->lock);
    return rc;
}

int engine_job_expect(engine_t *eng, const uint8_t *job_id, const uint8_t *key)
{
    pthread_mutex_lock(&eng->lock);
    int rc = span_env_expect(eng->senv, job_id, key);
    pthread_mutex_unlock(&eng->lock);
    return rc;
}

/* QoS, lent to span comms (span_qos_t). */
static int qos_admit_hook(void *ctx, int cls, uint64_t bytes, uint64_t now)
{
    return qos_admit(&((engine_t *)ctx)->qos, cls, bytes, now);
}

static int qos_dscp_hook(void *ctx, int cls)
{
    const qos_sched_t *q = &((engine_t *)ctx)->qos;

    return cls >= 0 && cls < q->ncls ? q->cls[cls].dscp : -1;
}

/* The members are node me's ranks, in rank order: their global ranks. */
static int place_members(eng_comm_t *c, const engine_multi_spec_t *sp)
{
    uint32_t n = 0;

    for (uint32_t g = 0; g < sp->nglobal && n < sp->local; g++)
        if (sp->rank_node[g] == sp->me)
            c->global_of[n++] = g;
    return n == sp->local ? eng_comm_set_ranks(c, sp->nglobal, c->global_of) : -EINVAL;
}

int engine_level1_check(const engine_level1_t *w, char *err, size_t cap, char *notice, size_t ncap)
{
    return span_level1_check(w->algo, w->algorithm, w->algo_by_config, w->deterministic, err, cap,
                             notice, ncap);
}

int engine_comm_create_multi(engine_t *eng, const engine_multi_spec_t *sp)
{
    span_spec_t ss = {.comm_id = sp->comm_id,
                      .nnodes = sp->nnodes,
                      .me = sp->me,
                      .local = sp->local,
                      .nglobal = sp->nglobal,
                      .rank_node = sp->rank_node,
                      .global = NULL, /* set below */
                      .addrs = sp->addrs,
                      .rdma_addrs = sp->rdma_addrs,
                      .job_id = sp->job_id,
                      .key = sp->key,
                      .algo = sp->level1 != NULL ? sp->level1->algo : NULL,
                      .algorithm = sp->level1 != NULL ? sp->level1->algorithm : NULL,
                      .algo_by_config = sp->level1 != NULL && sp->level1->algo_by_config,
                      .deterministic = sp->level1 != NULL && sp->level1->deterministic,
                      .log_ops = sp->log_ops,
                      .qos_class = sp->qos_class,
                      .parent_comm_id = sp->parent_comm_id,
                      .share = sp->share,
                      .inherit_links = sp->inherit_links,
                      .connect_timeout_s = sp->connect_timeout_s,
                      .retry_hold_ms = sp->retry_hold_ms,
                      .retry_max_cnt = sp->retry_max_cnt,
                      .returning = sp->returning ? sp->me : UINT32_MAX,
                      .p2p_next = sp->p2p_next,
                      .coll_below = sp->coll_below};
    span_qos_t qos = {.admit = qos_admit_hook, .dscp = qos_dscp_hook, .ctx = eng};
    char why[SPAN_WHY_MAX];
    span_comm_t *sc;
    int rc = engine_comm_create(eng, sp->comm_id, sp->local, sp->members);

    if (rc != 0)
        return rc;
    pthread_mutex_lock(&eng->lock);
    eng_comm_t *c = eng_comm_find(eng, sp->comm_id);
    if ((rc = place_members(c, sp)) == 0) {
        ss.global = c->global_of;
        rc = span_comm_new(eng->senv, &ss, &qos, &sc, why);
    } else
        sc = NULL, snprintf(why, sizeof(why), "its ranks' placement does not add up");
    if (sc == NULL && rc == -ENOMEM) {
        pthread_mutex_unlock(&eng->lock);
        eng_comm_unmake(eng, sp->comm_id);
        return rc;
    }
    c->span = sc;
    c->sops = &span_ops;
    c->qos_class = sp->qos_class;
    if (rc != 0)
        eng_comm_break(eng, c, why);
    pthread_mutex_unlock(&eng->lock);
    engine_kick(eng);
    return rc;
}

uint32_t engine_comm_links(engine_t *eng, uint32_t comm_id, char (*addrs)[ENGINE_ADDR_MAX],
                           uint32_t max)
{
    uint32_t n = 0;

    pthread_mutex_lock(&eng->lock);
    eng_comm_t *c = eng_comm_find(eng, comm_id);
    if (c != NULL && c->span != NULL && !c->broken)
        n = c->sops->links(c->span, addrs, max);
    pthread_mutex_unlock(&eng->lock);
    return n;
}

unsigned engine_drain(engine_t *eng)
{
    unsigned n = 0;

    pthread_mutex_lock(&eng->lock);
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        if (c->span != NULL && !c->broken && c->sops->drain != NULL && c->sops->drain(c->span))
            n++;
    pthread_mutex_unlock(&eng->lock);
    if (n > 0)
        engine_kick(eng);
    return n;
}

int engine_drained(engine_t *eng)
{
    int done = 1;

    pthread_mutex_lock(&eng->lock);
    for (eng_comm_t *c = eng->comms; c != NULL && done; c = c->next)
        if (c->span != NULL && !c->broken && c->sops->draining != NULL &&
            c->sops->draining(c->span))
            done = 0;
    pthread_mutex_unlock(&eng->lock);
    return done;
}
