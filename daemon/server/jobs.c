/*
 * Jobs. HcclGetRootInfo opens a job (random id and key); ranks join it with
 * HcclCommInitRootInfo; when all nranks joined, the communicator forms (scomm.c; across
 * daemons, after the root sent every daemon the membership) and every rank gets its answer. A
 * job that does not fill up within its timeout fails every joined rank with HCCL_E_TIMEOUT,
 * naming the ranks that never arrived.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "algo/algo_env.h"
#include "env.h"
#include "hccl/hccl.h"
#include "log.h"
#include "rootinfo.h"
#include "sched/engine.h"
#include "server/events.h"
#include "server/server.h"
#include "text.h"

_Static_assert(SERVER_MAX_RANKS <= ENGINE_RANK_MAX, "a comm's ranks fit the engine's");

struct job {
    server_t *srv;
    uint8_t id[ROOTINFO_ID_BYTES];
    uint8_t key[ROOTINFO_KEY_BYTES];
    char hex[33];
    uint32_t nranks; /* 0 until the first rank joins */
    uint32_t joined;
    join_t *ranks;
    uv_timer_t timer;
    uint32_t timeout_s; /* HCCL_CONNECT_TIMEOUT of the rank that opened it */
    job_t *next;
};

static void job_unlink(server_t *srv, job_t *j)
{
    for (job_t **pp = &srv->jobs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            return;
        }
}

static void job_freed(uv_handle_t *h)
{
    job_t *j = h->data;

    for (uint32_t r = 0; j->ranks != NULL && r < j->nranks; r++)
        lane_offer_close(&j->ranks[r].lane);
    free(j->ranks);
    free(j);
}

static void job_free(job_t *j)
{
    job_unlink(j->srv, j);
    uv_close((uv_handle_t *)&j->timer, job_freed);
}

static void missing_ranks(const job_t *j, char *buf, size_t cap)
{
    size_t n = 0;
    uint32_t shown = 0;

    buf[0] = '\0';
    for (uint32_t r = 0; r < j->nranks && n + 16 < cap; r++)
        if (j->ranks[r].s == NULL && j->ranks[r].p == NULL) {
            text_add(buf, cap, &n, "%s%u", shown ? "," : "", r);
            if (++shown == 32 && r + 1 < j->nranks) {
                text_add(buf, cap, &n, ",...");
                break;
            }
        }
}

static void on_job_timeout(uv_timer_t *t)
{
    job_t *j = t->data;
    char missing[256], why[320];

    if (j->nranks == 0) {
        INFO("INIT", "job %s: root info expired unused", j->hex);
    } else {
        missing_ranks(j, missing, sizeof(missing));
        snprintf(why, sizeof(why), "timed out: %u of %u ranks joined; never arrived: %s", j->joined,
                 j->nranks, missing);
        ERR("INIT", "job %s: %s", j->hex, why);
        Hccld__Msg m = HCCLD__MSG__INIT;
        Hccld__Membership mb = HCCLD__MEMBERSHIP__INIT;
        mb.result = HCCL_E_TIMEOUT;
        mb.message = why;
        m.body_case = HCCLD__MSG__BODY_MEMBERSHIP;
        m.membership = &mb;
        for (uint32_t r = 0; r < j->nranks; r++) {
            if (j->ranks[r].s != NULL)
                send_init_resp(j->ranks[r].s, j->ranks[r].req_id, HCCL_E_TIMEOUT, why, 0, j->nranks,
                               r, 0);
            else if (j->ranks[r].p != NULL)
                peer_send(j->ranks[r].p, &m); /* the member daemon answers its ranks once */
        }
    }
    job_free(j);
}

/* A job open for joins for timeout_s (0: 120) seconds. */
static job_t *job_open(server_t *srv, const uint8_t *id, const uint8_t *key, uint32_t timeout_s)
{
    job_t *j = calloc(1, sizeof(*j));

    if (j == NULL)
        return NULL;
    j->srv = srv;
    memcpy(j->id, id, sizeof(j->id));
    memcpy(j->key, key, sizeof(j->key));
    hex_encode(j->id, sizeof(j->id), j->hex);
    j->timeout_s = timeout_s ? timeout_s : 120;
    uv_timer_init(srv->loop, &j->timer);
    j->timer.data = j;
    uv_timer_start(&j->timer, on_job_timeout, (uint64_t)j->timeout_s * 1000, 0);
    j->next = srv->jobs;
    srv->jobs = j;
    return j;
}

void jobs_root_info(server_t *srv, session_t *s, uint64_t req_id, const Hccld__RootInfoReq *req)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__RootInfoResp resp = HCCLD__ROOT_INFO_RESP__INIT;
    Hccld__RootInfo ri = HCCLD__ROOT_INFO__INIT;
    uint8_t id[ROOTINFO_ID_BYTES], key[ROOTINFO_KEY_BYTES];
    uint32_t timeout_s = req->timeout_s ? req->timeout_s : 120;
    job_t *j = NULL;

    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_ROOT_INFO_RESP;
    m.root_info_resp = &resp;
    if (getrandom(id, sizeof(id), 0) != sizeof(id) ||
        getrandom(key, sizeof(key), 0) != sizeof(key) ||
        (j = job_open(srv, id, key, timeout_s)) == NULL) {
        ERR("INIT", "getrandom() or allocation for a new job failed");
        resp.result = HCCL_E_INTERNAL;
        session_send(s, &m);
        return;
    }
    ri.version = 1;
    ri.job_id.data = j->id;
    ri.job_id.len = sizeof(j->id);
    ri.job_key.data = j->key;
    ri.job_key.len = sizeof(j->key);
    ri.root_addr = srv->advertised;
    ri.root_socket = (char *)srv->cfg.socket_path;
    resp.info = &ri;
    session_send(s, &m);
    INFO("INIT", "job %s opened for pid %d (joins accepted for %u s)", j->hex, (int)s->pid,
         timeout_s);
}

static job_t *job_find(server_t *srv, const uint8_t *id)
{
    for (job_t *j = srv->jobs; j != NULL; j = j->next)
        if (memcmp(j->id, id, sizeof(j->id)) == 0)
            return j;
    return NULL;
}

/* Compares keys in constant time so that timing reveals nothing about the key. */
static int key_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t diff = 0;

    for (int i = 0; i < ROOTINFO_KEY_BYTES; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

static void job_complete(server_t *srv, job_t *j)
{
    comm_form(srv, j->nranks, j->ranks, j->hex);
    job_free(j);
}

/* Node list (daemon addresses in order of their first rank) and each rank's node. */
static uint32_t job_nodes(server_t *srv, const job_t *j, char **nodes, char **data, char **rdma,
                          uint32_t *rank_node)
{
    uint32_t nn = 0;

    for (uint32_t r = 0; r < j->nranks; r++) {
        peer_t *p = j->ranks[r].p;
        char *a = p != NULL ? p->addr : srv->advertised;
        uint32_t k = 0;
        while (k < nn && strcmp(nodes[k], a) != 0)
            k++;
        if (k == nn) {
            data[nn] = p != NULL ? p->data_addr : srv->data_addr;
            rdma[nn] = p != NULL ? p->rdma_addr : srv->rdma_addr;
            nodes[nn++] = a;
        }
        rank_node[r] = k;
    }
    return nn;
}

/* The root's own word on its parent's connections, from its local ranks. */
static void root_note(server_t *srv, const job_t *j, share_note_t *n)
{
    share_word_t w;

    for (uint32_t r = 0; r < j->nranks; r++) {
        const join_t *jn = &j->ranks[r];
        if (jn->s == NULL)
            continue;
        if (share_word(srv, jn->has_parent ? jn->parent : NULL, jn->s->sid, &w) != 0) {
            share_note_add(n, NULL, NULL, 0);
            continue;
        }
        share_note_add(n, w.parent, w.ptrs, w.n);
        share_word_free(&w);
    }
}

/* A split's child: which of its pairs of daemons share their parent's connection. Every
 * daemon's word came with its ranks' joins; the answer goes to all in the membership. */
static uint32_t job_share_pairs(server_t *srv, const job_t *j, const char *const *data,
                                const uint32_t *rank_node, uint32_t nn, share_note_t *own,
                                uint32_t *pairs)
{
    const share_note_t **notes = calloc(nn, sizeof(*notes));
    uint32_t np;

    if (notes == NULL)
        return 0;
    root_note(srv, j, own);
    for (uint32_t r = 0; r < j->nranks; r++)
        notes[rank_node[r]] = j->ranks[r].p != NULL ? &j->ranks[r].p->share : own;
    np = share_pairs(notes, data, nn, pairs);
    free(notes);
    return np;
}

/* Every rank joined and some live on other daemons: tell each daemon the membership once (the
 * daemons in order of their first rank, and each rank's daemon, placed in any way), set up our
 * part of the comm, then answer our own ranks. */
static void job_complete_multinode(server_t *srv, job_t *j)
{
    char **nodes = calloc(j->nranks, sizeof(*nodes)), **data = calloc(j->nranks, sizeof(*data));
    char **rdma = calloc(j->nranks, sizeof(*rdma));
    uint32_t *rank_node = calloc(j->nranks, sizeof(*rank_node)), nn = 0;
    char **lane_addrs = calloc(j->nranks, sizeof(*lane_addrs));
    uint64_t *lane_max = calloc(j->nranks, sizeof(*lane_max));
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Membership mb = HCCLD__MEMBERSHIP__INIT;
    scomm_t *c = NULL;
    const char *why = NULL;
    HcclResult result = HCCL_E_MEMORY;
    share_note_t own = {0};
    uint32_t *pairs = NULL;
    share_plan_t plan = {0};
    uint64_t chunk = 1u << 20;

    if (nodes == NULL || data == NULL || rdma == NULL || rank_node == NULL)
        goto out;
    nn = job_nodes(srv, j, nodes, data, rdma, rank_node);
    if ((pairs = calloc((size_t)nn * nn, sizeof(*pairs))) == NULL)
        goto out;
    plan.npairs = job_share_pairs(srv, j, (const char *const *)data, rank_node, nn, &own, pairs);
    if (plan.npairs > 0) {
        plan.parent = own.parent;
        plan.pairs = pairs;
        mb.parent_job_id.data = own.parent;
        mb.parent_job_id.len = SHARE_JOB_BYTES;
        mb.n_shared_pairs = 2 * plan.npairs;
        mb.shared_pairs = pairs;
    }
    mb.nranks = j->nranks;
    mb.n_nodes = nn;
    mb.nodes = nodes;
    mb.n_data_nodes = nn;
    mb.data_nodes = data;
    mb.n_rdma_nodes = nn;
    mb.rdma_nodes = rdma;
    mb.n_rank_node = j->nranks;
    mb.rank_node = rank_node;
    /* The root decides the class for every daemon: the least favoured of its local ranks'. */
    int cls = -1;
    for (uint32_t r = 0; r < j->nranks; r++)
        if (j->ranks[r].s != NULL && (cls < 0 || srv->qos.cls[j->ranks[r].s->qos_class].priority >
                                                     srv->qos.cls[cls].priority))
            cls = j->ranks[r].s->qos_class;
    if (cls < 0)
        cls = srv->qos.default_cls;
    mb.qos_class = srv->qos.cls[cls].name;
    if (lane_addrs != NULL && lane_max != NULL) {
        for (uint32_t r = 0; r < j->nranks; r++) {
            lane_addrs[r] = j->ranks[r].lane.addr;
            lane_max[r] = j->ranks[r].lane.direct_max;
        }
        mb.direct_max = lanes_direct_max((const char *const *)lane_addrs, lane_max, j->nranks);
        mb.n_lane_addrs = j->nranks;
        mb.lane_addrs = lane_addrs;
    }
    /* The class also sets the piece size, the same on every node. */
    chunk = (uint64_t)srv->qos.cls[cls].chunk_kib << 10;
    mb.chunk_bytes = chunk;
    m.body_case = HCCLD__MSG__BODY_MEMBERSHIP;
    m.membership = &mb;
    engine_job_expect(srv->eng, j->id, j->key);
    for (uint32_t r = 0; r < j->nranks; r++) {
        peer_t *p = j->ranks[r].p;
        int first = p != NULL;
        for (uint32_t q = 0; q < r && first; q++)
            first = j->ranks[q].p != p;
        if (first)
            peer_send(p, &m);
    }
    c = scomm_add(srv, j->nranks, nn, j->hex);
    for (uint32_t r = 0; c != NULL && r < j->nranks; r++)
        if (j->ranks[r].s != NULL) {
            c->sids[r] = j->ranks[r].s->sid;
            c->nlocal++;
        }
    const algo_want_t *want = NULL;
    int log_ops = 0;
    for (uint32_t r = 0; r < j->nranks; r++)
        if (j->ranks[r].s != NULL) {
            if (want == NULL)
                want = &j->ranks[r].want;
            log_ops |= j->ranks[r].log_ops;
        }
    if (c != NULL)
        result =
            multinode_engine_comm(srv, c, (const char *const *)data, rank_node, nn, j->id, j->key,
                                  &(multinode_opts_t){.want = want,
                                                      .log_ops = log_ops,
                                                      .qos_class = cls,
                                                      .plan = &plan,
                                                      .rdma_nodes = (const char *const *)rdma,
                                                      .nodes = (const char *const *)nodes,
                                                      .connect_timeout_s = j->timeout_s},
                                  &why);
    INFO("INIT", "job %s: comm %u formed with %u ranks on %u daemons", j->hex, c ? c->id : 0,
         j->nranks, nn);
out:
    for (uint32_t r = 0; r < j->nranks; r++)
        if (j->ranks[r].s != NULL && result == HCCL_SUCCESS)
            send_multinode_resp(j->ranks[r].s, j->ranks[r].req_id, c, r, nn, chunk,
                                j->ranks[r].notice, &j->ranks[r].lane,
                                &(lanes_info_t){.addrs = (const char *const *)lane_addrs,
                                                .direct_max = mb.direct_max,
                                                .key = j->key});
        else if (j->ranks[r].s != NULL)
            send_init_resp(j->ranks[r].s, j->ranks[r].req_id, result, why ? why : "out of memory",
                           0, j->nranks, r, 0);
    free(nodes);
    free(data);
    free(rdma);
    free(rank_node);
    free(lane_addrs);
    free(lane_max);
    free(pairs);
    share_note_free(&own);
    job_free(j);
}

/* Why rank `rank` of `nranks` may not join j, or NULL. */
static const char *join_refusal(const job_t *j, uint32_t nranks, uint32_t rank)
{
    if (nranks == 0 || nranks > SERVER_MAX_RANKS)
        return "nRanks out of range";
    if (j->nranks != 0 && nranks != j->nranks)
        return "nRanks differs from the other ranks' value";
    if (rank >= nranks)
        return "rank out of range";
    if (j->nranks != 0 && (j->ranks[rank].s != NULL || j->ranks[rank].p != NULL))
        return "this rank already joined";
    return NULL;
}

static int job_add(job_t *j, uint32_t nranks, uint32_t rank, join_t join)
{
    if (j->nranks == 0) {
        j->ranks = calloc(nranks, sizeof(*j->ranks));
        if (j->ranks == NULL)
            return -ENOMEM;
        for (uint32_t r = 0; r < nranks; r++)
            j->ranks[r].lane = LANE_OFFER_NONE;
        j->nranks = nranks;
    }
    j->ranks[rank] = join;
    j->joined++;
    return 0;
}

static int job_is_local(const job_t *j)
{
    for (uint32_t r = 0; r < j->nranks; r++)
        if (j->ranks[r].p != NULL)
            return 0;
    return 1;
}

static uint32_t local_joins(const job_t *j)
{
    uint32_t n = 0;

    for (uint32_t r = 0; r < j->nranks; r++)
        n += j->ranks[r].s != NULL;
    return n;
}

static void job_complete_multinode(server_t *srv, job_t *j);

static void job_check_complete(server_t *srv, job_t *j)
{
    if (j->joined < j->nranks)
        return;
    if (job_is_local(j))
        job_complete(srv, j);
    else
        job_complete_multinode(srv, j);
}

/* The first rank of an agreed job on its root daemon opens it with the id and key every rank
 * computed; the other ranks' keys are checked against it as for issued root infos. */
static job_t *agreed_open(server_t *srv, const Hccld__CommInitReq *req)
{
    job_t *j = job_open(srv, req->info->job_id.data, req->info->job_key.data, req->timeout_s);

    if (j != NULL)
        INFO("INIT", "agreed job %s opened by the join of rank %u of %u (joins accepted for %u s)",
             j->hex, req->rank, req->nranks, req->timeout_s ? req->timeout_s : 120);
    return j;
}

void jobs_comm_init(server_t *srv, session_t *s, uint64_t req_id, const Hccld__CommInitReq *req)
{
    const char *why = NULL;
    HcclResult result = HCCL_E_PARA;
    job_t *j = NULL;

    if (req->info == NULL || req->info->job_id.len != ROOTINFO_ID_BYTES ||
        req->info->job_key.len != ROOTINFO_KEY_BYTES) {
        why = "malformed root info";
    } else if (req->info->root_addr[0] != '\0' &&
               !addr_is_self(srv->cfg.listen, srv->advertised, req->info->root_addr)) {
        rjobs_join(srv, s, req_id, req); /* another daemon is the root */
        return;
    } else if ((j = job_find(srv, req->info->job_id.data)) == NULL && !req->agreed) {
        why = "unknown, expired or already used root info", result = HCCL_E_NOT_FOUND;
    } else if (j == NULL && (j = agreed_open(srv, req)) == NULL) {
        why = "out of memory", result = HCCL_E_MEMORY;
    } else if (!key_equal(j->key, req->info->job_key.data)) {
        why = "wrong job key for this root info";
    } else if (req->nranks > SERVER_MAX_LOCAL_RANKS && local_joins(j) >= SERVER_MAX_LOCAL_RANKS) {
        /* A job may span daemons whatever its size; one daemon holds at most this many. */
        why = "too many ranks of this job on one node";
    } else {
        why = join_refusal(j, req->nranks, req->rank);
    }
    char err[160];
    join_t join = {.s = s,
                   .req_id = req_id,
                   .l0_mode = req->l0_mode,
                   .log_ops = req->log_ops,
                   .lane = LANE_OFFER_NONE};
    if (why == NULL &&
        algo_check(&join.want, req->algo, req->algorithm, req->algo_by_config, req->deterministic,
                   err, sizeof(err), join.notice, sizeof(join.notice)) != 0)
        why = err;
    if (req->parent_job_id.len == SHARE_JOB_BYTES) {
        join.has_parent = 1;
        memcpy(join.parent, req->parent_job_id.data, SHARE_JOB_BYTES);
    }
    /* Lanes only matter to a comm that spans daemons, which needs a peer listener. */
    if (why == NULL && srv->advertised[0] != '\0')
        join.lane = lane_offer_make(srv->data_addr, req->direct_max);
    if (why == NULL && job_add(j, req->nranks, req->rank, join) != 0)
        why = "out of memory", result = HCCL_E_MEMORY;
    if (why != NULL) {
        lane_offer_close(&join.lane);
        WARN("INIT", "pid %d: comm init refused: %s", (int)s->pid, why);
        send_init_resp(s, req_id, result, why, 0, req->nranks, req->rank, 0);
        return;
    }
    DBG("INIT", "job %s: rank %u of %u joined (pid %d)", j->hex, req->rank, j->nranks, (int)s->pid);
    job_check_complete(srv, j);
}

/* A rank of another daemon joins one of our jobs. */
static void remote_join(server_t *srv, peer_t *p, const Hccld__JoinReq *req)
{
    job_t *j = job_find(srv, p->job_id);
    const char *why = j == NULL ? "the job is gone" : join_refusal(j, req->nranks, req->rank);
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Membership mb = HCCLD__MEMBERSHIP__INIT;

    join_t join = {.p = p, .lane = LANE_OFFER_NONE};
    snprintf(join.lane.addr, sizeof(join.lane.addr), "%s", req->lane_addr);
    join.lane.direct_max = req->direct_max;
    if (why == NULL && job_add(j, req->nranks, req->rank, join) != 0)
        why = "out of memory";
    if (why == NULL) {
        snprintf(p->data_addr, sizeof(p->data_addr), "%s", req->data_addr);
        snprintf(p->rdma_addr, sizeof(p->rdma_addr), "%s", req->rdma_addr);
        share_note_add(&p->share,
                       req->parent_job_id.len == SHARE_JOB_BYTES ? req->parent_job_id.data : NULL,
                       (const char *const *)req->linked, req->n_linked);
    }
    if (why != NULL) {
        WARN("INIT", "daemon %s: rank %u refused: %s", p->addr, req->rank, why);
        mb.result = HCCL_E_PARA;
        mb.message = (char *)why;
        m.body_case = HCCLD__MSG__BODY_MEMBERSHIP;
        m.membership = &mb;
        peer_send(p, &m);
        return;
    }
    DBG("INIT", "job %s: rank %u of %u joined from daemon %s", j->hex, req->rank, j->nranks,
        p->addr);
    job_check_complete(srv, j);
}

void jobs_peer_msg(peer_t *p, const Hccld__Msg *m)
{
    if (m->body_case == HCCLD__MSG__BODY_JOIN_REQ)
        remote_join(p->srv, p, m->join_req);
    else if (m->body_case == HCCLD__MSG__BODY_MEMBERSHIP)
        rjobs_membership(p->srv, p, m->membership);
    else
        WARN("NET", "daemon %s sent an unexpected message (%d)", p->addr, (int)m->body_case);
}

/* A control connection serves one job while it forms; it closes once the membership is out (the
 * other daemon frees its side). Only a close while a job still needs it loses a peer. */
void jobs_peer_gone(peer_t *p)
{
    int forming = 0;

    for (job_t *j = p->srv->jobs; j != NULL; j = j->next)
        for (uint32_t r = 0; r < j->nranks; r++)
            if (j->ranks[r].p == p) {
                j->ranks[r].p = NULL;
                j->ranks[r].lane = LANE_OFFER_NONE;
                j->joined--;
                forming = 1;
            }
    if (rjobs_link_gone(p->srv, p))
        forming = 1;
    if (forming)
        events_peer(p->srv, p->addr, 1, "its control connection closed");
}

int jobs_key_for(server_t *srv, const uint8_t *job_id, uint8_t *key)
{
    job_t *j = job_find(srv, job_id);

    if (j != NULL) {
        memcpy(key, j->key, ROOTINFO_KEY_BYTES);
        return 0;
    }
    return rjobs_key_for(srv, job_id, key);
}

void jobs_session_gone(server_t *srv, session_t *s)
{
    rjobs_session_gone(srv, s);
    splits_session_gone(srv, s);
    for (job_t *j = srv->jobs; j != NULL; j = j->next)
        for (uint32_t r = 0; r < j->nranks; r++)
            if (j->ranks[r].s == s) {
                j->ranks[r].s = NULL;
                lane_offer_close(&j->ranks[r].lane);
                j->joined--;
            }
    scomms_session_gone(srv, s);
}

void jobs_stop(server_t *srv)
{
    while (srv->jobs != NULL)
        job_free(srv->jobs);
    scomms_stop(srv);
}

int algo_check(algo_want_t *w, const char *algo, const char *algorithm, int by_config,
               int deterministic, char *err, size_t cap, char *notice, size_t ncap)
{
    algo_env_t env;
    char said[200];

    notice[0] = '\0';
    if (algo_want_set(w, algo, algorithm, by_config, deterministic, err, cap) != 0 ||
        algo_want_resolve(w, &env, err, cap, said, sizeof(said)) != 0) {
        WARN("INIT", "%s=\"%s\" HCCL_ALGORITHM=\"%s\" refused: %s",
             by_config ? "hcclAlgo" : "HCCL_ALGO", algo ? algo : "", algorithm ? algorithm : "",
             err);
        return -EINVAL;
    }
    if (said[0] != '\0') {
        snprintf(notice, ncap, "HCCL_ALGO and HCCL_ALGORITHM disagree on %s", said);
        WARN("INIT", "%s", notice);
    }
    return 0;
}
