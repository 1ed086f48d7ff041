/*
 * The root daemon completes a job whose ranks live on several daemons: it decides the
 * membership (the daemons in order of their first rank, each rank's daemon placed in any way),
 * the class and piece size, the lanes and the connections a split's child shares, tells every
 * other daemon once, sets up its own part of the comm, and answers its own ranks.
 */
#include <stdlib.h>
#include <string.h>

#include "form/job.h"
#include "log.h"

/* What the root decides, with the room it needs. */
typedef struct decision {
    char **nodes, **data, **rdma; /* per node */
    uint32_t *rank_node, nn;
    char **lane_addrs;
    uint64_t *lane_max, direct_max;
    share_note_t own, *notes; /* this daemon's word on its parent; the others' per node */
    uint32_t *pairs;
    share_plan_t plan;
    int cls;
    uint64_t chunk;
    form_retry_t retry; /* the first local rank's */
} decision_t;

static int decision_alloc(decision_t *d, uint32_t n)
{
    memset(d, 0, sizeof(*d));
    d->nodes = calloc(n, sizeof(*d->nodes));
    d->data = calloc(n, sizeof(*d->data));
    d->rdma = calloc(n, sizeof(*d->rdma));
    d->rank_node = calloc(n, sizeof(*d->rank_node));
    d->lane_addrs = calloc(n, sizeof(*d->lane_addrs));
    d->lane_max = calloc(n, sizeof(*d->lane_max));
    d->notes = calloc(n, sizeof(*d->notes));
    return d->nodes && d->data && d->rdma && d->rank_node && d->lane_addrs && d->lane_max &&
                   d->notes
               ? 0
               : -1;
}

static void decision_free(decision_t *d)
{
    for (uint32_t i = 0; d->notes != NULL && i < d->nn; i++)
        share_note_free(&d->notes[i]);
    share_note_free(&d->own);
    free(d->nodes);
    free(d->data);
    free(d->rdma);
    free(d->rank_node);
    free(d->lane_addrs);
    free(d->lane_max);
    free(d->notes);
    free(d->pairs);
}

/* Node list (daemon addresses in order of their first rank) and each rank's node. */
static void job_nodes(const form_t *f, job_t *j, decision_t *d)
{
    for (uint32_t r = 0; r < j->nranks; r++) {
        join_t *jn = &j->ranks[r];
        const char *a = jn->link != NULL ? jn->node : f->env.advertised;
        uint32_t k = 0;
        while (k < d->nn && strcmp(d->nodes[k], a) != 0)
            k++;
        if (k == d->nn) {
            d->data[d->nn] = (char *)(jn->link != NULL ? jn->data : f->env.data_addr);
            d->rdma[d->nn] = (char *)(jn->link != NULL ? jn->rdma : f->env.rdma_addr);
            d->nodes[d->nn++] = (char *)a;
        }
        d->rank_node[r] = k;
    }
}

/* The root's own word on its parent's connections, from its local ranks. */
static void root_note(form_t *f, const job_t *j, share_note_t *n)
{
    share_word_t w;

    for (uint32_t r = 0; r < j->nranks; r++) {
        const join_t *jn = &j->ranks[r];
        if (jn->c == NULL)
            continue;
        if (share_word(f, jn->has_parent ? jn->parent : NULL, jn->c->sid, &w) != 0) {
            share_note_add(n, NULL, NULL, 0);
            continue;
        }
        share_note_add(n, w.parent, w.ptrs, w.n);
        share_word_free(&w);
    }
}

/* A split's child: which of its pairs of daemons share their parent's connection. Every
 * daemon's word came with its ranks' joins. */
static int job_share_pairs(form_t *f, const job_t *j, decision_t *d)
{
    const share_note_t **notes = calloc(d->nn, sizeof(*notes));

    if (notes == NULL || (d->pairs = calloc((size_t)d->nn * d->nn, sizeof(*d->pairs))) == NULL) {
        free(notes);
        return -1;
    }
    root_note(f, j, &d->own);
    for (uint32_t r = 0; r < j->nranks; r++) {
        uint32_t k = d->rank_node[r];
        if (j->ranks[r].link != NULL)
            share_note_merge(&d->notes[k], &j->ranks[r].note);
        notes[k] = j->ranks[r].link != NULL ? &d->notes[k] : &d->own;
    }
    d->plan.npairs = share_pairs(notes, (const char *const *)d->data, d->nn, d->pairs);
    d->plan.parent = d->own.parent;
    d->plan.pairs = d->pairs;
    free(notes);
    return 0;
}

static void job_lanes(const job_t *j, decision_t *d)
{
    for (uint32_t r = 0; r < j->nranks; r++) {
        d->lane_addrs[r] = (char *)j->ranks[r].lane.addr;
        d->lane_max[r] = j->ranks[r].lane.direct_max;
    }
    d->direct_max = lanes_direct_max((const char *const *)d->lane_addrs, d->lane_max, j->nranks);
}

static void membership_fill(const form_t *f, const job_t *j, const decision_t *d,
                            Hccld__Membership *mb)
{
    if (d->plan.npairs > 0) {
        mb->parent_job_id.data = (uint8_t *)d->own.parent;
        mb->parent_job_id.len = SHARE_JOB_BYTES;
        mb->n_shared_pairs = 2 * d->plan.npairs;
        mb->shared_pairs = d->pairs;
    }
    mb->nranks = j->nranks;
    mb->n_nodes = mb->n_data_nodes = mb->n_rdma_nodes = d->nn;
    mb->nodes = d->nodes;
    mb->data_nodes = d->data;
    mb->rdma_nodes = d->rdma;
    mb->n_rank_node = j->nranks;
    mb->rank_node = d->rank_node;
    mb->qos_class = (char *)f->env.qos->cls[d->cls].name;
    mb->direct_max = d->direct_max;
    mb->n_lane_addrs = j->nranks;
    mb->lane_addrs = d->lane_addrs;
    mb->chunk_bytes = d->chunk;
    form_retry_put(&d->retry, mb);
}

/* Our part of the comm: a record of our ranks, and its engine half. */
static HcclResult job_own_part(form_t *f, job_t *j, const decision_t *d, form_comm_t **cp,
                               const char **why)
{
    const form_level1_t *want = NULL;
    int log_ops = 0;
    form_comm_t *c = form_comm_add(f, j->nranks, d->nn, j->hex);

    *cp = c;
    if (c == NULL)
        return HCCL_E_MEMORY;
    for (uint32_t r = 0; r < j->nranks; r++)
        if (j->ranks[r].c != NULL) {
            c->sids[r] = j->ranks[r].c->sid;
            c->nlocal++;
            want = want != NULL ? want : &j->ranks[r].want;
            log_ops |= j->ranks[r].log_ops;
        }
    return form_comm_multinode(f, c, (const char *const *)d->data, d->rank_node, d->nn, j->id,
                               j->key,
                               &(multinode_opts_t){.want = want,
                                                   .log_ops = log_ops,
                                                   .qos_class = d->cls,
                                                   .plan = &d->plan,
                                                   .rdma_nodes = (const char *const *)d->rdma,
                                                   .nodes = (const char *const *)d->nodes,
                                                   .connect_timeout_s = j->timeout_s,
                                                   .retry = &d->retry},
                               why);
}

void form_job_multinode(form_t *f, job_t *j)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Membership mb = HCCLD__MEMBERSHIP__INIT;
    form_comm_t *c = NULL;
    const char *why = "out of memory";
    HcclResult result = HCCL_E_MEMORY;
    decision_t d;

    if (decision_alloc(&d, j->nranks) == 0) {
        job_nodes(f, j, &d);
        if (job_share_pairs(f, j, &d) == 0) {
            /* The root decides the class for every daemon: the least favoured of its local
             * ranks'; the class also sets the piece size, the same on every node. */
            d.cls = form_least_class(f, j->ranks, j->nranks);
            d.chunk = (uint64_t)f->env.qos->cls[d.cls].chunk_kib << 10;
            for (uint32_t r = j->nranks; r-- > 0;)
                if (j->ranks[r].c != NULL)
                    d.retry = j->ranks[r].retry;
            job_lanes(j, &d);
            membership_fill(f, j, &d, &mb);
            m.body_case = HCCLD__MSG__BODY_MEMBERSHIP;
            m.membership = &mb;
            engine_job_expect(f->env.eng, j->id, j->key);
            for (uint32_t r = 0; r < j->nranks; r++)
                if (j->ranks[r].link != NULL && form_job_first_of_link(j, r))
                    f->ops->peer_send(f->ctx, j->ranks[r].link, &m);
            result = job_own_part(f, j, &d, &c, &why);
        }
    }
    if (result == HCCL_SUCCESS) {
        INFO("INIT", "job %s: comm %u formed with %u ranks on %u daemons", j->hex, c->id, j->nranks,
             d.nn);
        lanes_info_t lanes = {
            .addrs = (const char *const *)d.lane_addrs, .direct_max = d.direct_max, .key = j->key};
        for (uint32_t r = 0; r < j->nranks; r++)
            if (j->ranks[r].c != NULL)
                form_answer_multinode(f, j->ranks[r].c, j->ranks[r].req_id, c, r, d.chunk,
                                      j->ranks[r].notice, &j->ranks[r].lane, &lanes);
        form_comm_step(c, COMM_EV_FORMED);
        f->ops->comm_formed(f->ctx, c);
    } else {
        ERR("INIT", "job %s: forming comm %u failed: %s", j->hex, c != NULL ? c->id : 0, why);
        for (uint32_t r = 0; r < j->nranks; r++)
            if (j->ranks[r].c != NULL)
                form_answer_result(f, j->ranks[r].c, j->ranks[r].req_id, result, why, j->nranks, r);
        if (c != NULL)
            form_comm_drop(f, c);
    }
    decision_free(&d);
}
