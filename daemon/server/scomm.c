/*
 * Communicators of this daemon (scomm_t): forming one from the ranks that joined (its staging
 * chunk, level 0 by the daemon or cooperative, the control block the ranks then share),
 * answering the ranks, the engine half of one that spans daemons (from the root's membership,
 * checked, not trusted), and ranks leaving: HcclCommDestroy, or their session gone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "coop.h"
#include "futex.h"
#include "uds.h"

#include "algo/algo_env.h"
#include "auth.h"
#include "hccl/hccl.h"
#include "log.h"
#include "server/events.h"
#include "server/link_mon.h"
#include "server/server.h"

/* Sends r, with nfds descriptors (0: none); 0 or a negative errno. */
static int init_resp_send(session_t *s, uint64_t req_id, Hccld__CommInitResp *r, const int *fds,
                          int nfds)
{
    Hccld__Msg m = HCCLD__MSG__INIT;

    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_COMM_INIT_RESP;
    m.comm_init_resp = r;
    return nfds > 0 ? session_send_fds(s, &m, fds, nfds) : session_send(s, &m);
}

/* The answer to a rank of a comm that spans several daemons. */
void send_multinode_resp(session_t *s, uint64_t req_id, const scomm_t *c, uint32_t rank,
                         uint32_t nnodes, uint64_t chunk, const char *notice, lane_offer_t *lane,
                         const lanes_info_t *ln)
{
    Hccld__CommInitResp r = HCCLD__COMM_INIT_RESP__INIT;
    uint8_t lane_key[AUTH_DERIVED_BYTES];
    int fds[UDS_MAX_FDS], nfds = 0;

    r.result = c != NULL ? HCCL_SUCCESS : HCCL_E_MEMORY;
    r.message = "";
    r.comm_id = c != NULL ? c->id : 0;
    r.nranks = c != NULL ? c->nranks : 0;
    r.rank = rank;
    r.chunk_bytes = chunk;
    r.nnodes = nnodes;
    r.notice = (char *)(notice != NULL ? notice : "");
    if (c != NULL)
        r.qos_class = s->srv->qos.cls[c->qos_class].name;
    if (c != NULL && ln != NULL && ln->direct_max > 0)
        nfds = lanes_answer(lane, ln->addrs, c->nranks, rank, ln->direct_max, ln->key, lane_key, &r,
                            fds, UDS_MAX_FDS);
    if (nfds < 0) {
        send_init_resp(s, req_id, HCCL_E_TCP_CONNECT, "could not make the rank's lane sockets", 0,
                       c->nranks, rank, 0);
    } else if (init_resp_send(s, req_id, &r, fds, nfds) != 0 && nfds > 0) {
        /* Its peers connect to it in vain and fail their init within the timeout. */
        ERR("INIT", "comm %u: could not pass the lane sockets to rank %u", c->id, rank);
        send_init_resp(s, req_id, HCCL_E_INTERNAL, "could not pass the lane sockets", 0, c->nranks,
                       rank, 0);
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
}

void send_init_resp(session_t *s, uint64_t req_id, HcclResult result, const char *why,
                    uint32_t comm_id, uint32_t nranks, uint32_t rank, uint64_t chunk)
{
    Hccld__CommInitResp r = HCCLD__COMM_INIT_RESP__INIT;

    r.result = result;
    r.message = (char *)(why ? why : "");
    r.comm_id = comm_id;
    r.nranks = nranks;
    r.rank = rank;
    r.chunk_bytes = chunk;
    init_resp_send(s, req_id, &r, NULL, 0);
}

static uint64_t comm_chunk(server_t *srv, uint32_t n, const join_t *ranks)
{
    uint64_t chunk = srv->cfg.chunk_bytes;

    /* Four chunks in flight must fit in the smallest arena of the comm. */
    for (uint32_t r = 0; r < n; r++) {
        if (ranks[r].s == NULL)
            continue;
        uint64_t cap = ranks[r].s->layout.arena_bytes / 4 / 4096 * 4096;
        if (cap < chunk)
            chunk = cap;
    }
    return chunk < 4096 ? 4096 : chunk;
}

/* Cooperative level 0 needs one tenant: the ranks see each other's arenas. Measured on 2 cores,
 * it beats the daemon's executor even with 4 and 8 ranks (their waits yield the core, then
 * sleep), so it is the default up to COOP_MAX_RANKS; HCCLD_L0_MODE or the ranks' HCCL_L0_MODE
 * can choose the daemon. */
static int comm_mode(server_t *srv, uint32_t n, const join_t *ranks)
{
    uint32_t asked = ranks[0].l0_mode;

    if (srv->cfg.l0_mode == L0_DAEMON)
        return L0_DAEMON;
    for (uint32_t r = 1; r < n; r++) {
        const session_t *a = ranks[0].s, *b = ranks[r].s;
        if (a->uid != b->uid || strcmp(a->job_name, b->job_name) != 0)
            return L0_DAEMON;
        if (ranks[r].l0_mode != asked)
            asked = L0_AUTO;
    }
    if (asked != L0_AUTO)
        return (int)asked;
    return n <= COOP_MAX_RANKS ? L0_COOP : L0_DAEMON;
}

static int coop_create(scomm_t *c)
{
    c->coop_bytes = coop_ctl_bytes(c->nranks);
    c->coop_fd = server_memfd_map("hccld-coop", c->coop_bytes, (void **)&c->coop);
    if (c->coop_fd < 0) {
        c->coop = NULL;
        return c->coop_fd;
    }
    c->coop->magic = COOP_MAGIC;
    c->coop->nranks = c->nranks;
    return 0;
}

static void scomm_free(scomm_t *c)
{
    if (c->coop != NULL) {
        munmap(c->coop, c->coop_bytes);
        close(c->coop_fd);
    }
    free(c->sids);
    free(c->nodes);
    free(c);
}

/* Wakes every rank waiting in the control block and tells it the comm is gone, and why
 * (COOP_ABORT_LEFT or COOP_ABORT_BROKEN). */
static void scomm_abort(scomm_t *c, uint32_t why)
{
    if (why == COOP_ABORT_BROKEN)
        c->broken = 1;
    if (c->coop == NULL)
        return;
    __atomic_fetch_or(&c->coop->abort, why, __ATOMIC_RELEASE);
    __atomic_add_fetch(&c->coop->bell, 1, __ATOMIC_ACQ_REL);
    futex_wake(&c->coop->bell, INT32_MAX);
}

/* Answers every rank; coop ranks also get the control block and all arenas. */
static void answer_ranks(server_t *srv, uint32_t n, const join_t *ranks, scomm_t *c, uint64_t chunk)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__CommInitResp r = HCCLD__COMM_INIT_RESP__INIT;
    uint64_t arenas[SERVER_MAX_LOCAL_RANKS];
    int fds[SERVER_MAX_LOCAL_RANKS + 1];

    m.body_case = HCCLD__MSG__BODY_COMM_INIT_RESP;
    m.comm_init_resp = &r;
    r.message = "";
    r.comm_id = c->id;
    r.nranks = n;
    r.chunk_bytes = chunk;
    r.qos_class = srv->qos.cls[c->qos_class].name;
    if (c->coop != NULL) {
        fds[0] = c->coop_fd;
        for (uint32_t q = 0; q < n; q++) {
            arenas[q] = ranks[q].s->layout.arena_bytes;
            fds[q + 1] = ranks[q].s->arena_fd;
        }
        r.l0_mode = L0_COOP;
        r.n_arena_bytes = n;
        r.arena_bytes = arenas;
        r.ctl_bytes = c->coop_bytes;
    }
    for (uint32_t q = 0; q < n; q++) {
        session_t *s = ranks[q].s;
        m.req_id = ranks[q].req_id;
        r.rank = q;
        r.notice = (char *)ranks[q].notice;
        if (c->coop == NULL) {
            session_send(s, &m);
        } else if (session_send_fds(s, &m, fds, (int)n + 1) != 0) {
            ERR("INIT", "comm %u: could not pass the shared segments to rank %u", c->id, q);
            send_init_resp(s, m.req_id, HCCL_E_INTERNAL, "could not pass shared segments", 0, n, q,
                           0);
            scomm_abort(c, COOP_ABORT_BROKEN);
        }
    }
}

scomm_t *scomm_add(server_t *srv, uint32_t nranks, uint32_t nnodes, const char *job_hex)
{
    scomm_t *c = calloc(1, sizeof(*c));

    if (c == NULL || (c->sids = calloc(nranks, sizeof(*c->sids))) == NULL) {
        free(c);
        return NULL;
    }
    c->id = ++srv->next_comm_id;
    c->nranks = nranks;
    c->nnodes = nnodes;
    c->coop_fd = -1;
    c->qos_class = srv->qos.default_cls;
    snprintf(c->job_hex, sizeof(c->job_hex), "%s", job_hex);
    c->next = srv->comms;
    srv->comms = c;
    return c;
}

static void scomm_unlink(server_t *srv, scomm_t *c)
{
    for (scomm_t **pp = &srv->comms; *pp != NULL; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            return;
        }
}

int comm_form(server_t *srv, uint32_t n, const join_t *ranks, const char *hex)
{
    scomm_t *c = scomm_add(srv, n, 1, hex);
    uint64_t chunk = comm_chunk(srv, n, ranks);
    int rc = -ENOMEM, mode = comm_mode(srv, n, ranks);

    if (c != NULL) {
        c->nlocal = n;
        for (uint32_t r = 0; r < n; r++) {
            c->sids[r] = ranks[r].s->sid;
            /* The least favoured class of its ranks (one node: no traffic to cap yet). */
            if (r == 0 ||
                srv->qos.cls[ranks[r].s->qos_class].priority > srv->qos.cls[c->qos_class].priority)
                c->qos_class = ranks[r].s->qos_class;
        }
        rc = mode == L0_COOP ? coop_create(c) : 0;
        if (rc == 0)
            rc = engine_comm_create(srv->eng, c->id, c->nranks, c->sids);
    }
    if (rc != 0) {
        ERR("INIT", "job %s: creating the communicator failed (%d)", hex, rc);
        for (uint32_t r = 0; r < n; r++)
            send_init_resp(ranks[r].s, ranks[r].req_id, HCCL_E_INTERNAL,
                           "the daemon could not create the communicator", 0, n, r, 0);
        if (c != NULL) {
            scomm_unlink(srv, c);
            scomm_free(c);
        }
        return rc;
    }
    INFO("INIT", "job %s: comm %u formed with %u ranks, level 0 %s, chunk %llu KiB", hex, c->id,
         c->nranks, c->coop ? "cooperative" : "by the daemon", (unsigned long long)(chunk >> 10));
    answer_ranks(srv, n, ranks, c, chunk);
    events_comm_formed(srv, c);
    return 0;
}

scomm_t *scomm_lookup(server_t *srv, uint32_t id)
{
    for (scomm_t *c = srv->comms; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static void scomm_leave(server_t *srv, scomm_t *c, uint32_t rank)
{
    c->sids[rank] = 0;
    c->left++;
    scomm_abort(c, COOP_ABORT_LEFT);
    engine_comm_leave(srv->eng, c->id, rank);
    if (c->left < c->nlocal)
        return;
    scomm_unlink(srv, c);
    scomm_free(c);
}

void scomm_on_destroy(server_t *srv, session_t *s, uint64_t req_id,
                      const Hccld__CommDestroyReq *req)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__CommDestroyResp r = HCCLD__COMM_DESTROY_RESP__INIT;
    scomm_t *c = scomm_lookup(srv, req->comm_id);

    if (c == NULL || req->rank >= c->nranks || c->sids[req->rank] != s->sid) {
        r.result = HCCL_E_PARA;
    } else {
        scomm_leave(srv, c, req->rank);
        r.result = HCCL_SUCCESS;
    }
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_COMM_DESTROY_RESP;
    m.comm_destroy_resp = &r;
    session_send(s, &m);
}

void scomm_on_health(server_t *srv, session_t *s, uint64_t req_id, const Hccld__CommHealthReq *req)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__CommHealthResp r = HCCLD__COMM_HEALTH_RESP__INIT;
    scomm_t *c = scomm_lookup(srv, req->comm_id);
    engine_comm_stats_t st;
    int known = 0;

    if (c == NULL || req->rank >= c->nranks || c->sids[req->rank] != s->sid)
        r.result = HCCL_E_PARA;
    else if (c->broken)
        r.result = HCCL_E_REMOTE; /* a member here died */
    else if ((known = engine_get_comm_stats(srv->eng, c->id, &st) == 0) && st.broken)
        r.result = st.broken_status != HCCL_SUCCESS ? st.broken_status : HCCL_E_REMOTE;
    else
        r.result = HCCL_SUCCESS;
    r.ready = r.result == HCCL_SUCCESS && known && st.ready;
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_COMM_HEALTH_RESP;
    m.comm_health_resp = &r;
    session_send(s, &m);
}

/* This daemon's node in the membership: the node of its ranks (those with a session here),
 * which must all be one node's, of exactly c->nlocal ranks, while every node holds some. Their
 * sessions go to members in rank order; held (nnodes, zeroed) counts. UINT32_MAX if the
 * membership does not add up (a peer daemon's word is checked, not trusted). */
static uint32_t my_node(const scomm_t *c, const uint32_t *rank_node, uint32_t nnodes,
                        uint32_t *held, uint64_t *members)
{
    uint32_t me = UINT32_MAX, here = 0;
    int bad = 0;

    for (uint32_t g = 0; g < c->nranks && !bad; g++) {
        bad = rank_node[g] >= nnodes;
        if (!bad && c->sids[g] != 0) {
            me = me == UINT32_MAX ? rank_node[g] : me;
            bad = rank_node[g] != me;
        }
        if (!bad)
            held[rank_node[g]]++;
    }
    for (uint32_t i = 0; i < nnodes && !bad; i++)
        bad = held[i] == 0;
    for (uint32_t g = 0; g < c->nranks && !bad && me != UINT32_MAX; g++)
        if (rank_node[g] == me)
            members[here++] = c->sids[g];
    return bad || me == UINT32_MAX || here != c->nlocal ? UINT32_MAX : me;
}

HcclResult multinode_engine_comm(server_t *srv, scomm_t *c, const char *const *data_nodes,
                                 const uint32_t *rank_node, uint32_t nnodes, const uint8_t *job_id,
                                 const uint8_t *key, const multinode_opts_t *o, const char **why)
{
    uint32_t me, *held = calloc(nnodes, sizeof(*held));
    uint64_t *members = calloc(c->nranks, sizeof(*members));
    algo_env_t env;
    char err[160];
    int rc;

    /* Checked when the rank asked (algo_check); without a local rank's, all automatic. */
    int bad = o->want != NULL ? algo_want_resolve(o->want, &env, err, sizeof(err), NULL, 0)
                              : algo_env_parse(NULL, &env, err, sizeof(err));
    if (bad != 0 || held == NULL || members == NULL) {
        rc = held == NULL || members == NULL;
        free(held);
        free(members);
        *why = rc ? "out of memory" : "the level-1 algorithm settings are invalid";
        return rc ? HCCL_E_MEMORY : HCCL_E_PARA;
    }
    me = my_node(c, rank_node, nnodes, held, members);
    free(held);
    if (me == UINT32_MAX) {
        free(members);
        *why = "the membership does not place this daemon's ranks on one node";
        return HCCL_E_INTERNAL;
    }
    c->qos_class = o->qos_class;
    c->has_job = 1;
    if (o->nodes != NULL && (c->nodes = calloc(nnodes, sizeof(*c->nodes))) != NULL)
        for (uint32_t i = 0; i < nnodes; i++) {
            snprintf(c->nodes[i], sizeof(c->nodes[i]), "%s", o->nodes[i]);
            if (i == me)
                continue;
            link_mon_name(srv->links, data_nodes[i], o->nodes[i]);
            if (o->rdma_nodes != NULL)
                link_mon_name(srv->links, o->rdma_nodes[i], o->nodes[i]);
        }
    memcpy(c->job_id, job_id, SHARE_JOB_BYTES);
    uint8_t *share = calloc(nnodes, 1);
    uint32_t parent_comm = 0;
    int inherit = 0;
    if (share == NULL) {
        free(members);
        *why = "out of memory";
        return HCCL_E_MEMORY;
    }
    if (share_spec(srv, c, o->plan, me, share, &parent_comm, &inherit) != 0) {
        free(share);
        free(members);
        *why = "the root daemon says this daemon shares its parent's data connections, which "
               "are gone here";
        return HCCL_E_INTERNAL;
    }
    engine_multi_spec_t sp = {.comm_id = c->id,
                              .nnodes = nnodes,
                              .me = me,
                              .local = c->nlocal,
                              .nglobal = c->nranks,
                              .members = members,
                              .rank_node = rank_node,
                              .addrs = data_nodes,
                              .rdma_addrs = o->rdma_nodes,
                              .job_id = job_id,
                              .key = key,
                              .level1 = env.level1,
                              .level1_src = env.src,
                              .deterministic = o->want != NULL && o->want->deterministic,
                              .log_ops = o->log_ops,
                              .qos_class = o->qos_class,
                              .parent_comm_id = parent_comm,
                              .share = share,
                              .inherit_links = inherit,
                              .connect_timeout_s = o->connect_timeout_s};
    rc = engine_comm_create_multi(srv->eng, &sp);
    free(share);
    free(members);
    if (rc != 0) {
        *why = "the daemon could not set up the communicator";
        return HCCL_E_INTERNAL;
    }
    events_comm_formed(srv, c);
    return HCCL_SUCCESS;
}

void scomms_session_gone(server_t *srv, session_t *s)
{
    for (scomm_t *c = srv->comms, *next; c != NULL; c = next) {
        next = c->next;
        for (uint32_t r = 0; r < c->nranks; r++)
            if (c->sids[r] == s->sid) {
                WARN("COLL", "comm %u: rank %u (pid %d) went away", c->id, r, (int)s->pid);
                events_rank_died(srv, c, r, (int)s->pid);
                if (c->left < c->nlocal) {
                    char why[96];
                    snprintf(why, sizeof(why), "rank %u (pid %d) went away", r, (int)s->pid);
                    events_comm_broken(srv, c, why, HCCL_E_REMOTE);
                }
                c->sids[r] = 0;
                c->left++;
                scomm_abort(c, COOP_ABORT_BROKEN);
            }
        if (c->left == c->nlocal) {
            /* The engine frees its half when the last session leaves; forget ours. */
            scomm_unlink(srv, c);
            scomm_free(c);
        }
    }
}

void scomms_stop(server_t *srv)
{
    while (srv->comms != NULL) {
        scomm_t *c = srv->comms;
        srv->comms = c->next;
        scomm_abort(c, COOP_ABORT_BROKEN);
        scomm_free(c);
    }
}
