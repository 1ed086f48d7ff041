/*
 * The member side of a job whose root is another daemon: our ranks' joins travel over one
 * authenticated connection to the root daemon, which answers with the membership once every
 * rank of the job joined (or with the reason it never will). An agreed job (computed by the
 * ranks, not issued by the root daemon) is opened at the root by its first local rank; until
 * then the root refuses the handshake as "unknown job" and we retry until the join timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hccl/hccl.h"
#include "log.h"
#include "rootinfo.h"
#include "server/server.h"

typedef struct rjoin {
    session_t *s; /* NULL once its process left */
    uint64_t req_id;
    uint32_t rank;
    int has_parent; /* a split's child: its parent's job id follows */
    uint8_t parent[SHARE_JOB_BYTES];
    char notice[256]; /* a warning its answer carries */
    lane_offer_t lane;
} rjoin_t;

struct rjob {
    server_t *srv;
    uint8_t id[ROOTINFO_ID_BYTES];
    uint8_t key[ROOTINFO_KEY_BYTES];
    char hex[33];
    char root[PEER_ADDR_MAX];
    uint32_t nranks;
    algo_want_t want; /* the first local rank's level-1 settings */
    int log_ops;      /* a local rank runs at HCCL_DEBUG=INFO */
    peer_t *link;     /* to the root daemon */
    int ready;        /* link authenticated: joins go out at once */
    rjoin_t *joins;
    uint32_t njoins, cap;
    uv_timer_t timer; /* the root never answering still ends in an answer */
    int agreed;       /* the root opens the job when its first rank joins: retry until then */
    uint64_t deadline_ms;
    uint32_t timeout_s; /* HCCL_CONNECT_TIMEOUT */
    uint32_t attempts;
    uv_timer_t retry;
    int handles_open;
    rjob_t *next;
};

#define RJOB_RETRY_MS 150

static rjob_t *rjob_find(server_t *srv, const uint8_t *id)
{
    for (rjob_t *r = srv->rjobs; r != NULL; r = r->next)
        if (memcmp(r->id, id, sizeof(r->id)) == 0)
            return r;
    return NULL;
}

int rjobs_key_for(server_t *srv, const uint8_t *job_id, uint8_t *key)
{
    rjob_t *r = rjob_find(srv, job_id);

    if (r == NULL)
        return -1;
    memcpy(key, r->key, sizeof(r->key));
    return 0;
}

static void rjob_freed(uv_handle_t *h)
{
    rjob_t *r = h->data;

    if (--r->handles_open > 0)
        return;
    for (uint32_t i = 0; i < r->njoins; i++)
        lane_offer_close(&r->joins[i].lane);
    free(r->joins);
    free(r);
}

static void rjob_free(rjob_t *r)
{
    for (rjob_t **pp = &r->srv->rjobs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    if (r->link != NULL) {
        peer_t *l = r->link;
        r->link = NULL;
        l->user = NULL;
        peer_close(l);
    }
    uv_close((uv_handle_t *)&r->timer, rjob_freed);
    uv_close((uv_handle_t *)&r->retry, rjob_freed);
}

/* Answers every local rank with an error and forgets the job. */
static void rjob_fail(rjob_t *r, HcclResult result, const char *why)
{
    ERR("INIT", "job %s (root %s): %s", r->hex, r->root, why);
    for (uint32_t i = 0; i < r->njoins; i++)
        if (r->joins[i].s != NULL)
            send_init_resp(r->joins[i].s, r->joins[i].req_id, result, why, 0, r->nranks,
                           r->joins[i].rank, 0);
    rjob_free(r);
}

static void send_join(rjob_t *r, const rjoin_t *j)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__JoinReq req = HCCLD__JOIN_REQ__INIT;

    req.nranks = r->nranks;
    req.rank = j->rank;
    req.pid = (uint32_t)j->s->pid;
    req.data_addr = r->srv->data_addr;
    req.rdma_addr = r->srv->rdma_addr;
    req.lane_addr = (char *)j->lane.addr;
    req.direct_max = j->lane.direct_max;
    /* A split's child: tell the root which daemons our copy of the parent is connected to. */
    share_word_t w = {0};
    if (j->has_parent && share_word(r->srv, j->parent, j->s->sid, &w) == 0 && w.parent != NULL) {
        req.parent_job_id.data = (uint8_t *)w.parent;
        req.parent_job_id.len = SHARE_JOB_BYTES;
        req.n_linked = w.n;
        req.linked = (char **)w.ptrs;
    }
    m.body_case = HCCLD__MSG__BODY_JOIN_REQ;
    m.join_req = &req;
    peer_send(r->link, &m);
    share_word_free(&w);
}

static void on_link_ready(peer_t *p, HcclResult result);

static int rjob_connect(rjob_t *r)
{
    uint64_t now = uv_now(r->srv->loop);
    uint64_t left = r->deadline_ms > now ? r->deadline_ms - now : 1;

    r->attempts++;
    r->link = peer_connect(r->srv, r->root, r->id, r->key, (unsigned)left, on_link_ready, r);
    if (r->link != NULL)
        r->link->agreed = r->agreed;
    return r->link != NULL ? 0 : -1;
}

static void on_retry(uv_timer_t *t)
{
    rjob_t *r = t->data;

    if (rjob_connect(r) != 0)
        rjob_fail(r, HCCL_E_PARA, "the root info names an unusable root address");
}

/* The root daemon does not know the agreed job yet: ask again shortly, until the deadline. */
static void rjob_retry(rjob_t *r)
{
    char why[PEER_ADDR_MAX + 160];

    if (uv_now(r->srv->loop) + RJOB_RETRY_MS >= r->deadline_ms) {
        snprintf(why, sizeof(why),
                 "the root daemon %s never opened the job: no rank on it joined within "
                 "HCCL_CONNECT_TIMEOUT (%u attempts)",
                 r->root, r->attempts);
        rjob_fail(r, HCCL_E_TIMEOUT, why);
        return;
    }
    DBG("INIT",
        "job %s: the root daemon %s does not know it yet (no rank there joined); "
        "retrying in %d ms",
        r->hex, r->root, RJOB_RETRY_MS);
    uv_timer_start(&r->retry, on_retry, RJOB_RETRY_MS, 0);
}

static void on_link_ready(peer_t *p, HcclResult result)
{
    rjob_t *r = p->user;

    if (r == NULL)
        return;
    if (result != HCCL_SUCCESS) {
        r->link = NULL; /* peer_close frees it */
        if (result == HCCL_E_NOT_FOUND && r->agreed)
            rjob_retry(r);
        else if (result == HCCL_E_NOT_FOUND)
            rjob_fail(r, HCCL_E_NOT_FOUND,
                      "the root daemon does not know this root info (expired or already used)");
        else
            rjob_fail(r, HCCL_E_TCP_CONNECT, "cannot reach or authenticate with the root daemon");
        return;
    }
    r->ready = 1;
    /* Refreshed here: an agreed job may wait long for its root, the expectation ages. */
    engine_job_expect(r->srv->eng, r->id, r->key);
    p->on_msg = jobs_peer_msg;
    p->on_gone = jobs_peer_gone;
    for (uint32_t i = 0; i < r->njoins; i++)
        if (r->joins[i].s != NULL)
            send_join(r, &r->joins[i]);
}

static void on_rjob_timeout(uv_timer_t *t)
{
    rjob_fail(t->data, HCCL_E_TIMEOUT, "no membership from the root daemon in time");
}

static rjob_t *rjob_open(server_t *srv, const Hccld__CommInitReq *req, const algo_want_t *want)
{
    rjob_t *r = calloc(1, sizeof(*r));
    uint32_t timeout_s = req->timeout_s ? req->timeout_s : 120;

    if (r == NULL)
        return NULL;
    r->srv = srv;
    memcpy(r->id, req->info->job_id.data, sizeof(r->id));
    memcpy(r->key, req->info->job_key.data, sizeof(r->key));
    hex_encode(r->id, sizeof(r->id), r->hex);
    snprintf(r->root, sizeof(r->root), "%s", req->info->root_addr);
    r->nranks = req->nranks;
    r->agreed = req->agreed;
    r->want = *want;
    uv_timer_init(srv->loop, &r->timer);
    uv_timer_init(srv->loop, &r->retry);
    r->handles_open = 2;
    r->timer.data = r->retry.data = r;
    uv_timer_start(&r->timer, on_rjob_timeout, (uint64_t)timeout_s * 1000 + 2000, 0);
    r->deadline_ms = uv_now(srv->loop) + (uint64_t)timeout_s * 1000;
    r->timeout_s = timeout_s;
    r->next = srv->rjobs;
    srv->rjobs = r;
    engine_job_expect(srv->eng, r->id, r->key);
    if (rjob_connect(r) != 0) {
        rjob_fail(r, HCCL_E_PARA, "the root info names an unusable root address");
        return NULL;
    }
    return r;
}

void rjobs_join(server_t *srv, session_t *s, uint64_t req_id, const Hccld__CommInitReq *req)
{
    rjob_t *r = rjob_find(srv, req->info->job_id.data);
    char err[160], notice[256];
    algo_want_t want;

    if (algo_check(&want, req->algo, req->algorithm, req->algo_by_config, req->deterministic, err,
                   sizeof(err), notice, sizeof(notice)) != 0) {
        send_init_resp(s, req_id, HCCL_E_PARA, err, 0, req->nranks, req->rank, 0);
        return;
    }
    if (srv->advertised[0] == '\0') {
        send_init_resp(s, req_id, HCCL_E_NOT_SUPPORT,
                       "this daemon does not listen for peers (--listen)", 0, req->nranks,
                       req->rank, 0);
        return;
    }
    if (r == NULL && (r = rjob_open(srv, req, &want)) == NULL)
        return;
    if (r->njoins == r->cap) {
        uint32_t cap = r->cap ? 2 * r->cap : 4;
        rjoin_t *v = realloc(r->joins, cap * sizeof(*v));
        if (v == NULL) {
            send_init_resp(s, req_id, HCCL_E_MEMORY, "out of memory", 0, req->nranks, req->rank, 0);
            return;
        }
        r->joins = v;
        r->cap = cap;
    }
    r->joins[r->njoins] = (rjoin_t){.s = s,
                                    .req_id = req_id,
                                    .rank = req->rank,
                                    .lane = lane_offer_make(srv->data_addr, req->direct_max)};
    snprintf(r->joins[r->njoins].notice, sizeof(r->joins[r->njoins].notice), "%s", notice);
    if (req->parent_job_id.len == SHARE_JOB_BYTES) {
        r->joins[r->njoins].has_parent = 1;
        memcpy(r->joins[r->njoins].parent, req->parent_job_id.data, SHARE_JOB_BYTES);
    }
    r->log_ops |= req->log_ops;
    if (r->ready)
        send_join(r, &r->joins[r->njoins]);
    r->njoins++;
}

static rjob_t *rjob_by_link(server_t *srv, peer_t *p)
{
    for (rjob_t *r = srv->rjobs; r != NULL; r = r->next)
        if (r->link == p)
            return r;
    return NULL;
}

/* The class the root daemon decided, as this daemon knows it (its default if unknown here). */
static int membership_class(server_t *srv, const Hccld__Membership *m)
{
    int cls = qos_class_find(&srv->qos, m->qos_class);

    if (cls >= 0)
        return cls;
    WARN("QOS",
         "the root daemon put a comm in class '%s', which this daemon does not define; "
         "using %s",
         m->qos_class, srv->qos.cls[srv->qos.default_cls].name);
    return srv->qos.default_cls;
}

void rjobs_membership(server_t *srv, peer_t *p, const Hccld__Membership *m)
{
    rjob_t *r = rjob_by_link(srv, p);
    scomm_t *c;

    if (r == NULL)
        return;
    if (m->result != HCCL_SUCCESS) {
        rjob_fail(r, m->result, m->message);
        return;
    }
    /* An older root says nothing of the piece size: it used 1 MiB. */
    uint64_t chunk = m->chunk_bytes != 0 ? m->chunk_bytes : 1u << 20;
    if (m->nranks != r->nranks || m->n_rank_node != m->nranks || chunk < 4096 ||
        chunk > (64ull << 20)) {
        rjob_fail(r, HCCL_E_INTERNAL, "malformed membership from the root daemon");
        return;
    }
    c = scomm_add(srv, m->nranks, (uint32_t)m->n_nodes, r->hex);
    for (uint32_t i = 0; c != NULL && i < r->njoins; i++)
        if (r->joins[i].s != NULL && r->joins[i].rank < c->nranks) {
            c->sids[r->joins[i].rank] = r->joins[i].s->sid;
            c->nlocal++;
        }
    const char *why = "out of memory";
    HcclResult result = HCCL_E_MEMORY;
    share_plan_t plan = {.parent = m->parent_job_id.data,
                         .pairs = m->shared_pairs,
                         .npairs = (uint32_t)(m->n_shared_pairs / 2)};
    if (m->parent_job_id.len != SHARE_JOB_BYTES || m->n_shared_pairs % 2 != 0)
        plan.npairs = 0;
    /* An older root sends no RDMA addresses: TCP everywhere. */
    const char *const *rdma_nodes =
        m->n_rdma_nodes == m->n_nodes ? (const char *const *)m->rdma_nodes : NULL;
    if (c != NULL && m->n_data_nodes == m->n_nodes)
        result = multinode_engine_comm(srv, c, (const char *const *)m->data_nodes, m->rank_node,
                                       (uint32_t)m->n_nodes, r->id, r->key,
                                       &(multinode_opts_t){.want = &r->want,
                                                           .log_ops = r->log_ops,
                                                           .qos_class = membership_class(srv, m),
                                                           .plan = &plan,
                                                           .rdma_nodes = rdma_nodes,
                                                           .nodes = (const char *const *)m->nodes,
                                                           .connect_timeout_s = r->timeout_s},
                                       &why);
    /* An older root sends no lane addresses: no lanes. */
    lanes_info_t lanes = {.addrs = (const char *const *)m->lane_addrs,
                          .direct_max = m->n_lane_addrs == m->nranks ? m->direct_max : 0,
                          .key = r->key};
    INFO("INIT", "job %s: comm %u formed with %u ranks on %zu daemons (root %s)", r->hex,
         c ? c->id : 0, m->nranks, m->n_nodes, r->root);
    for (uint32_t i = 0; i < r->njoins; i++)
        if (r->joins[i].s != NULL && result == HCCL_SUCCESS)
            send_multinode_resp(r->joins[i].s, r->joins[i].req_id, c, r->joins[i].rank,
                                (uint32_t)m->n_nodes, chunk, r->joins[i].notice, &r->joins[i].lane,
                                &lanes);
        else if (r->joins[i].s != NULL)
            send_init_resp(r->joins[i].s, r->joins[i].req_id, result, why, 0, m->nranks,
                           r->joins[i].rank, 0);
    rjob_free(r);
}

int rjobs_link_gone(server_t *srv, peer_t *p)
{
    rjob_t *r = rjob_by_link(srv, p);

    if (r == NULL)
        return 0;
    r->link = NULL;
    rjob_fail(r, HCCL_E_REMOTE, "lost the connection to the root daemon");
    return 1;
}

void rjobs_session_gone(server_t *srv, session_t *s)
{
    for (rjob_t *r = srv->rjobs; r != NULL; r = r->next)
        for (uint32_t i = 0; i < r->njoins; i++)
            if (r->joins[i].s == s) {
                r->joins[i].s = NULL;
                lane_offer_close(&r->joins[i].lane);
            }
}

void rjobs_stop(server_t *srv)
{
    while (srv->rjobs != NULL)
        rjob_fail(srv->rjobs, HCCL_E_REMOTE, "the daemon is shutting down");
}
