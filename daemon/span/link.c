/*
 * Data connections of communicators that span daemons: node j connects to every node i < j
 * and announces its index; node i accepts (the connection manager, transport/tp_cm.h, learns
 * the job from the handshake and j from the announcement) and gets it handed over here. A comm
 * runs collectives once all its connections are ready.
 *
 * A child of HcclCommSplit takes its parent's connection instead wherever the root daemon
 * says both ends hold one (span_spec_t.share): no handshake, no second socket. Such a
 * connection is a span_link counted by its users, so parent and child may go in any order;
 * tags keep their messages apart (tag.h). The parent's connection already proved the parent's
 * key, from which the child's is derived: whoever may use one may use the other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo_want.h"
#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "span/span_int.h"
#include "span/tag.h"
#include "text.h"
#include "transport/tp_kept.h"

_Static_assert(SPAN_ADDR_MAX == TP_ADDR_MAX, "data addresses have one size");

/* How long a shared connection drops the late messages of a comm that is gone. */
#define FORGET_NS (30 * 1000000000ull)

/* Marks a data connection with its comm's class (DSCP on TCP). Only a comm's own connections:
 * one it shares keeps its parent's marking. A split's children are the same tenant's job and
 * class alike; re-marking would change the class of the parent's traffic under it. */
static void link_mark(const span_comm_t *sc, tp_conn_t *conn)
{
    int dscp = sc->qos_class >= 0 ? sc->qos.dscp(sc->qos.ctx, sc->qos_class) : -1;

    if (dscp >= 0)
        tp_set_dscp(conn, dscp);
}

/* Makes a new data connection of the comm resumable when it asked for op retry, before any
 * message of ours crosses it (TCP and RDMA can). A transport that cannot fails as before: said
 * once. */
static void link_retry(span_comm_t *sc, tp_conn_t *conn)
{
    if (!sc->retry.enabled || tp_set_retry(conn, &sc->retry) == 0)
        return;
    char desc[SPAN_LINK_MAX];
    tp_describe(conn, desc, sizeof(desc));
    WARN("NET", "comm %u: op retry is not available on its %s data connections; they fail at once",
         sc->id, desc);
}

/* A connection of one comm so far, to node `node`; counted among the daemon's open ones. NULL
 * (and the connection closed) if out of memory. */
static span_link_t *link_new(span_comm_t *sc, uint32_t node, tp_conn_t *conn)
{
    span_env_t *env = sc->env;
    span_link_t *l = calloc(1, sizeof(*l));

    if (l == NULL) {
        tp_close(conn);
        return NULL;
    }
    l->conn = conn;
    l->refs = 1;
    l->owner = sc->id;
    l->serial = ++env->link_serials;
    snprintf(l->peer, sizeof(l->peer), "%s",
             conn->ops->kind == TP_KIND_RDMA && sc->node_addrs[node].rdma[0] != '\0'
                 ? sc->node_addrs[node].rdma
                 : sc->node_addrs[node].tcp);
    env->data_conns++;
    return l;
}

static void link_view(const span_link_t *l, link_view_t *v)
{
    *v = (link_view_t){.serial = l->serial, .comm_id = l->owner, .users = l->refs};
    snprintf(v->peer, sizeof(v->peer), "%s", l->peer);
    tp_describe(l->conn, v->desc, sizeof(v->desc));
    tp_link_info(l->conn, &v->info);
}

/* One comm less uses l; the last one closes it, keeping its last figures for the monitor
 * (the oldest kept go when too many closed between two of its walks). */
static void link_put(span_env_t *env, span_link_t *l)
{
    if (l == NULL || --l->refs > 0)
        return;
    if (env->nclosed == SPAN_CLOSED_MAX)
        memmove(env->closed, env->closed + 1, (SPAN_CLOSED_MAX - 1) * sizeof(env->closed[0]));
    else
        env->nclosed++;
    link_view(l, &env->closed[env->nclosed - 1]);
    env->closed[env->nclosed - 1].closed = 1;
    tp_close(l->conn);
    free(l);
    env->data_conns--;
}

/* The messages of node `node` carried over a respan go before the new connection's. */
static void carry_in(span_comm_t *sc, uint32_t node, tp_conn_t *conn)
{
    if (sc->carry == NULL || sc->carry[node] == NULL)
        return;
    tp_kept_put_to(conn, sc->carry[node]);
    sc->carry[node] = NULL;
}

/* Takes the send/recv messages no receive has taken yet out of each connection, to go before
 * the next connection's: the ranks post those receives after the respan. */
static void carry_out(span_comm_t *sc)
{
    uint64_t mask = 3ull << 62 | (uint64_t)TAG_COMM_MASK << 32,
             value = tag_make(TAG_P2P, sc->tag, 0);

    if (sc->carry == NULL && (sc->carry = calloc(sc->nnodes, sizeof(*sc->carry))) == NULL)
        return;
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        tp_msg_t *m = sc->conns[i] != NULL ? tp_kept_take_from(sc->conns[i], mask, value) : NULL;
        tp_msg_t **tail = &sc->carry[i];
        while (*tail != NULL) /* an earlier respan's, not handed on yet, first */
            tail = &(*tail)->next;
        *tail = m;
    }
}

int span_link_take(span_comm_t *sc, uint32_t peer, tp_conn_t *conn)
{
    if (peer >= sc->nnodes || peer == sc->me || span_dials(sc, peer) || sc->links[peer] != NULL)
        return -EINVAL;
    if ((sc->links[peer] = link_new(sc, peer, conn)) == NULL)
        return span_break(sc, HCCL_E_REMOTE, "no memory for a data connection"), 0;
    sc->conns[peer] = conn;
    link_mark(sc, conn);
    link_retry(sc, conn);
    carry_in(sc, peer, conn);
    sc->nready++;
    return 0;
}

/* Advances our outgoing connections; counts the ones that became ready. */
int span_conns_progress(span_comm_t *sc)
{
    int n = 0;

    for (uint32_t i = 0; i < sc->nnodes && sc->nready < sc->nnodes - 1; i++) {
        if (!span_dials(sc, i) || sc->conns[i] == NULL || sc->conn_ready[i])
            continue;
        int st = tp_conn_state(sc->conns[i]);
        if (st == 1) {
            link_retry(sc, sc->conns[i]);
            carry_in(sc, i, sc->conns[i]);
            sc->conn_ready[i] = 1;
            sc->nready++;
            n++;
        } else if (st < 0) {
            return span_break(sc, HCCL_E_REMOTE, "a data connection to another daemon failed");
        }
    }
    return n;
}

int span_ready_timeout(span_comm_t *sc)
{
    char why[SPAN_WHY_MAX];
    uint32_t ready = 0;
    size_t at = 0;

    if (sc->probed || now_ns() < sc->ready_by_ns)
        return 0;
    if (sc->returning < sc->nnodes && sc->returning != sc->me)
        return span_break(sc, HCCL_E_REMOTE,
                          "node %u (%s) did not come back within %llu ms of its restart (op "
                          "retry hold time)",
                          sc->returning, sc->node_addrs[sc->returning].tcp,
                          (unsigned long long)sc->retry.hold_ms);
    text_add(why, sizeof(why), &at, "HCCL_CONNECT_TIMEOUT: no data connection yet with node");
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        int up = i == sc->me || (span_dials(sc, i) ? sc->conn_ready[i] : sc->links[i] != NULL);
        ready += up && i != sc->me;
        if (!up && at < sizeof(why) - 40)
            text_add(why, sizeof(why), &at, " %u (%s)", i, sc->node_addrs[i].tcp);
    }
    if (ready == sc->nnodes - 1)
        text_add(why, sizeof(why), &at, " (all connected; their measurement did not end)");
    return span_break(sc, HCCL_E_TIMEOUT, "%s", why);
}

static void span_comm_unlink(span_comm_t *sc)
{
    for (span_comm_t **pp = &sc->env->comms; *pp != NULL; pp = &(*pp)->next)
        if (*pp == sc) {
            *pp = sc->next;
            break;
        }
}

/* Closes the connections stashed for a respan that did not come. */
static void early_free(span_comm_t *sc)
{
    for (uint32_t i = 0; sc->early != NULL && i < sc->nnodes; i++)
        if (sc->early[i] != NULL)
            tp_close(sc->early[i]);
    free(sc->early);
    sc->early = NULL;
}

int span_link_stash(span_comm_t *sc, uint32_t peer, tp_conn_t *conn)
{
    if (!span_drain_active(sc) || peer >= sc->nnodes || peer == sc->me)
        return 0;
    if (sc->early == NULL && (sc->early = calloc(sc->nnodes, sizeof(*sc->early))) == NULL)
        return 0;
    if (sc->early[peer] != NULL)
        tp_close(sc->early[peer]);
    sc->early[peer] = conn;
    return 1;
}

void span_comm_free(span_comm_t *sc)
{
    l1_free(sc->run);
    sched_free(&sc->sched);
    free(sc->fresh);
    span_p2p_free(sc);
    span_probe_free(sc);
    span_abort_free(sc);
    span_drain_free(sc);
    span_rerun_free(sc);
    span_snaps_free(sc);
    span_plog_free(sc);
    early_free(sc);
    for (uint32_t i = 0; sc->carry != NULL && i < sc->nnodes; i++)
        tp_msgs_free(sc->carry[i]);
    free(sc->carry);
    free(sc->out);
    free(sc->in);
    free(sc->scratch);
    for (uint32_t i = 0; sc->links != NULL && i < sc->nnodes; i++) {
        /* A connection that others keep: what the peers still send this comm goes. */
        if (sc->links[i] != NULL && sc->links[i]->refs > 1)
            tp_forget(sc->links[i]->conn, (uint64_t)TAG_COMM_MASK << 32, (uint64_t)sc->tag << 32,
                      FORGET_NS);
        link_put(sc->env, sc->links[i]);
    }
    if (sc->env != NULL) {
        tp_cm_job_release(sc->env->cm, sc->job_id);
        span_comm_unlink(sc);
    }
    free(sc->links);
    free(sc->op_resumes);
    free(sc->conn_ready);
    free(sc->conns);
    free(sc->node_addrs);
    free(sc->global_of);
    free(sc->gone);
    free(sc->ranks);
    free(sc->evq);
    span_place_free(&sc->pl);
    free(sc);
}

/* The members are node me's ranks, in rank order (sp->global). */
static int place_members(span_comm_t *sc, const span_spec_t *sp)
{
    uint32_t n = sp->local ? sp->local : 1;

    sc->nlocal = sp->local;
    sc->global_of = calloc(n, sizeof(*sc->global_of));
    sc->gone = calloc(n, 1);
    sc->ranks = calloc(n, sizeof(*sc->ranks));
    if (sc->global_of == NULL || sc->gone == NULL || sc->ranks == NULL)
        return -ENOMEM;
    memcpy(sc->global_of, sp->global, sp->local * sizeof(*sc->global_of));
    for (uint32_t l = 0; l < sp->local; l++)
        if (sp->global[l] >= sp->nglobal || sp->rank_node[sp->global[l]] != sp->me)
            return -EINVAL;
    return 0;
}

static span_comm_t *span_comm_alloc(const span_spec_t *sp)
{
    span_comm_t *sc;
    algo_want_t want;
    algo_env_t env;
    char err[160];

    /* Checked when the ranks asked (span_level1_check): a failure here is out of the blue. */
    if (algo_want_set(&want, sp->algo, sp->algorithm, sp->algo_by_config, sp->deterministic, err,
                      sizeof(err)) != 0 ||
        algo_want_resolve(&want, &env, err, sizeof(err), NULL, 0) != 0) {
        ERR("INIT", "comm %u: level-1 settings refused: %s", sp->comm_id, err);
        return NULL;
    }
    if ((sc = calloc(1, sizeof(*sc))) == NULL)
        return NULL;
    sc->id = sp->comm_id;
    sc->nnodes = sp->nnodes;
    sc->me = sp->me;
    sc->log_ops = sp->log_ops;
    sc->qos_class = sp->qos_class;
    sc->ready_by_ns =
        now_ns() + (uint64_t)(sp->connect_timeout_s ? sp->connect_timeout_s : 120) * 1000000000ull;
    sc->deterministic = sp->deterministic ? ALGO_SRC_DETERMINISTIC : 0;
    sc->retry = (tp_retry_t){.enabled = sp->retry_hold_ms > 0, .hold_ms = sp->retry_hold_ms};
    sc->retry_max_cnt = sp->retry_max_cnt;
    for (int k = 0; k < DESC_KIND_MAX; k++) {
        sc->forced[k] = env.level1[k];
        sc->forced_src[k] = env.src[k];
    }
    for (int k = 0; k < DESC_KIND_MAX; k++)
        for (int b = 0; b < 64; b++)
            sc->picks[k][b].algo = -1;
    sc->lc = algo_cost_fixed(); /* until links are measured at init */
    sc->returning = sp->returning < sp->nnodes ? sp->returning : UINT32_MAX;
    memcpy(sc->job_id, sp->job_id, AUTH_JOB_BYTES);
    memcpy(sc->key, sp->key, AUTH_KEY_BYTES);
    sc->tag = tag_comm(sp->job_id);
    sc->conns = calloc(sp->nnodes, sizeof(*sc->conns));
    sc->links = calloc(sp->nnodes, sizeof(*sc->links));
    sc->conn_ready = calloc(sp->nnodes, 1);
    sc->node_addrs = calloc(sp->nnodes, sizeof(*sc->node_addrs));
    if (sc->conns == NULL || sc->links == NULL || sc->conn_ready == NULL ||
        sc->node_addrs == NULL ||
        span_place_init(&sc->pl, sp->rank_node, sp->nglobal, sp->nnodes) != 0) {
        span_comm_free(sc);
        return NULL;
    }
    for (uint32_t i = 0; i < sp->nnodes; i++) {
        snprintf(sc->node_addrs[i].tcp, TP_ADDR_MAX, "%s", sp->addrs[i]);
        if (sp->rdma_addrs != NULL && sp->rdma_addrs[i] != NULL)
            snprintf(sc->node_addrs[i].rdma, TP_ADDR_MAX, "%s", sp->rdma_addrs[i]);
    }
    return sc;
}

static span_comm_t *env_comm_find(span_env_t *env, uint32_t id)
{
    for (span_comm_t *sc = env->comms; sc != NULL; sc = sc->next)
        if (sc->id == id)
            return sc;
    return NULL;
}

/* Whether a comm other than self on link l already uses these tag bits (tag.h). */
static int tag_taken(const span_comm_t *self, const span_link_t *l, uint32_t tag)
{
    for (const span_comm_t *sc = self->env->comms; sc != NULL; sc = sc->next) {
        if (sc == self || sc->tag != tag)
            continue;
        for (uint32_t i = 0; i < sc->nnodes; i++)
            if (sc->links[i] == l)
                return 1;
    }
    return 0;
}

/* Takes the parent's connection to node i (the node at the same data address): ready, so it
 * counts at once, and measured with the parent. */
static int link_share(span_comm_t *sc, const span_comm_t *pm, uint32_t i)
{
    for (uint32_t p = 0; p < pm->nnodes; p++) {
        span_link_t *l = pm->links[p];
        if (p == pm->me || l == NULL || strcmp(pm->node_addrs[p].tcp, sc->node_addrs[i].tcp) != 0)
            continue;
        if (tag_taken(sc, l, sc->tag)) {
            ERR("NET", "comm %u: its tag bits %#x are taken on the connection to node %u", sc->id,
                sc->tag, i);
            return -EBUSY;
        }
        l->refs++;
        sc->links[i] = l;
        sc->conns[i] = l->conn;
        sc->nready++;
        sc->conn_ready[i] = 1;
        sc->nshared++;
        return 0;
    }
    ERR("NET", "comm %u: the parent has no connection to node %u (%s) to share", sc->id, i,
        sc->node_addrs[i].tcp);
    return -ENOENT;
}

/* A child's connections that its parent already has; the parent's link figures when that is
 * all of them (the same links: measuring them again would only cost time). */
static int links_inherit(span_comm_t *sc, const span_spec_t *sp)
{
    span_comm_t *pc = sp->parent_comm_id != 0 ? env_comm_find(sc->env, sp->parent_comm_id) : NULL;
    int rc;

    if (sp->share == NULL)
        return 0;
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        if (i == sc->me || !sp->share[i])
            continue;
        if (pc == NULL) {
            ERR("NET", "comm %u: its parent comm %u is gone; no connection to share", sc->id,
                sp->parent_comm_id);
            return -ENOENT;
        }
        if ((rc = link_share(sc, pc, i)) != 0)
            return rc;
    }
    if (sp->inherit_links && sc->nshared == sc->nnodes - 1 && pc != NULL && pc->probed) {
        sc->lc = pc->lc;
        sc->probed = 1;
    }
    if (sc->nshared > 0)
        INFO("NET", "comm %u: %u of %u data connections shared with parent comm %u%s", sc->id,
             sc->nshared, sc->nnodes - 1, sp->parent_comm_id,
             sc->probed ? ", and its link figures" : "");
    return 0;
}

/* Connects to every lower node the child does not share a connection with. With
 * HCCL_TRANSPORT=rdma, a pair without RDMA on both ends is an error, not a quiet TCP. */
static int links_connect(span_comm_t *sc)
{
    tp_cm_t *cm = sc->env->cm;
    tp_conn_t *conn;

    for (uint32_t i = 0; i < sc->nnodes; i++)
        if (i != sc->me && tp_cm_choose(cm, &sc->node_addrs[sc->me], &sc->node_addrs[i]) == NULL) {
            ERR("NET", "HCCL_TRANSPORT=rdma, but node %u (%s) has no RDMA data address", i,
                sc->node_addrs[i].tcp);
            return -ENODEV;
        }
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        if (!span_dials(sc, i) || sc->links[i] != NULL)
            continue;
        if (tp_cm_connect(cm, &sc->node_addrs[sc->me], sc->me, &sc->node_addrs[i], i, sc->nnodes,
                          sc->job_id, sc->key, &conn) != 0 ||
            (sc->links[i] = link_new(sc, i, conn)) == NULL)
            return -ECONNREFUSED;
        sc->conns[i] = conn;
        link_mark(sc, conn);
    }
    return 0;
}

int span_comm_new(span_env_t *env, const span_spec_t *sp, const span_qos_t *qos, span_comm_t **sc_p,
                  char *why)
{
    span_comm_t *sc = span_comm_alloc(sp);
    int rc;

    *sc_p = sc;
    if (sc == NULL) {
        snprintf(why, SPAN_WHY_MAX, "no memory");
        return -ENOMEM;
    }
    sc->qos = *qos;
    if (tp_cm_job_claim(env->cm, sc->job_id, sc->key) != 0) {
        span_comm_free(sc);
        *sc_p = NULL;
        snprintf(why, SPAN_WHY_MAX, "no memory");
        return -ENOMEM;
    }
    sc->env = env;
    sc->next = env->comms;
    env->comms = sc;
    if ((rc = place_members(sc, sp)) != 0)
        snprintf(why, SPAN_WHY_MAX, "its ranks' placement does not add up");
    else if ((rc = links_inherit(sc, sp)) != 0)
        snprintf(why, SPAN_WHY_MAX, "cannot share its parent's data connections");
    else if ((rc = links_connect(sc)) != 0)
        snprintf(why, SPAN_WHY_MAX, "cannot open a data connection to another daemon");
    /* Back after a restart: the others know this node by its old data address, and dial it
     * when they come back from a restart of their own. */
    if (rc == 0 && sc->returning == sc->me)
        tp_cm_listen_also(env->cm, sc->node_addrs[sc->me].tcp);
    /* A crash of another node's daemon can be ridden out (rerun.c). A piece that runs again
     * must give the bits its first run gave: with 3 nodes or more that takes the same
     * algorithm (a sum of 3 shares depends on its order), also on a node back from a crash,
     * which has measured nothing. So the choice rests on fixed link figures, as with
     * HCCL_DETERMINISTIC. */
    sc->crash_safe = sc->retry.enabled && sc->nshared == 0;
    if (sc->crash_safe && sc->nnodes > 2 && !sc->deterministic)
        sc->deterministic = ALGO_SRC_RETRY;
    if (rc == 0 && sc->crash_safe &&
        span_plog_init(sc, sc->returning == sc->me ? sp->p2p_next : NULL) != 0) {
        snprintf(why, SPAN_WHY_MAX, "no memory");
        rc = -ENOMEM;
    }
    if (rc == 0)
        span_rerun_expect(sc, sp->coll_below);
    return rc;
}

void span_links_drop(span_comm_t *sc)
{
    span_p2p_again(sc); /* their requests go with the connections */
    span_probe_free(sc);
    span_abort_free(sc);
    span_drain_free(sc);
    span_rerun_free(sc);
    span_plog_drop_again(sc);
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        link_put(sc->env, sc->links[i]);
        sc->links[i] = NULL;
        sc->conns[i] = NULL;
        sc->conn_ready[i] = 0;
    }
    sc->nready = 0;
    sc->probed = 0;
    sc->ready_by_ns = UINT64_MAX;
}

void span_respan(span_comm_t *sc, uint32_t returning)
{
    tp_conn_t **early = sc->early;

    carry_out(sc);
    span_p2p_again(sc); /* those done first: counted below */
    span_plog_respan(sc, (const tp_msg_t *const *)sc->carry);
    span_links_drop(sc);
    sc->started = 0;
    sc->lc = algo_cost_fixed();
    for (int k = 0; k < DESC_KIND_MAX; k++)
        for (int b = 0; b < 64; b++)
            sc->picks[k][b].algo = -1;
    sc->returning = returning;
    sc->respan_ns = now_ns();
    sc->ready_by_ns = sc->respan_ns + sc->retry.hold_ms * 1000000ull;
    sc->early = NULL;
    if (links_connect(sc) != 0)
        span_break(sc, HCCL_E_REMOTE, "cannot open a data connection to another daemon again");
    for (uint32_t i = 0; early != NULL && i < sc->nnodes; i++)
        if (early[i] != NULL && span_link_take(sc, i, early[i]) != 0)
            tp_close(early[i]);
    free(early);
    span_rerun_expect(sc, 0);
}

uint32_t span_links(const span_comm_t *sc, char (*addrs)[SPAN_ADDR_MAX], uint32_t max)
{
    uint32_t n = 0;

    /* Only a comm whose links are all up and measured: what a child takes from it then is
     * the same on every daemon (the split's allgather ran over it). */
    if (!sc->probed || sc->nready != sc->nnodes - 1)
        return 0;
    for (uint32_t i = 0; i < sc->nnodes && n < max; i++)
        if (i != sc->me && sc->conns[i] != NULL && tp_conn_state(sc->conns[i]) == 1)
            snprintf(addrs[n++], SPAN_ADDR_MAX, "%s", sc->node_addrs[i].tcp);
    return n;
}

void span_env_links(span_env_t *env, link_view_fn fn, void *ctx)
{
    uint64_t walk = ++env->link_walks;
    link_view_t v;

    for (span_comm_t *sc = env->comms; sc != NULL; sc = sc->next)
        for (uint32_t i = 0; i < sc->nnodes; i++) {
            span_link_t *l = sc->links != NULL ? sc->links[i] : NULL;
            if (i == sc->me || l == NULL || (i < sc->me && !sc->conn_ready[i]) || l->walked == walk)
                continue;
            l->walked = walk;
            link_view(l, &v);
            fn(ctx, &v);
        }
    for (uint32_t k = 0; k < env->nclosed; k++)
        fn(ctx, &env->closed[k]);
    env->nclosed = 0;
}
