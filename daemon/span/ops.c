/* The table the engine drives span comms through (span.h), their events, and the daemon's
 * span environment: the connection manager and what every span comm shares. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "span/span_int.h"

_Static_assert(SPAN_LINK_MAX == TP_DESC_MAX, "a link description fits span_ops_t.stats");

void *(*span_ev_alloc)(size_t bytes) = malloc;

span_ev_t *span_ev_push(span_comm_t *sc, span_ev_kind_t kind)
{
    if (sc->evq_n == sc->evq_cap) {
        uint32_t cap = sc->evq_cap ? sc->evq_cap * 2 : 8;
        span_ev_t *v = span_ev_alloc(cap * sizeof(*v));
        if (v == NULL) {
            /* Whoever waits for it would wait forever: once the queue is drained, the comm
             * breaks instead (ops_event), and progress stops here (ops_stopped). */
            ERR("COLL", "comm %u: no memory for an event; the comm breaks", sc->id);
            sc->evq_lost++;
            memset(&sc->ev_spare, 0, sizeof(sc->ev_spare));
            return &sc->ev_spare;
        }
        for (uint32_t i = 0; i < sc->evq_n; i++)
            v[i] = sc->evq[(sc->evq_head + i) % sc->evq_cap];
        free(sc->evq);
        sc->evq = v;
        sc->evq_head = 0;
        sc->evq_cap = cap;
    }
    span_ev_t *ev = &sc->evq[(sc->evq_head + sc->evq_n++) % sc->evq_cap];
    *ev = (span_ev_t){.kind = kind, .culprit = UINT32_MAX};
    return ev;
}

int span_break(span_comm_t *sc, HcclResult status, const char *fmt, ...)
{
    span_ev_t *ev = span_ev_push(sc, SPAN_EV_BROKEN);
    va_list ap;

    ev->status = status;
    va_start(ap, fmt);
    vsnprintf(ev->why, sizeof(ev->why), fmt, ap);
    va_end(ap);
    return 1;
}

static int ops_event(span_comm_t *sc, span_ev_t *ev)
{
    if (sc->evq_n == 0 && sc->evq_lost > 0) {
        *ev = (span_ev_t){.kind = SPAN_EV_BROKEN, .status = HCCL_E_MEMORY, .culprit = UINT32_MAX};
        snprintf(ev->why, sizeof(ev->why), "out of memory: %u events of the comm were lost",
                 sc->evq_lost);
        sc->evq_lost = 0;
        return 1;
    }
    if (sc->evq_n == 0)
        return 0;
    *ev = sc->evq[sc->evq_head];
    sc->evq_head = (sc->evq_head + 1) % sc->evq_cap;
    sc->evq_n--;
    return 1;
}

/* Whether the last event queued changes the comm (progress stops there). */
static int ops_stopped(const span_comm_t *sc)
{
    if (sc->evq_lost > 0)
        return 1;
    if (sc->evq_n == 0)
        return 0;
    span_ev_kind_t k = sc->evq[(sc->evq_head + sc->evq_n - 1) % sc->evq_cap].kind;
    return k == SPAN_EV_BROKEN || k == SPAN_EV_RANK_LEFT;
}

static span_state_t ops_state(const span_comm_t *sc)
{
    if (sc->nready < sc->nnodes - 1)
        return SPAN_CONNECTING;
    return sc->probed ? SPAN_READY : SPAN_PROBING;
}

static int ops_progress(span_comm_t *sc, int broken)
{
    int n;

    if (broken)
        return span_abort_progress(sc, 1);
    if (ops_state(sc) != SPAN_READY) {
        /* Nothing starts before the links are measured: a rank that finished early and left
         * must not close a connection with probe messages still unread. */
        n = span_conns_progress(sc);
        if (!ops_stopped(sc))
            n += span_probe_progress(sc);
        if (!ops_stopped(sc))
            n += span_ready_timeout(sc);
        if (ops_stopped(sc) || ops_state(sc) != SPAN_READY)
            return n;
    } else {
        n = 0;
    }
    n += span_abort_progress(sc, 0);
    if (!ops_stopped(sc))
        n += span_drain_progress(sc);
    if (ops_stopped(sc) || ops_state(sc) != SPAN_READY)
        return n; /* dropped its connections for a restart (drain.c) */
    n += span_rerun_progress(sc);
    n += span_plog_progress(sc);
    if (!ops_stopped(sc))
        n += span_coll_progress(sc);
    if (!ops_stopped(sc))
        n += span_p2p_progress(sc);
    return n;
}

static int ops_busy(const span_comm_t *sc)
{
    return sc->busy || sc->run != NULL || span_drain_holds(sc);
}

static void ops_notify(span_comm_t *sc, uint32_t rank, int what, uint64_t limit)
{
    span_abort_send(sc, rank, what, limit);
}

static int ops_rank_left(span_comm_t *sc, uint32_t l)
{
    if (l >= sc->nlocal)
        return 0;
    sc->gone[l] = 1;
    return sc->busy && l == 0 && sc->work != sc->out;
}

static int ops_waits(const span_comm_t *sc, int broken)
{
    if (broken)
        return span_abort_pending(sc);
    if (sc->busy || sc->run != NULL || sc->flights != NULL || !sc->probed ||
        sc->nready < sc->nnodes - 1 || span_drain_active(sc) || span_rerun_active(sc))
        return 1;
    /* A connection suspended (op retry) dials again, and fails when its hold runs out: on
     * time, not at the engine's next idle turn. */
    for (uint32_t i = 0; sc->retry.enabled && i < sc->nnodes; i++) {
        tp_retry_stats_t rs = {0};
        if (sc->conns[i] != NULL)
            tp_retry_stats(sc->conns[i], &rs);
        if (rs.suspended)
            return 1;
    }
    return 0;
}

static int ops_qos_active(const span_comm_t *sc, uint64_t now)
{
    return sc->busy || now < sc->more_until_ns;
}

static int ops_poll_fds(const span_comm_t *sc, int broken, struct pollfd *pfd, int max)
{
    int n = 0;

    if (broken)
        return 0;
    n += span_p2p_poll_fds(sc, pfd + n, max - n);
    n += span_probe_poll_fds(sc, pfd + n, max - n);
    if (sc->run != NULL)
        return n + l1_poll_fds(sc->run, pfd + n, max - n);
    /* Idle, it still listens for the other nodes' notices (abort.c). */
    for (uint32_t i = 0; i < sc->nnodes && n < max; i++)
        if (sc->conns[i] != NULL && (sc->abort != NULL || tp_conn_state(sc->conns[i]) == 0))
            n += tp_poll_fds(sc->conns[i], pfd + n, max - n);
    return n;
}

/* The nodes the collective on the wire waits on, with their ranks. */
static void waiting_on(const span_comm_t *sc, span_stats_t *st)
{
    uint32_t nodes[WAIT_INFO_MAX];
    int unstarted;

    st->round = l1_round(sc->run);
    st->nrounds = sc->sched.nrounds;
    st->nwaiting = l1_waiting_on(sc->run, nodes, WAIT_INFO_MAX, &unstarted);
    for (uint32_t k = 0; k < st->nwaiting; k++) {
        wait_info_t *w = &st->waiting[k];
        uint32_t i = nodes[k], first = sc->pl.first[i];
        w->node = i;
        w->nranks = sc->pl.first[i + 1] - first;
        for (uint32_t j = 0; j < w->nranks && j < WAIT_INFO_RANKS; j++)
            w->ranks[j] = sc->pl.pos_rank[first + j];
        /* l1 names the previous node first when its check has not come */
        w->unstarted = unstarted && k == 0;
    }
}

static void ops_stats(const span_comm_t *sc, span_stats_t *st, char (*link)[SPAN_LINK_MAX],
                      uint32_t max, uint32_t *nnodes)
{
    const link_cost_t *lc = &sc->lc;

    *st = (span_stats_t){.algo = sc->sched.steps != NULL ? sc->sched_key.algo : -1,
                         .on_wire = sc->busy,
                         .measured = sc->probed && sc->nnodes > 1};
    if (st->measured) {
        st->alpha_us = lc->alpha_us;
        st->gbps = lc->beta_us_per_byte > 0 ? 1e-3 / lc->beta_us_per_byte : 0;
        st->reduce_gbps = lc->gamma_us_per_byte > 0 ? 1e-3 / lc->gamma_us_per_byte : 0;
        st->overhead_us = lc->overhead_us;
        st->host_load = lc->host_load;
    }
    if (sc->busy && sc->run != NULL)
        waiting_on(sc, st);
    /* Waiting for a node back from a restart (drain.c): its connection counts as suspended. */
    if (sc->respan_ns != 0 && !sc->probed) {
        st->nsuspended = 1;
        st->suspended_ns = now_ns() - sc->respan_ns;
    }
    *nnodes = 0;
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        tp_retry_stats_t rs = {0};
        if (sc->conns[i] != NULL)
            tp_retry_stats(sc->conns[i], &rs);
        if (rs.suspended) {
            st->nsuspended++;
            st->suspended_ns =
                rs.suspended_ns > st->suspended_ns ? rs.suspended_ns : st->suspended_ns;
        }
        if (i >= max)
            continue;
        link[i][0] = '\0';
        if (sc->conns[i] != NULL)
            tp_describe(sc->conns[i], link[i], SPAN_LINK_MAX);
        *nnodes = i + 1;
    }
}

const span_ops_t span_ops = {
    .state = ops_state,
    .progress = ops_progress,
    .event = ops_event,
    .busy = ops_busy,
    .coll_start = span_coll_start,
    .p2p_post = span_p2p_post,
    .p2p_cancel = span_p2p_cancel,
    .notify = ops_notify,
    .rank_left = ops_rank_left,
    .waits = ops_waits,
    .qos_active = ops_qos_active,
    .poll_fds = ops_poll_fds,
    .stats = ops_stats,
    .links = span_links,
    .drain = span_drain_lead,
    .draining = span_drain_pending,
    .free = span_comm_free,
};

span_env_t *span_env_new(void)
{
    span_env_t *env = calloc(1, sizeof(*env));

    if (env != NULL && (env->cm = tp_cm_new()) == NULL) {
        free(env);
        env = NULL;
    }
    return env;
}

void span_env_free(span_env_t *env)
{
    if (env == NULL)
        return;
    tp_cm_free(env->cm);
    free(env);
}

int span_env_listen(span_env_t *env, const char *ip, char *addr_out, char *rdma_out)
{
    tp_cm_addrs_t a;
    int rc = tp_cm_set_mode(env->cm, getenv("HCCL_TRANSPORT"));

    addr_out[0] = rdma_out[0] = '\0';
    if (rc == 0)
        rc = tp_cm_listen(env->cm, ip, &a);
    if (rc == 0) {
        snprintf(addr_out, SPAN_ADDR_MAX, "%s", a.tcp);
        snprintf(rdma_out, SPAN_ADDR_MAX, "%s", a.rdma);
    }
    return rc;
}

int span_env_expect(span_env_t *env, const uint8_t *job_id, const uint8_t *key)
{
    return tp_cm_job_expect(env->cm, job_id, key);
}

void span_env_set_host(span_env_t *env, uint64_t host)
{
    env->host = host;
}

uint32_t span_env_data_conns(const span_env_t *env)
{
    return env->data_conns;
}

static span_comm_t *env_comm_by_job(span_env_t *env, const uint8_t *job_id)
{
    for (span_comm_t *sc = env->comms; sc != NULL; sc = sc->next)
        if (memcmp(sc->job_id, job_id, AUTH_JOB_BYTES) == 0)
            return sc;
    return NULL;
}

int span_env_progress(span_env_t *env)
{
    uint8_t job[AUTH_JOB_BYTES];
    uint32_t peer;
    tp_conn_t *conn;
    int n = tp_cm_progress(env->cm);

    while ((conn = tp_cm_take(env->cm, job, &peer)) != NULL) {
        span_comm_t *sc = env_comm_by_job(env, job);
        if (sc == NULL ||
            (span_link_take(sc, peer, conn) != 0 && !span_link_stash(sc, peer, conn) &&
             !span_rerun_accept(sc, peer, conn))) {
            WARN("NET", "data connection from node %u for no waiting comm; closed", peer);
            tp_close(conn);
        }
    }
    return n;
}

int span_env_accepting(const span_env_t *env)
{
    return tp_cm_accepting(env->cm);
}

int span_env_poll_fds(const span_env_t *env, struct pollfd *pfd, int max)
{
    return tp_cm_poll_fds(env->cm, pfd, max);
}

void span_env_polled(span_env_t *env, const struct pollfd *pfd, int n)
{
    tp_cm_polled(env->cm, pfd, n);
}
