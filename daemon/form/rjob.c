/*
 * The member side of a job whose root is another daemon: our ranks' joins travel over one
 * authenticated link to the root daemon, which answers with the membership once every rank of
 * the job joined (or with the reason it never will). An agreed job (computed by the ranks, not
 * issued by the root daemon) is opened at the root by its first local rank; until then the root
 * refuses the handshake as "unknown job" and we retry until the join timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "form/form_int.h"
#include "log.h"
#include "rootinfo.h"

typedef struct rjoin {
    const form_client_t *c; /* NULL once its process left */
    uint64_t req_id;
    uint32_t rank;
    int has_parent; /* a split's child: its parent's job id follows */
    uint8_t parent[SHARE_JOB_BYTES];
    char notice[256]; /* a warning its answer carries */
    lane_offer_t lane;
} rjoin_t;

struct rjob {
    uint8_t id[ROOTINFO_ID_BYTES];
    uint8_t key[ROOTINFO_KEY_BYTES];
    char hex[FORM_JOB_HEX];
    char root[FORM_ADDR_MAX];
    uint32_t nranks;
    form_level1_t want; /* the first local rank's level-1 settings */
    int log_ops;        /* a local rank runs at HCCL_DEBUG=INFO */
    void *link;         /* to the root daemon */
    int ready;          /* link authenticated: joins go out at once */
    rjoin_t *joins;
    uint32_t njoins, cap;
    int agreed;         /* the root opens the job when its first rank joins: retry until then */
    uint64_t deadline;  /* ms: no more connection attempts after it */
    uint64_t give_up;   /* ms: the root never answering still ends in an answer */
    uint64_t retry_at;  /* ms: the next connection attempt, FORM_NEVER: none pending */
    uint32_t timeout_s; /* HCCL_CONNECT_TIMEOUT */
    uint32_t attempts;
    rjob_t *next;
};

#define RJOB_RETRY_MS 150

static rjob_t *rjob_find(const form_t *f, const uint8_t *id)
{
    for (rjob_t *r = f->rjobs; r != NULL; r = r->next)
        if (memcmp(r->id, id, sizeof(r->id)) == 0)
            return r;
    return NULL;
}

int form_rjobs_key_for(const form_t *f, const uint8_t *job_id, uint8_t *key)
{
    rjob_t *r = rjob_find(f, job_id);

    if (r == NULL)
        return -1;
    memcpy(key, r->key, sizeof(r->key));
    return 0;
}

static void rjob_free(form_t *f, rjob_t *r)
{
    for (rjob_t **pp = &f->rjobs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    if (r->link != NULL)
        f->ops->peer_close(f->ctx, r->link);
    for (uint32_t i = 0; i < r->njoins; i++)
        lane_offer_close(&r->joins[i].lane);
    free(r->joins);
    free(r);
}

/* Answers every local rank with an error and forgets the job. */
static void rjob_fail(form_t *f, rjob_t *r, HcclResult result, const char *why)
{
    ERR("INIT", "job %s (root %s): %s", r->hex, r->root, why);
    for (uint32_t i = 0; i < r->njoins; i++)
        if (r->joins[i].c != NULL)
            form_answer_result(f, r->joins[i].c, r->joins[i].req_id, result, why, r->nranks,
                               r->joins[i].rank);
    rjob_free(f, r);
}

static void send_join(form_t *f, rjob_t *r, const rjoin_t *j)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__JoinReq req = HCCLD__JOIN_REQ__INIT;

    req.nranks = r->nranks;
    req.rank = j->rank;
    req.pid = (uint32_t)j->c->pid;
    req.data_addr = (char *)f->env.data_addr;
    req.rdma_addr = (char *)f->env.rdma_addr;
    req.lane_addr = (char *)j->lane.addr;
    req.direct_max = j->lane.direct_max;
    /* A split's child: tell the root which daemons our copy of the parent is connected to. */
    share_word_t w = {0};
    if (j->has_parent && share_word(f, j->parent, j->c->sid, &w) == 0 && w.parent != NULL) {
        req.parent_job_id.data = (uint8_t *)w.parent;
        req.parent_job_id.len = SHARE_JOB_BYTES;
        req.n_linked = w.n;
        req.linked = (char **)w.ptrs;
    }
    m.body_case = HCCLD__MSG__BODY_JOIN_REQ;
    m.join_req = &req;
    f->ops->peer_send(f->ctx, r->link, &m);
    share_word_free(&w);
}

static int rjob_connect(form_t *f, rjob_t *r, uint64_t now)
{
    uint64_t left = r->deadline > now ? r->deadline - now : 1;

    r->attempts++;
    r->retry_at = FORM_NEVER;
    r->link = f->ops->peer_connect(f->ctx, r->root, r->id, r->key, (unsigned)left, r->agreed);
    return r->link != NULL ? 0 : -1;
}

/* The root daemon does not know the agreed job yet: ask again shortly, until the deadline. */
static void rjob_retry(form_t *f, rjob_t *r, uint64_t now)
{
    char why[FORM_ADDR_MAX + 160];

    if (now + RJOB_RETRY_MS >= r->deadline) {
        snprintf(why, sizeof(why),
                 "the root daemon %s never opened the job: no rank on it joined within "
                 "HCCL_CONNECT_TIMEOUT (%u attempts)",
                 r->root, r->attempts);
        rjob_fail(f, r, HCCL_E_TIMEOUT, why);
        return;
    }
    DBG("INIT",
        "job %s: the root daemon %s does not know it yet (no rank there joined); "
        "retrying in %d ms",
        r->hex, r->root, RJOB_RETRY_MS);
    r->retry_at = now + RJOB_RETRY_MS;
}

static rjob_t *rjob_by_link(const form_t *f, const void *link)
{
    for (rjob_t *r = f->rjobs; r != NULL; r = r->next)
        if (link != NULL && r->link == link)
            return r;
    return NULL;
}

void form_rjobs_link_ready(form_t *f, void *link, HcclResult result, uint64_t now)
{
    rjob_t *r = rjob_by_link(f, link);

    if (r == NULL)
        return;
    if (result != HCCL_SUCCESS) {
        r->link = NULL; /* the server closes it */
        if (result == HCCL_E_NOT_FOUND && r->agreed)
            rjob_retry(f, r, now);
        else if (result == HCCL_E_NOT_FOUND)
            rjob_fail(f, r, HCCL_E_NOT_FOUND,
                      "the root daemon does not know this root info (expired or already used)");
        else
            rjob_fail(f, r, HCCL_E_TCP_CONNECT,
                      "cannot reach or authenticate with the root daemon");
        return;
    }
    r->ready = 1;
    /* Refreshed here: an agreed job may wait long for its root, the expectation ages. */
    engine_job_expect(f->env.eng, r->id, r->key);
    for (uint32_t i = 0; i < r->njoins; i++)
        if (r->joins[i].c != NULL)
            send_join(f, r, &r->joins[i]);
}

static rjob_t *rjob_open(form_t *f, const Hccld__CommInitReq *req, const form_level1_t *want,
                         uint64_t now)
{
    rjob_t *r = calloc(1, sizeof(*r));
    uint32_t timeout_s = req->timeout_s ? req->timeout_s : FORM_DEFAULT_TIMEOUT_S;

    if (r == NULL)
        return NULL;
    memcpy(r->id, req->info->job_id.data, sizeof(r->id));
    memcpy(r->key, req->info->job_key.data, sizeof(r->key));
    hex_encode(r->id, sizeof(r->id), r->hex);
    snprintf(r->root, sizeof(r->root), "%s", req->info->root_addr);
    r->nranks = req->nranks;
    r->agreed = req->agreed;
    r->want = *want;
    r->deadline = now + (uint64_t)timeout_s * 1000;
    r->give_up = r->deadline + 2000;
    r->timeout_s = timeout_s;
    r->next = f->rjobs;
    f->rjobs = r;
    engine_job_expect(f->env.eng, r->id, r->key);
    if (rjob_connect(f, r, now) != 0) {
        rjob_fail(f, r, HCCL_E_PARA, "the root info names an unusable root address");
        return NULL;
    }
    return r;
}

void form_rjob_join(form_t *f, const form_client_t *c, uint64_t req_id,
                    const Hccld__CommInitReq *req, uint64_t now)
{
    rjob_t *r = rjob_find(f, req->info->job_id.data);
    char err[160], notice[256];
    form_level1_t want;

    if (form_level1_take(&want, req->algo, req->algorithm, req->algo_by_config, req->deterministic,
                         err, sizeof(err), notice, sizeof(notice)) != 0) {
        form_answer_result(f, c, req_id, HCCL_E_PARA, err, req->nranks, req->rank);
        return;
    }
    if (f->env.advertised[0] == '\0') {
        form_answer_result(f, c, req_id, HCCL_E_NOT_SUPPORT,
                           "this daemon does not listen for peers (--listen)", req->nranks,
                           req->rank);
        return;
    }
    if (r == NULL && (r = rjob_open(f, req, &want, now)) == NULL)
        return;
    if (r->njoins == r->cap) {
        uint32_t cap = r->cap ? 2 * r->cap : 4;
        rjoin_t *v = realloc(r->joins, cap * sizeof(*v));
        if (v == NULL) {
            form_answer_result(f, c, req_id, HCCL_E_MEMORY, "out of memory", req->nranks,
                               req->rank);
            return;
        }
        r->joins = v;
        r->cap = cap;
    }
    rjoin_t *j = &r->joins[r->njoins];
    *j = (rjoin_t){.c = c,
                   .req_id = req_id,
                   .rank = req->rank,
                   .lane = lane_offer_make(f->env.data_addr, req->direct_max)};
    snprintf(j->notice, sizeof(j->notice), "%s", notice);
    if (req->parent_job_id.len == SHARE_JOB_BYTES) {
        j->has_parent = 1;
        memcpy(j->parent, req->parent_job_id.data, SHARE_JOB_BYTES);
    }
    r->log_ops |= req->log_ops;
    if (r->ready)
        send_join(f, r, j);
    r->njoins++;
}

int form_membership_class(const form_t *f, const Hccld__Membership *m)
{
    const qos_policy_t *q = f->env.qos;
    int cls = qos_class_find(q, m->qos_class);

    if (cls >= 0)
        return cls;
    WARN("QOS",
         "the root daemon put a comm in class '%s', which this daemon does not define; "
         "using %s",
         m->qos_class, q->cls[q->default_cls].name);
    return q->default_cls;
}

/* Our part of the comm the membership describes: HCCL_SUCCESS with *cp, or why not. */
static HcclResult rjob_own_part(form_t *f, rjob_t *r, const Hccld__Membership *m, form_comm_t **cp,
                                const char **why)
{
    form_comm_t *c = form_comm_add(f, m->nranks, (uint32_t)m->n_nodes, r->hex);
    share_plan_t plan = {.parent = m->parent_job_id.data,
                         .pairs = m->shared_pairs,
                         .npairs = (uint32_t)(m->n_shared_pairs / 2)};

    *cp = c;
    *why = "out of memory";
    if (c == NULL)
        return HCCL_E_MEMORY;
    for (uint32_t i = 0; i < r->njoins; i++)
        if (r->joins[i].c != NULL && r->joins[i].rank < c->nranks) {
            c->sids[r->joins[i].rank] = r->joins[i].c->sid;
            c->nlocal++;
        }
    if (m->parent_job_id.len != SHARE_JOB_BYTES || m->n_shared_pairs % 2 != 0)
        plan.npairs = 0;
    if (m->n_data_nodes != m->n_nodes) {
        *why = "malformed membership from the root daemon";
        return HCCL_E_INTERNAL;
    }
    form_retry_t retry;
    form_retry_get(&retry, m);
    /* An older root sends no RDMA addresses: TCP everywhere. */
    const char *const *rdma_nodes =
        m->n_rdma_nodes == m->n_nodes ? (const char *const *)m->rdma_nodes : NULL;
    return form_comm_multinode(f, c, (const char *const *)m->data_nodes, m->rank_node,
                               (uint32_t)m->n_nodes, r->id, r->key,
                               &(multinode_opts_t){.want = &r->want,
                                                   .log_ops = r->log_ops,
                                                   .qos_class = form_membership_class(f, m),
                                                   .plan = &plan,
                                                   .rdma_nodes = rdma_nodes,
                                                   .nodes = (const char *const *)m->nodes,
                                                   .connect_timeout_s = r->timeout_s,
                                                   .retry = &retry},
                               why);
}

void form_rjobs_membership(form_t *f, void *link, const Hccld__Membership *m)
{
    rjob_t *r = rjob_by_link(f, link);
    form_comm_t *c = NULL;
    const char *why;

    if (r == NULL)
        return;
    if (m->result != HCCL_SUCCESS) {
        rjob_fail(f, r, m->result, m->message);
        return;
    }
    /* An older root says nothing of the piece size: it used 1 MiB. */
    uint64_t chunk = m->chunk_bytes != 0 ? m->chunk_bytes : 1u << 20;
    if (m->nranks != r->nranks || m->n_rank_node != m->nranks || chunk < 4096 ||
        chunk > (64ull << 20)) {
        rjob_fail(f, r, HCCL_E_INTERNAL, "malformed membership from the root daemon");
        return;
    }
    HcclResult result = rjob_own_part(f, r, m, &c, &why);
    if (result != HCCL_SUCCESS) {
        if (c != NULL)
            form_comm_drop(f, c);
        rjob_fail(f, r, result, why);
        return;
    }
    /* An older root sends no lane addresses: no lanes. */
    lanes_info_t lanes = {.addrs = (const char *const *)m->lane_addrs,
                          .direct_max = m->n_lane_addrs == m->nranks ? m->direct_max : 0,
                          .key = r->key};
    INFO("INIT", "job %s: comm %u formed with %u ranks on %zu daemons (root %s)", r->hex, c->id,
         m->nranks, m->n_nodes, r->root);
    for (uint32_t i = 0; i < r->njoins; i++)
        if (r->joins[i].c != NULL)
            form_answer_multinode(f, r->joins[i].c, r->joins[i].req_id, c, r->joins[i].rank, chunk,
                                  r->joins[i].notice, &r->joins[i].lane, &lanes);
    form_comm_step(c, COMM_EV_FORMED);
    f->ops->comm_formed(f->ctx, c);
    rjob_free(f, r);
}

int form_rjobs_link_gone(form_t *f, void *link)
{
    rjob_t *r = rjob_by_link(f, link);

    if (r == NULL)
        return 0;
    r->link = NULL;
    rjob_fail(f, r, HCCL_E_REMOTE, "lost the connection to the root daemon");
    return 1;
}

void form_rjobs_client_gone(form_t *f, const form_client_t *c)
{
    for (rjob_t *r = f->rjobs; r != NULL; r = r->next)
        for (uint32_t i = 0; i < r->njoins; i++)
            if (r->joins[i].c == c) {
                r->joins[i].c = NULL;
                lane_offer_close(&r->joins[i].lane);
            }
}

void form_rjobs_stop(form_t *f)
{
    while (f->rjobs != NULL)
        rjob_fail(f, f->rjobs, HCCL_E_REMOTE, "the daemon is shutting down");
}

uint64_t form_rjobs_deadline(const form_t *f)
{
    uint64_t d = FORM_NEVER;

    for (const rjob_t *r = f->rjobs; r != NULL; r = r->next) {
        d = r->give_up < d ? r->give_up : d;
        d = r->retry_at < d ? r->retry_at : d;
    }
    return d;
}

void form_rjobs_expire(form_t *f, uint64_t now)
{
    for (rjob_t *r = f->rjobs, *next; r != NULL; r = next) {
        next = r->next;
        if (r->give_up <= now)
            rjob_fail(f, r, HCCL_E_TIMEOUT, "no membership from the root daemon in time");
        else if (r->retry_at <= now && rjob_connect(f, r, now) != 0)
            rjob_fail(f, r, HCCL_E_PARA, "the root info names an unusable root address");
    }
}
