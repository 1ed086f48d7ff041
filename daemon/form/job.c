/*
 * Jobs whose root is this daemon. HcclGetRootInfo opens a job (random id and key); ranks join
 * it with HcclCommInitRootInfo, here or from other daemons; when all nranks joined, the
 * communicator forms (comm.c; across daemons, after this daemon sent every other the
 * membership, membership.c) and every rank gets its answer. A job that does not fill up within
 * its timeout fails every joined rank with HCCL_E_TIMEOUT, naming the ranks that never arrived.
 * A rank whose nRanks differs from the job's fails the job at once, every joined rank and the
 * newcomer with HCCL_E_PARA and a reason naming both values and the ranks that gave each: no
 * rank retries with another nRanks, so the job could only time out, blaming ranks that came.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "env.h"
#include "form/job.h"
#include "log.h"
#include "text.h"

_Static_assert(FORM_MAX_RANKS <= ENGINE_RANK_MAX, "a comm's ranks fit the engine's");

static void job_unlink(form_t *f, job_t *j)
{
    for (job_t **pp = &f->jobs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            return;
        }
}

void form_job_free(form_t *f, job_t *j)
{
    job_unlink(f, j);
    for (uint32_t r = 0; j->ranks != NULL && r < j->nranks; r++) {
        lane_offer_close(&j->ranks[r].lane);
        share_note_free(&j->ranks[r].note);
    }
    free(j->ranks);
    free(j);
}

/* The ranks that joined (present) or not, "0,2,5", the first 32 and then ",...". */
static void rank_list(const job_t *j, int present, char *buf, size_t cap)
{
    size_t n = 0;
    uint32_t shown = 0;

    buf[0] = '\0';
    for (uint32_t r = 0; r < j->nranks && n + 16 < cap; r++)
        if ((j->ranks[r].c != NULL || j->ranks[r].link != NULL) == present) {
            text_add(buf, cap, &n, "%s%u", shown ? "," : "", r);
            if (++shown == 32 && r + 1 < j->nranks) {
                text_add(buf, cap, &n, ",...");
                break;
            }
        }
}

/* A membership that fails the job's ranks behind a peer daemon's link with result and why. */
static void refuse_link(form_t *f, void *link, HcclResult result, const char *why)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Membership mb = HCCLD__MEMBERSHIP__INIT;

    mb.result = result;
    mb.message = (char *)why;
    m.body_case = HCCLD__MSG__BODY_MEMBERSHIP;
    m.membership = &mb;
    f->ops->peer_send(f->ctx, link, &m);
}

/* Fails every rank that joined j with result and why (a remote daemon once, for all its
 * ranks), and frees j. */
static void job_fail(form_t *f, job_t *j, HcclResult result, const char *why)
{
    for (uint32_t r = 0; r < j->nranks; r++) {
        if (j->ranks[r].c != NULL)
            form_answer_result(f, j->ranks[r].c, j->ranks[r].req_id, result, why, j->nranks, r);
        else if (j->ranks[r].link != NULL && form_job_first_of_link(j, r))
            refuse_link(f, j->ranks[r].link, result, why); /* it answers its ranks once */
    }
    form_job_free(f, j);
}

static void job_timeout(form_t *f, job_t *j)
{
    char missing[256], why[320];

    if (j->nranks == 0) {
        INFO("INIT", "job %s: root info expired unused", j->hex);
        form_job_free(f, j);
        return;
    }
    rank_list(j, 0, missing, sizeof(missing));
    snprintf(why, sizeof(why), "timed out: %u of %u ranks joined; never arrived: %s", j->joined,
             j->nranks, missing);
    ERR("INIT", "job %s: %s", j->hex, why);
    job_fail(f, j, HCCL_E_TIMEOUT, why);
}

/* A job open for joins for timeout_s (0: the default) seconds from now. */
static job_t *job_open(form_t *f, const uint8_t *id, const uint8_t *key, uint32_t timeout_s,
                       uint64_t now)
{
    job_t *j = calloc(1, sizeof(*j));

    if (j == NULL)
        return NULL;
    memcpy(j->id, id, sizeof(j->id));
    memcpy(j->key, key, sizeof(j->key));
    hex_encode(j->id, sizeof(j->id), j->hex);
    j->timeout_s = timeout_s ? timeout_s : FORM_DEFAULT_TIMEOUT_S;
    j->deadline = now + (uint64_t)j->timeout_s * 1000;
    j->next = f->jobs;
    f->jobs = j;
    return j;
}

void form_root_info(form_t *f, const form_client_t *c, uint64_t req_id,
                    const Hccld__RootInfoReq *req, uint64_t now)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__RootInfoResp resp = HCCLD__ROOT_INFO_RESP__INIT;
    Hccld__RootInfo ri = HCCLD__ROOT_INFO__INIT;
    uint8_t id[ROOTINFO_ID_BYTES], key[ROOTINFO_KEY_BYTES];
    job_t *j = NULL;

    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_ROOT_INFO_RESP;
    m.root_info_resp = &resp;
    if (getrandom(id, sizeof(id), 0) != sizeof(id) ||
        getrandom(key, sizeof(key), 0) != sizeof(key) ||
        (j = job_open(f, id, key, req->timeout_s, now)) == NULL) {
        ERR("INIT", "getrandom() or allocation for a new job failed");
        resp.result = HCCL_E_INTERNAL;
        f->ops->client_send(f->ctx, c, &m, NULL, 0);
        return;
    }
    ri.version = 1;
    ri.job_id.data = j->id;
    ri.job_id.len = sizeof(j->id);
    ri.job_key.data = j->key;
    ri.job_key.len = sizeof(j->key);
    ri.root_addr = (char *)f->env.advertised;
    ri.root_socket = (char *)f->env.socket_path;
    resp.info = &ri;
    f->ops->client_send(f->ctx, c, &m, NULL, 0);
    INFO("INIT", "job %s opened for pid %d (joins accepted for %u s)", j->hex, c->pid,
         j->timeout_s);
}

static job_t *job_find(const form_t *f, const uint8_t *id)
{
    for (job_t *j = f->jobs; j != NULL; j = j->next)
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

int form_job_first_of_link(const job_t *j, uint32_t r)
{
    for (uint32_t q = 0; q < r; q++)
        if (j->ranks[q].link == j->ranks[r].link)
            return 0;
    return 1;
}

/* Why rank `rank` of `nranks` may not join j, or NULL; *mismatch is set when the reason is
 * an nRanks unlike the job's (which fails the job). */
static const char *join_refusal(const job_t *j, uint32_t nranks, uint32_t rank, int *mismatch)
{
    static char differs[384];

    if (nranks == 0 || nranks > FORM_MAX_RANKS)
        return "nRanks out of range";
    if (j->nranks != 0 && nranks != j->nranks) {
        char joined[256];
        rank_list(j, 1, joined, sizeof(joined));
        snprintf(
            differs, sizeof(differs),
            "ranks disagree on nRanks: rank %u passed %u, rank%s %s passed %u; every rank must "
            "pass the same",
            rank, nranks, strchr(joined, ',') ? "s" : "", joined, j->nranks);
        *mismatch = 1;
        return differs;
    }
    if (rank >= nranks)
        return "rank out of range";
    if (j->nranks != 0 && (j->ranks[rank].c != NULL || j->ranks[rank].link != NULL))
        return "this rank already joined";
    return NULL;
}

static int job_add(job_t *j, uint32_t nranks, uint32_t rank, const join_t *join)
{
    if (j->nranks == 0) {
        j->ranks = calloc(nranks, sizeof(*j->ranks));
        if (j->ranks == NULL)
            return -ENOMEM;
        for (uint32_t r = 0; r < nranks; r++)
            j->ranks[r].lane = LANE_OFFER_NONE;
        j->nranks = nranks;
    }
    j->ranks[rank] = *join;
    j->joined++;
    return 0;
}

static int job_is_local(const job_t *j)
{
    for (uint32_t r = 0; r < j->nranks; r++)
        if (j->ranks[r].link != NULL)
            return 0;
    return 1;
}

static uint32_t local_joins(const job_t *j)
{
    uint32_t n = 0;

    for (uint32_t r = 0; r < j->nranks; r++)
        n += j->ranks[r].c != NULL;
    return n;
}

static void job_check_complete(form_t *f, job_t *j)
{
    if (j->joined < j->nranks)
        return;
    if (job_is_local(j))
        form_comm_local(f, j->nranks, j->ranks, j->hex);
    else
        form_job_multinode(f, j);
    form_job_free(f, j);
}

/* The first rank of an agreed job on its root daemon opens it with the id and key every rank
 * computed; the other ranks' keys are checked against it as for issued root infos. */
static job_t *agreed_open(form_t *f, const Hccld__CommInitReq *req, uint64_t now)
{
    job_t *j = job_open(f, req->info->job_id.data, req->info->job_key.data, req->timeout_s, now);

    if (j != NULL)
        INFO("INIT", "agreed job %s opened by the join of rank %u of %u (joins accepted for %u s)",
             j->hex, req->rank, req->nranks, j->timeout_s);
    return j;
}

void form_comm_init(form_t *f, const form_client_t *c, uint64_t req_id,
                    const Hccld__CommInitReq *req, uint64_t now)
{
    const char *why = NULL;
    HcclResult result = HCCL_E_PARA;
    job_t *j = NULL;
    int mismatch = 0;

    if (req->info == NULL || req->info->job_id.len != ROOTINFO_ID_BYTES ||
        req->info->job_key.len != ROOTINFO_KEY_BYTES) {
        why = "malformed root info";
    } else if (req->info->root_addr[0] != '\0' && !f->ops->is_self(f->ctx, req->info->root_addr)) {
        form_rjob_join(f, c, req_id, req, now);
        return;
    } else if ((j = job_find(f, req->info->job_id.data)) == NULL && !req->agreed) {
        why = "unknown, expired or already used root info", result = HCCL_E_NOT_FOUND;
    } else if (j == NULL && (j = agreed_open(f, req, now)) == NULL) {
        why = "out of memory", result = HCCL_E_MEMORY;
    } else if (!key_equal(j->key, req->info->job_key.data)) {
        why = "wrong job key for this root info";
    } else if (req->nranks > FORM_MAX_LOCAL_RANKS && local_joins(j) >= FORM_MAX_LOCAL_RANKS) {
        /* A job may span daemons whatever its size; one daemon holds at most this many. */
        why = "too many ranks of this job on one node";
    } else {
        why = join_refusal(j, req->nranks, req->rank, &mismatch);
    }
    char err[160];
    join_t join = {.c = c,
                   .req_id = req_id,
                   .l0_mode = req->l0_mode,
                   .log_ops = req->log_ops,
                   .lane = LANE_OFFER_NONE};
    if (why == NULL && form_level1_take(&join.want, req->algo, req->algorithm, req->algo_by_config,
                                        req->deterministic, err, sizeof(err), join.notice,
                                        sizeof(join.notice)) != 0)
        why = err;
    form_retry_take(&join.retry, req);
    join.qos_class = form_qos_class(f, c, req->qos_level_set, req->qos_level);
    if (req->parent_job_id.len == SHARE_JOB_BYTES) {
        join.has_parent = 1;
        memcpy(join.parent, req->parent_job_id.data, SHARE_JOB_BYTES);
    }
    /* Lanes only matter to a comm that spans daemons, which needs a peer listener. */
    if (why == NULL && f->env.advertised[0] != '\0')
        join.lane = lane_offer_make(f->env.data_addr, req->direct_max);
    if (why == NULL && job_add(j, req->nranks, req->rank, &join) != 0)
        why = "out of memory", result = HCCL_E_MEMORY;
    if (why != NULL) {
        lane_offer_close(&join.lane);
        WARN("INIT", "pid %d: comm init refused: %s", c->pid, why);
        form_answer_result(f, c, req_id, result, why, req->nranks, req->rank);
        if (mismatch)
            job_fail(f, j, HCCL_E_PARA, why);
        return;
    }
    DBG("INIT", "job %s: rank %u of %u joined (pid %d)", j->hex, req->rank, j->nranks, c->pid);
    job_check_complete(f, j);
}

void form_remote_join(form_t *f, void *link, const char *addr, const uint8_t *job_id,
                      const Hccld__JoinReq *req, uint64_t now)
{
    job_t *j = job_find(f, job_id);
    int mismatch = 0;
    const char *why =
        j == NULL ? "the job is gone" : join_refusal(j, req->nranks, req->rank, &mismatch);
    join_t join = {.link = link, .lane = LANE_OFFER_NONE};

    snprintf(join.lane.addr, sizeof(join.lane.addr), "%s", req->lane_addr);
    join.lane.direct_max = req->direct_max;
    snprintf(join.node, sizeof(join.node), "%s", addr);
    snprintf(join.data, sizeof(join.data), "%s", req->data_addr);
    snprintf(join.rdma, sizeof(join.rdma), "%s", req->rdma_addr);
    share_note_add(&join.note,
                   req->parent_job_id.len == SHARE_JOB_BYTES ? req->parent_job_id.data : NULL,
                   (const char *const *)req->linked, req->n_linked);
    if (why == NULL && job_add(j, req->nranks, req->rank, &join) != 0)
        why = "out of memory";
    if (why != NULL) {
        share_note_free(&join.note);
        WARN("INIT", "daemon %s: rank %u refused: %s", addr, req->rank, why);
        refuse_link(f, link, HCCL_E_PARA, why);
        if (mismatch)
            job_fail(f, j, HCCL_E_PARA, why);
        return;
    }
    DBG("INIT", "job %s: rank %u of %u joined from daemon %s", j->hex, req->rank, j->nranks, addr);
    job_check_complete(f, j);
}

int form_jobs_link_gone(form_t *f, void *link)
{
    int forming = 0;

    for (job_t *j = f->jobs; j != NULL; j = j->next)
        for (uint32_t r = 0; r < j->nranks; r++)
            if (j->ranks[r].link == link) {
                share_note_free(&j->ranks[r].note);
                j->ranks[r] = (join_t){.lane = LANE_OFFER_NONE};
                j->joined--;
                forming = 1;
            }
    return forming;
}

int form_jobs_key_for(const form_t *f, const uint8_t *job_id, uint8_t *key)
{
    job_t *j = job_find(f, job_id);

    if (j == NULL)
        return -ENOENT;
    memcpy(key, j->key, ROOTINFO_KEY_BYTES);
    return 0;
}

void form_jobs_client_gone(form_t *f, const form_client_t *c)
{
    for (job_t *j = f->jobs; j != NULL; j = j->next)
        for (uint32_t r = 0; r < j->nranks; r++)
            if (j->ranks[r].c == c) {
                lane_offer_close(&j->ranks[r].lane);
                j->ranks[r] = (join_t){.lane = LANE_OFFER_NONE};
                j->joined--;
            }
}

void form_jobs_stop(form_t *f)
{
    while (f->jobs != NULL)
        form_job_free(f, f->jobs);
}

uint64_t form_jobs_deadline(const form_t *f)
{
    uint64_t d = FORM_NEVER;

    for (const job_t *j = f->jobs; j != NULL; j = j->next)
        d = j->deadline < d ? j->deadline : d;
    return d;
}

void form_jobs_expire(form_t *f, uint64_t now)
{
    for (job_t *j = f->jobs, *next; j != NULL; j = next) {
        next = j->next;
        if (j->deadline <= now)
            job_timeout(f, j);
    }
}
