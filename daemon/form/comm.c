/*
 * Communicators of this daemon (form_comm_t): forming one from the ranks of this node that
 * joined (its staging chunk, level 0 by the daemon or cooperative, the control block the ranks
 * then share), the engine half of one that spans daemons (from the root's membership, checked,
 * not trusted), its state, and ranks leaving: HcclCommDestroy, or their process gone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "coop.h"
#include "form/form_int.h"
#include "futex.h"
#include "log.h"
#include <sodium.h>

static uint64_t comm_chunk(const form_t *f, uint32_t n, const join_t *joins)
{
    uint64_t chunk = f->env.chunk_bytes;

    /* Four chunks in flight must fit in the smallest arena of the comm. */
    for (uint32_t r = 0; r < n; r++) {
        uint64_t cap = joins[r].c->arena_bytes / 4 / 4096 * 4096;
        if (cap < chunk)
            chunk = cap;
    }
    return chunk < 4096 ? 4096 : chunk;
}

/* Cooperative level 0 needs one tenant: the ranks see each other's arenas. Measured on 2 cores,
 * it beats the daemon's executor even with 4 and 8 ranks (their waits yield the core, then
 * sleep), so it is the default up to COOP_MAX_RANKS; HCCLD_L0_MODE or the ranks' HCCL_L0_MODE
 * can choose the daemon. */
static int comm_mode(const form_t *f, uint32_t n, const join_t *joins)
{
    uint32_t asked = joins[0].l0_mode;

    if (f->env.l0_mode == FORM_L0_DAEMON)
        return FORM_L0_DAEMON;
    for (uint32_t r = 1; r < n; r++) {
        const form_client_t *a = joins[0].c, *b = joins[r].c;
        if (a->uid != b->uid || strcmp(a->job_name, b->job_name) != 0)
            return FORM_L0_DAEMON;
        if (joins[r].l0_mode != asked)
            asked = FORM_L0_AUTO;
    }
    if (asked != FORM_L0_AUTO)
        return (int)asked;
    return n <= COOP_MAX_RANKS ? FORM_L0_COOP : FORM_L0_DAEMON;
}

static int coop_create(form_comm_t *c)
{
    c->coop_bytes = coop_ctl_bytes(c->nranks);
    c->coop_fd = shm_memfd_map("hccld-coop", c->coop_bytes, (void **)&c->coop);
    if (c->coop_fd < 0) {
        c->coop = NULL;
        return c->coop_fd;
    }
    c->coop->magic = COOP_MAGIC;
    c->coop->nranks = c->nranks;
    return 0;
}

_Static_assert(sizeof(((form_comm_t *)0)->coop_lat_seen) == SHM_LAT_BUCKETS * sizeof(uint32_t) &&
                   sizeof(((form_comm_t *)0)->lane_lat_seen) == SHM_LAT_BUCKETS * sizeof(uint32_t),
               "form_comm_t holds one count per bucket of the ranks' durations");

/* Adds what was counted since the last fold (seen) to f's durations; the counts wrap at 2^32. */
static void lat_fold(form_t *f, const uint32_t *lat4, uint64_t sum, uint32_t *seen,
                     uint64_t *sum_seen)
{
    for (unsigned j = 0; j < SHM_LAT_BUCKETS; j++) {
        f->ranks_lat[j] += (uint32_t)(lat4[j] - seen[j]);
        seen[j] = lat4[j];
    }
    f->ranks_lat_sum_us += sum - *sum_seen;
    *sum_seen = sum;
}

static void coop_lat_fold(form_t *f, form_comm_t *c)
{
    uint32_t lat4[SHM_LAT_BUCKETS];

    for (unsigned j = 0; j < SHM_LAT_BUCKETS; j++)
        lat4[j] = __atomic_load_n(&c->coop->lat4[j], __ATOMIC_RELAXED);
    lat_fold(f, lat4, __atomic_load_n(&c->coop->lat_sum_us, __ATOMIC_RELAXED), c->coop_lat_seen,
             &c->coop_sum_seen);
}

void form_ranks_lat(form_t *f, uint64_t lat[12], uint64_t *sum_us)
{
    for (form_comm_t *c = f->comms; c != NULL; c = c->next)
        if (c->coop != NULL)
            coop_lat_fold(f, c);
    memcpy(lat, f->ranks_lat, sizeof(f->ranks_lat));
    *sum_us = f->ranks_lat_sum_us;
}

void form_lane_fold(form_t *f, uint32_t comm_id, uint64_t ops, const uint32_t lat4[12],
                    uint64_t sum_us)
{
    form_comm_t *c = form_comm_find(f, comm_id);

    if (c == NULL || ops <= c->lane_ops)
        return;
    f->lane_ops += ops - c->lane_ops;
    c->lane_ops = ops;
    if (sum_us >= c->lane_sum_seen) /* the same rank's, or one as far: its durations */
        lat_fold(f, lat4, sum_us, c->lane_lat_seen, &c->lane_sum_seen);
}

uint64_t form_lane_ops(const form_t *f)
{
    return f->lane_ops;
}

static void comm_free(form_t *f, form_comm_t *c)
{
    if (c->coop != NULL) {
        f->coop_retired += coop_pieces_done(c->coop);
        coop_lat_fold(f, c);
        munmap(c->coop, c->coop_bytes);
        close(c->coop_fd);
    }
    free(c->sids);
    free(c->nodes);
    free(c->record);
    free(c);
}

comm_state_t form_comm_step(form_comm_t *c, comm_event_t e)
{
    comm_state_t to = comm_next(c->state, e);

    if (to == COMM_STATE_COUNT) {
        ERR("INIT", "comm %u: event %s in state %s ignored", c->id, comm_event_name(e),
            comm_state_name(c->state));
        return c->state;
    }
    if (to != c->state)
        DBG("INIT", "comm %u: %s -> %s (%s)", c->id, comm_state_name(c->state), comm_state_name(to),
            comm_event_name(e));
    c->state = to;
    return to;
}

/* Wakes every rank waiting in the control block and tells it the comm is gone, and why
 * (COOP_ABORT_LEFT or COOP_ABORT_BROKEN) and, when known, whose doing it was (1 + the rank,
 * for the survivors' log; 0: not known). */
static void comm_abort_by(form_comm_t *c, uint32_t why, uint32_t culprit)
{
    if (why == COOP_ABORT_BROKEN)
        form_comm_step(c, COMM_EV_BROKEN);
    if (c->coop == NULL)
        return;
    if (culprit != 0)
        __atomic_store_n(&c->coop->culprit, culprit, __ATOMIC_RELEASE);
    __atomic_fetch_or(&c->coop->abort, why, __ATOMIC_RELEASE);
    __atomic_add_fetch(&c->coop->bell, 1, __ATOMIC_ACQ_REL);
    futex_wake(&c->coop->bell, INT32_MAX);
}

static void comm_abort(form_comm_t *c, uint32_t why)
{
    comm_abort_by(c, why, 0);
}

/* Answers every rank; coop ranks also get the control block and all arenas. */
static void answer_ranks(form_t *f, uint32_t n, const join_t *joins, form_comm_t *c, uint64_t chunk)
{
    Hccld__CommInitResp r = HCCLD__COMM_INIT_RESP__INIT;
    uint64_t arenas[FORM_MAX_LOCAL_RANKS];
    int fds[FORM_MAX_LOCAL_RANKS + 1];

    r.message = "";
    r.comm_id = c->id;
    r.nranks = n;
    r.chunk_bytes = chunk;
    r.qos_class = (char *)f->env.qos->cls[c->qos_class].name;
    if (c->restart_hold_ms != 0) {
        r.resume_token.data = c->secret;
        r.resume_token.len = sizeof(c->secret);
    }
    if (c->coop != NULL) {
        fds[0] = c->coop_fd;
        for (uint32_t q = 0; q < n; q++) {
            arenas[q] = joins[q].c->arena_bytes;
            fds[q + 1] = joins[q].c->arena_fd;
        }
        r.l0_mode = FORM_L0_COOP;
        r.n_arena_bytes = n;
        r.arena_bytes = arenas;
        r.ctl_bytes = c->coop_bytes;
    }
    for (uint32_t q = 0; q < n; q++) {
        r.rank = q;
        r.notice = (char *)joins[q].notice;
        int sent = c->coop != NULL ? form_send(f, joins[q].c, joins[q].req_id, &r, fds, (int)n + 1)
                                   : form_send(f, joins[q].c, joins[q].req_id, &r, NULL, 0);
        if (sent != 0 && c->coop != NULL) {
            ERR("INIT", "comm %u: could not pass the shared segments to rank %u", c->id, q);
            form_answer_result(f, joins[q].c, joins[q].req_id, HCCL_E_INTERNAL,
                               "could not pass shared segments", n, q);
            comm_abort(c, COOP_ABORT_BROKEN);
        }
    }
}

form_comm_t *form_comm_add(form_t *f, uint32_t nranks, uint32_t nnodes, const char *job_hex)
{
    /* Never an id that a comm still being registered again after a restart holds. */
    do
        ++f->next_comm_id;
    while (f->next_comm_id == 0 || form_comm_find(f, f->next_comm_id) != NULL ||
           form_rejoin_pending(f, f->next_comm_id));
    return form_comm_add_id(f, f->next_comm_id, nranks, nnodes, job_hex);
}

form_comm_t *form_comm_add_id(form_t *f, uint32_t id, uint32_t nranks, uint32_t nnodes,
                              const char *job_hex)
{
    form_comm_t *c = calloc(1, sizeof(*c));

    if (c == NULL || (c->sids = calloc(nranks, sizeof(*c->sids))) == NULL) {
        free(c);
        return NULL;
    }
    c->id = id;
    c->nranks = nranks;
    c->nnodes = nnodes;
    c->coop_fd = -1;
    c->qos_class = f->env.qos->default_cls;
    c->state = comm_next(COMM_JOINING, COMM_EV_JOINED);
    snprintf(c->job_hex, sizeof(c->job_hex), "%s", job_hex);
    c->next = f->comms;
    f->comms = c;
    return c;
}

form_comm_t *form_comm_find(form_t *f, uint32_t id)
{
    for (form_comm_t *c = f->comms; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static void comm_unlink(form_t *f, form_comm_t *c)
{
    for (form_comm_t **pp = &f->comms; *pp != NULL; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            return;
        }
}

void form_comm_drop(form_t *f, form_comm_t *c)
{
    form_comm_step(c, COMM_EV_FAILED);
    comm_unlink(f, c);
    comm_free(f, c);
}

int form_least_class(const form_t *f, const join_t *joins, uint32_t n)
{
    const qos_policy_t *q = f->env.qos;
    int cls = -1;

    for (uint32_t r = 0; r < n; r++)
        if (joins[r].c != NULL &&
            (cls < 0 || q->cls[joins[r].qos_class].priority > q->cls[cls].priority))
            cls = joins[r].qos_class;
    return cls < 0 ? q->default_cls : cls;
}

int form_comm_local(form_t *f, uint32_t n, const join_t *joins, const char *hex)
{
    form_comm_t *c = form_comm_add(f, n, 1, hex);
    uint64_t chunk = comm_chunk(f, n, joins);
    int rc = -ENOMEM, mode = comm_mode(f, n, joins);

    if (c != NULL) {
        c->nlocal = n;
        c->restart_hold_ms = form_restart_hold_ms(joins, n);
        randombytes_buf(c->secret, sizeof(c->secret));
        for (uint32_t r = 0; r < n; r++)
            c->sids[r] = joins[r].c->sid;
        /* The least favoured class of its ranks (one node: no traffic to cap yet). */
        c->qos_class = form_least_class(f, joins, n);
        rc = mode == FORM_L0_COOP ? coop_create(c) : 0;
        if (rc == 0)
            rc = engine_comm_create(f->env.eng, c->id, c->nranks, c->sids);
    }
    if (rc != 0) {
        ERR("INIT", "job %s: creating the communicator failed (%d)", hex, rc);
        for (uint32_t r = 0; r < n; r++)
            form_answer_result(f, joins[r].c, joins[r].req_id, HCCL_E_INTERNAL,
                               "the daemon could not create the communicator", n, r);
        if (c != NULL)
            form_comm_drop(f, c);
        return rc;
    }
    INFO("INIT", "job %s: comm %u formed with %u ranks, level 0 %s, chunk %llu KiB", hex, c->id,
         c->nranks, c->coop ? "cooperative" : "by the daemon", (unsigned long long)(chunk >> 10));
    answer_ranks(f, n, joins, c, chunk);
    if (c->state == COMM_FORMING)
        form_comm_step(c, COMM_EV_FORMED);
    f->ops->comm_formed(f->ctx, c);
    return 0;
}

static form_comm_t *comm_of_rank(form_t *f, const form_client_t *cl, uint32_t comm_id,
                                 uint32_t rank)
{
    form_comm_t *c = form_comm_find(f, comm_id);

    return c != NULL && rank < c->nranks && c->sids[rank] == cl->sid ? c : NULL;
}

/* Rank `rank` is gone from c; the record goes with its last local rank (the engine frees its
 * half when the last session leaves it). 1 if it went. */
static int comm_rank_gone(form_t *f, form_comm_t *c, uint32_t rank)
{
    c->sids[rank] = 0;
    c->left++;
    if (c->left < c->nlocal) {
        form_comm_step(c, COMM_EV_LEFT);
        return 0;
    }
    form_comm_step(c, COMM_EV_ALL_LEFT);
    comm_unlink(f, c);
    comm_free(f, c);
    return 1;
}

HcclResult form_comm_leave(form_t *f, const form_client_t *cl, uint32_t comm_id, uint32_t rank)
{
    form_comm_t *c = comm_of_rank(f, cl, comm_id, rank);

    if (c == NULL)
        return HCCL_E_PARA;
    comm_abort(c, COOP_ABORT_LEFT);
    engine_comm_leave(f->env.eng, c->id, rank);
    comm_rank_gone(f, c, rank);
    return HCCL_SUCCESS;
}

HcclResult form_comm_health(form_t *f, const form_client_t *cl, uint32_t comm_id, uint32_t rank,
                            int *ready)
{
    form_comm_t *c = comm_of_rank(f, cl, comm_id, rank);
    engine_comm_stats_t st;
    int known = 0;
    HcclResult result;

    if (c == NULL)
        result = HCCL_E_PARA;
    else if (c->state == COMM_BROKEN)
        result = HCCL_E_REMOTE; /* a member here died */
    else if ((known = engine_get_comm_stats(f->env.eng, c->id, &st) == 0) && st.broken)
        result = st.broken_status != HCCL_SUCCESS ? st.broken_status : HCCL_E_REMOTE;
    else
        result = HCCL_SUCCESS;
    *ready = result == HCCL_SUCCESS && known && st.ready;
    return result;
}

/* This daemon's node in the membership: the node of its ranks (those with a session here),
 * which must all be one node's, of exactly c->nlocal ranks, while every node holds some. Their
 * sessions go to members in rank order; held (nnodes, zeroed) counts. UINT32_MAX if the
 * membership does not add up (a peer daemon's word is checked, not trusted). */
static uint32_t my_node(const form_comm_t *c, const uint32_t *rank_node, uint32_t nnodes,
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

/* Every node's daemon address, kept for events and status, and given to the link monitor. */
static void comm_name_nodes(form_t *f, form_comm_t *c, const char *const *data_nodes,
                            uint32_t nnodes, uint32_t me, const multinode_opts_t *o)
{
    if (o->nodes == NULL || (c->nodes = calloc(nnodes, sizeof(*c->nodes))) == NULL)
        return;
    for (uint32_t i = 0; i < nnodes; i++) {
        snprintf(c->nodes[i], sizeof(c->nodes[i]), "%s", o->nodes[i]);
        if (i == me)
            continue;
        f->ops->name_link(f->ctx, data_nodes[i], o->nodes[i]);
        if (o->rdma_nodes != NULL)
            f->ops->name_link(f->ctx, o->rdma_nodes[i], o->nodes[i]);
    }
}

HcclResult form_comm_multinode(form_t *f, form_comm_t *c, const char *const *data_nodes,
                               const uint32_t *rank_node, uint32_t nnodes, const uint8_t *job_id,
                               const uint8_t *key, const multinode_opts_t *o, const char **why)
{
    uint32_t me, *held = calloc(nnodes, sizeof(*held));
    uint64_t *members = calloc(c->nranks, sizeof(*members));
    uint8_t *share = calloc(nnodes, 1);
    uint32_t parent_comm = 0;
    int inherit = 0, rc;
    HcclResult result = HCCL_E_MEMORY;

    *why = "out of memory";
    if (held == NULL || members == NULL || share == NULL)
        goto out;
    me = my_node(c, rank_node, nnodes, held, members);
    if (me == UINT32_MAX) {
        *why = "the membership does not place this daemon's ranks on one node";
        result = HCCL_E_INTERNAL;
        goto out;
    }
    c->qos_class = o->qos_class;
    c->has_job = 1;
    comm_name_nodes(f, c, data_nodes, nnodes, me, o);
    memcpy(c->job_id, job_id, SHARE_JOB_BYTES);
    if (share_spec(f, c, o->plan, me, share, &parent_comm, &inherit) != 0) {
        *why = "the root daemon says this daemon shares its parent's data connections, which "
               "are gone here";
        result = HCCL_E_INTERNAL;
        goto out;
    }
    /* Checked when the rank asked; without a local rank's, all automatic. */
    engine_level1_t level1 = o->want != NULL ? form_level1_view(o->want) : (engine_level1_t){0};
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
                              .level1 = &level1,
                              .log_ops = o->log_ops,
                              .qos_class = o->qos_class,
                              .parent_comm_id = parent_comm,
                              .share = share,
                              .inherit_links = inherit,
                              .connect_timeout_s = o->connect_timeout_s,
                              .retry_hold_ms = form_retry_hold_ms(o->retry),
                              .retry_max_cnt = o->retry != NULL ? o->retry->max_cnt : 0,
                              .returning = o->returning,
                              .p2p_next = o->p2p_next,
                              .coll_below = o->coll_below};
    rc = engine_comm_create_multi(f->env.eng, &sp);
    if (rc != 0) {
        *why = "the daemon could not set up the communicator";
        result = HCCL_E_INTERNAL;
        goto out;
    }
    /* With op retry its ranks may take it to the next daemon after a restart of this one
     * (record.c); not yet a comm that shares its parent's connections. */
    if (sp.retry_hold_ms > 0 && parent_comm == 0 && !inherit &&
        form_record_make(c, data_nodes, rank_node, nnodes, me, job_id, key, o,
                         f->env.qos->cls[o->qos_class].name) == 0) {
        c->restart_hold_ms = (uint32_t)sp.retry_hold_ms;
        randombytes_buf(c->secret, sizeof(c->secret));
    }
    *why = NULL;
    result = HCCL_SUCCESS;
out:
    free(held);
    free(members);
    free(share);
    return result;
}

void form_comms_client_gone(form_t *f, const form_client_t *cl)
{
    for (form_comm_t *c = f->comms, *next; c != NULL; c = next) {
        next = c->next;
        for (uint32_t r = 0; r < c->nranks; r++) {
            if (c->sids[r] != cl->sid)
                continue;
            char why[96];
            WARN("COLL", "comm %u: rank %u (pid %d) went away", c->id, r, cl->pid);
            f->ops->rank_died(f->ctx, c, r, cl->pid);
            snprintf(why, sizeof(why), "rank %u (pid %d) went away", r, cl->pid);
            f->ops->comm_broken(f->ctx, c, why, HCCL_E_REMOTE);
            comm_abort_by(c, COOP_ABORT_BROKEN, r + 1);
            if (comm_rank_gone(f, c, r))
                break;
        }
    }
}

void form_comms_stop(form_t *f)
{
    while (f->comms != NULL) {
        form_comm_t *c = f->comms;
        f->comms = c->next;
        /* Its ranks go on among themselves and register it with the next daemon. */
        if (c->restart_hold_ms == 0)
            comm_abort(c, COOP_ABORT_BROKEN);
        comm_free(f, c);
    }
}
