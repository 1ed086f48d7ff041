/*
 * Comms registered again after a daemon restart (issue 37, part 3). A comm formed on this node
 * whose ranks wait for restarts gets a random secret, which each rank receives with its init
 * answer (resume_token) and nobody else knows. After a restart each rank's process connects
 * again (the same segment and arena) and asks with the comm's id and secret; the requests are
 * grouped by both, so a process that does not know the secret can never join a comm, nor spoil
 * the group of those who do. Once nranks distinct ranks of one group asked, the comm is formed
 * again under its old id with the same secret, the engine is told how far its pieces had got
 * (engine_resume_t), and every rank is answered. A group that does not fill within the hold
 * time its ranks give fails their wait with HCCL_E_REMOTE, naming the ranks that are missing.
 * A cooperative comm's ranks must be one tenant (uid and job name), as when it formed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coop.h"
#include "form/form_int.h"
#include "futex.h"
#include "log.h"
#include <sodium.h>

typedef struct rejoin_rank {
    const form_client_t *c; /* NULL: not asked yet */
    uint64_t req_id;
    uint64_t coll_next, coll_posted;
    uint64_t *send_next, *recv_next; /* [nranks] */
} rejoin_rank_t;

struct rejoin {
    uint32_t comm_id, nranks;
    uint8_t secret[FORM_SECRET_BYTES];
    int coop;
    uint64_t chunk;
    uint32_t hold_ms; /* the least the ranks gave */
    uint64_t deadline;
    uint32_t got;
    uint32_t need;   /* ranks that must ask: all of them, or this node's of a comm across daemons */
    uint8_t *record; /* a comm across daemons: its record (record.c), as the ranks hold it */
    size_t record_len;
    int coop_fd; /* the control block, from the first rank that sent it; or -1 */
    rejoin_rank_t *r;
    rejoin_t *next;
};

static void rejoin_free(rejoin_t *j)
{
    for (uint32_t q = 0; j->r != NULL && q < j->nranks; q++) {
        free(j->r[q].send_next);
        free(j->r[q].recv_next);
    }
    if (j->coop_fd >= 0)
        close(j->coop_fd);
    free(j->record);
    free(j->r);
    free(j);
}

static void rejoin_unlink(form_t *f, rejoin_t *j)
{
    for (rejoin_t **pp = &f->rejoins; *pp != NULL; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            return;
        }
}

/* The coop control block a rank handed back, mapped; NULL when it is not one of nranks. */
static coop_ctl_t *coop_map(int fd, uint32_t nranks, uint64_t *bytes_p)
{
    uint64_t bytes = coop_ctl_bytes(nranks);
    struct stat st;
    coop_ctl_t *ctl;

    /* Sealed against shrinking (shm_memfd_map), so the mapping cannot fault later. */
    if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != bytes ||
        (fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK) == 0)
        return NULL;
    ctl = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ctl == MAP_FAILED)
        return NULL;
    if (ctl->magic != COOP_MAGIC || ctl->nranks != nranks) {
        munmap(ctl, bytes);
        return NULL;
    }
    *bytes_p = bytes;
    return ctl;
}

/* Fails every rank that asked, and wakes the cooperative ranks that wait in the block. */
static void rejoin_fail(form_t *f, rejoin_t *j, HcclResult result, const char *why)
{
    uint64_t bytes;
    coop_ctl_t *ctl = j->coop ? coop_map(j->coop_fd, j->nranks, &bytes) : NULL;

    WARN("INIT", "comm %u: not registered again after the daemon restart: %s", j->comm_id, why);
    for (uint32_t q = 0; q < j->nranks; q++)
        if (j->r[q].c != NULL)
            form_answer_result(f, j->r[q].c, j->r[q].req_id, result, why, j->nranks, q);
    if (ctl != NULL) {
        __atomic_fetch_or(&ctl->abort, COOP_ABORT_BROKEN, __ATOMIC_RELEASE);
        __atomic_add_fetch(&ctl->bell, 1, __ATOMIC_ACQ_REL);
        futex_wake(&ctl->bell, INT32_MAX);
        munmap(ctl, bytes);
    }
}

/* Every collective piece below the largest coll_next completed for some rank; every rank had
 * posted those below the least coll_posted. */
static int resume_bounds(const rejoin_t *j, engine_resume_t *er, uint64_t *p2p)
{
    uint32_t n = j->nranks;

    er->done_below = 0;
    er->maybe_started = UINT64_MAX;
    for (uint32_t q = 0; q < n; q++) {
        const rejoin_rank_t *r = &j->r[q];
        if (r->c == NULL)
            continue; /* another node's */
        if (r->coll_next > er->done_below)
            er->done_below = r->coll_next;
        if (r->coll_posted < er->maybe_started)
            er->maybe_started = r->coll_posted;
    }
    /* Across daemons a transfer with another node is matched in posting order, not numbered:
     * one the old daemon had taken completed before the drain (span/drain.c). */
    er->p2p_done = NULL;
    if (j->record != NULL)
        return 0;
    for (uint32_t a = 0; a < n; a++)
        for (uint32_t b = 0; b < n; b++) {
            uint64_t s = j->r[a].send_next[b], r = j->r[b].recv_next[a];
            p2p[(size_t)a * n + b] = s > r ? s : r;
        }
    er->p2p_done = p2p;
    return 0;
}

/* Forms comm c of group j again: on this node alone, or as the node of a comm across daemons
 * that came back (its ranks saw every collective piece below `below` complete). NULL, or why
 * not. */
static const char *comm_again(form_t *f, const rejoin_t *j, form_comm_t *c, const uint64_t *sids,
                              uint64_t below)
{
    const char *why = NULL;

    if (j->record == NULL)
        return engine_comm_create(f->env.eng, c->id, j->nranks, sids) != 0
                   ? "the engine could not take it"
                   : NULL;
    Hccld__SpanRecord *sr = form_record_read(j->record, j->record_len, j->nranks, &why);
    if (sr == NULL)
        return why;
    c->nnodes = (uint32_t)sr->membership->n_data_nodes;
    /* How far each local rank's send/recv with every rank got (span/p2p_log.c). */
    size_t n = j->nranks, k = 0;
    uint64_t *next = calloc(2 * (size_t)j->need * n + 1, sizeof(*next));
    for (uint32_t q = 0; next != NULL && q < n && k < j->need; q++)
        if (j->r[q].c != NULL) {
            memcpy(next + k * n, j->r[q].send_next, n * sizeof(*next));
            memcpy(next + (j->need + k) * n, j->r[q].recv_next, n * sizeof(*next));
            k++;
        }
    if (next == NULL)
        why = "out of memory";
    else if (form_record_comm(f, c, sr, next, below, &why) != HCCL_SUCCESS && why == NULL)
        why = "the daemon could not set up the communicator";
    hccld__span_record__free_unpacked(sr, NULL);
    free(next);
    return why;
}

static void rejoin_complete(form_t *f, rejoin_t *j)
{
    uint32_t n = j->nranks;
    uint64_t *sids = calloc(n, sizeof(*sids)), *p2p = calloc((size_t)n * n, sizeof(*p2p));
    engine_resume_t er;
    form_comm_t *c = NULL;
    const char *why = NULL;

    if (sids == NULL || p2p == NULL) {
        why = "out of memory";
        goto out;
    }
    if (form_comm_find(f, j->comm_id) != NULL) {
        why = "its id is taken by a comm formed since the restart";
        goto out;
    }
    for (uint32_t q = 0; q < n; q++)
        sids[q] = j->r[q].c != NULL ? j->r[q].c->sid : 0;
    resume_bounds(j, &er, p2p);
    c = form_comm_add_id(f, j->comm_id, n, 1, "");
    if (c == NULL) {
        why = "out of memory";
        goto out;
    }
    c->nlocal = j->need;
    memcpy(c->sids, sids, n * sizeof(*sids));
    snprintf(c->job_hex, sizeof(c->job_hex), "resumed");
    if (j->coop && (c->coop = coop_map(j->coop_fd, n, &c->coop_bytes)) == NULL) {
        why = "its cooperative control block is not one";
        goto out;
    }
    if (j->coop) {
        c->coop_fd = j->coop_fd;
        j->coop_fd = -1;
    }
    if ((why = comm_again(f, j, c, sids, er.done_below)) != NULL)
        goto out;
    if (engine_comm_resume(f->env.eng, c->id, &er) != 0) {
        why = "the engine could not take it";
        goto out;
    }
    /* The next restart: the same secret (the ranks keep theirs) and hold. */
    c->restart_hold_ms = j->hold_ms;
    memcpy(c->secret, j->secret, sizeof(c->secret));
    INFO("INIT",
         "comm %u registered again after the daemon restart: %u ranks%s, level 0 %s, pieces "
         "done below %llu, maybe under way below %llu",
         c->id, j->need, j->record != NULL ? " here, across daemons" : "",
         c->coop ? "cooperative" : "by the daemon", (unsigned long long)er.done_below,
         (unsigned long long)(er.maybe_started == UINT64_MAX ? 0 : er.maybe_started));
    Hccld__CommInitResp r = HCCLD__COMM_INIT_RESP__INIT;
    r.message = "";
    r.comm_id = c->id;
    r.nranks = n;
    r.chunk_bytes = j->chunk;
    r.l0_mode = c->coop ? FORM_L0_COOP : FORM_L0_DAEMON;
    r.nnodes = c->nnodes;
    r.qos_class = (char *)f->env.qos->cls[c->qos_class].name;
    r.notice = "";
    r.resume_token.data = c->secret;
    r.resume_token.len = sizeof(c->secret);
    for (uint32_t q = 0; q < n; q++) {
        r.rank = q;
        if (j->r[q].c != NULL)
            form_send(f, j->r[q].c, j->r[q].req_id, &r, NULL, 0);
    }
    c->rejoined = 1;
    f->rejoined++;
    form_comm_step(c, COMM_EV_FORMED);
    f->ops->comm_formed(f->ctx, c);
    c = NULL;
out:
    if (why != NULL) {
        rejoin_fail(f, j, HCCL_E_REMOTE, why);
        if (c != NULL)
            form_comm_drop(f, c);
    }
    free(sids);
    free(p2p);
}

static int same_group(const rejoin_t *j, const Hccld__CommRejoinReq *req)
{
    return j->comm_id == req->comm_id && req->token.len == sizeof(j->secret) &&
           sodium_memcmp(j->secret, req->token.data, sizeof(j->secret)) == 0;
}

/* This node's ranks of the comm across daemons req's record describes; 0 when it is not one,
 * or does not put req's rank on this node. */
static uint32_t record_need(const Hccld__CommRejoinReq *req)
{
    const char *why;
    Hccld__SpanRecord *sr =
        form_record_read(req->span_record.data, req->span_record.len, req->nranks, &why);
    uint32_t n = 0;

    for (uint32_t r = 0; sr != NULL && r < req->nranks; r++)
        n += sr->membership->rank_node[r] == sr->me;
    if (sr != NULL && sr->membership->rank_node[req->rank] != sr->me)
        n = 0;
    if (sr != NULL)
        hccld__span_record__free_unpacked(sr, NULL);
    return n;
}

static rejoin_t *rejoin_get(form_t *f, const Hccld__CommRejoinReq *req, uint64_t now)
{
    rejoin_t *j = calloc(1, sizeof(*j));

    if (j == NULL || (j->r = calloc(req->nranks, sizeof(*j->r))) == NULL) {
        free(j);
        return NULL;
    }
    j->need = req->nranks;
    if (req->span_record.len > 0) {
        j->need = record_need(req);
        if ((j->record = malloc(req->span_record.len)) == NULL) {
            free(j->r);
            free(j);
            return NULL;
        }
        memcpy(j->record, req->span_record.data, req->span_record.len);
        j->record_len = req->span_record.len;
    }
    j->comm_id = req->comm_id;
    j->nranks = req->nranks;
    memcpy(j->secret, req->token.data, sizeof(j->secret));
    j->coop = req->coop;
    j->chunk = req->chunk_bytes;
    j->hold_ms = req->hold_ms;
    j->deadline = now + req->hold_ms;
    j->coop_fd = -1;
    j->next = f->rejoins;
    f->rejoins = j;
    return j;
}

/* Why req cannot be rank req->rank of its group j (NULL: new group) (NULL: it can). */
static const char *rejoin_refusal(const rejoin_t *j, const form_client_t *c,
                                  const Hccld__CommRejoinReq *req)
{
    int across = req->span_record.len > 0;

    if (req->nranks == 0 || req->nranks > (across ? FORM_MAX_RANKS : FORM_MAX_LOCAL_RANKS) ||
        req->rank >= req->nranks)
        return "rank or rank count out of range";
    if (req->n_send_next != req->nranks || req->n_recv_next != req->nranks ||
        req->token.len != FORM_SECRET_BYTES || req->comm_id == 0 || (across && req->coop))
        return "malformed request";
    if (across && record_need(req) == 0)
        return "its record of the comm across daemons is not one, or puts the rank elsewhere";
    if (j == NULL)
        return NULL;
    if (j->nranks != req->nranks || j->coop != req->coop || j->chunk != req->chunk_bytes ||
        j->record_len != req->span_record.len ||
        (across && memcmp(j->record, req->span_record.data, j->record_len) != 0))
        return "the ranks disagree on the comm";
    if (j->r[req->rank].c != NULL)
        return "the rank asked twice";
    for (uint32_t q = 0; q < j->nranks && j->coop; q++) {
        const form_client_t *o = j->r[q].c;
        if (o != NULL && (o->uid != c->uid || strcmp(o->job_name, c->job_name) != 0))
            return "a cooperative comm's ranks are one tenant (uid and HCCL_JOB_NAME)";
    }
    return NULL;
}

void form_comm_rejoin(form_t *f, const form_client_t *c, uint64_t req_id,
                      const Hccld__CommRejoinReq *req, int coop_fd, uint64_t now)
{
    rejoin_t *j = NULL;
    const char *why;

    for (rejoin_t *k = f->rejoins; k != NULL && j == NULL; k = k->next)
        if (same_group(k, req))
            j = k;
    why = rejoin_refusal(j, c, req);
    if (why == NULL && form_comm_find(f, req->comm_id) != NULL)
        why = "the comm is already known here";
    if (why == NULL && j == NULL && (j = rejoin_get(f, req, now)) == NULL)
        why = "out of memory";
    rejoin_rank_t *r = why == NULL ? &j->r[req->rank] : NULL;
    if (r != NULL) {
        r->send_next = malloc(req->nranks * sizeof(uint64_t));
        r->recv_next = malloc(req->nranks * sizeof(uint64_t));
        if (r->send_next == NULL || r->recv_next == NULL)
            why = "out of memory";
    }
    if (why != NULL) {
        WARN("INIT", "client %llu (pid %d): comm %u rank %u not registered again: %s",
             (unsigned long long)c->sid, c->pid, req->comm_id, req->rank, why);
        if (coop_fd >= 0)
            close(coop_fd);
        form_answer_result(f, c, req_id, HCCL_E_PARA, why, req->nranks, req->rank);
        return;
    }
    memcpy(r->send_next, req->send_next, req->nranks * sizeof(uint64_t));
    memcpy(r->recv_next, req->recv_next, req->nranks * sizeof(uint64_t));
    r->c = c;
    r->req_id = req_id;
    r->coll_next = req->coll_next;
    r->coll_posted = req->coll_posted;
    if (req->hold_ms < j->hold_ms)
        j->hold_ms = req->hold_ms;
    if (j->coop_fd < 0)
        j->coop_fd = coop_fd;
    else if (coop_fd >= 0)
        close(coop_fd);
    DBG("INIT", "comm %u: rank %u (pid %d) asks to be registered again (%u of %u)", j->comm_id,
        req->rank, c->pid, j->got + 1, j->need);
    if (++j->got < j->need)
        return;
    rejoin_unlink(f, j);
    rejoin_complete(f, j);
    rejoin_free(j);
}

void form_rejoins_client_gone(form_t *f, const form_client_t *c)
{
    for (rejoin_t *j = f->rejoins, *next; j != NULL; j = next) {
        next = j->next;
        for (uint32_t q = 0; q < j->nranks; q++) {
            if (j->r[q].c != c)
                continue;
            char why[96];
            j->r[q].c = NULL;
            snprintf(why, sizeof(why), "rank %u (pid %d) went away", q, c->pid);
            rejoin_unlink(f, j);
            rejoin_fail(f, j, HCCL_E_REMOTE, why);
            rejoin_free(j);
            break;
        }
    }
}

int form_rejoin_pending(const form_t *f, uint32_t id)
{
    for (const rejoin_t *j = f->rejoins; j != NULL; j = j->next)
        if (j->comm_id == id)
            return 1;
    return 0;
}

uint64_t form_rejoins_deadline(const form_t *f)
{
    uint64_t d = UINT64_MAX;

    for (const rejoin_t *j = f->rejoins; j != NULL; j = j->next)
        if (j->deadline < d)
            d = j->deadline;
    return d;
}

/* The ranks of j that have not asked yet, as "1 2 ...", into buf. */
static void missing_ranks(const rejoin_t *j, char *buf, size_t cap)
{
    size_t len = 0;

    buf[0] = '\0';
    for (uint32_t q = 0; q < j->nranks && len + 12 < cap; q++)
        if (j->r[q].c == NULL)
            len += (size_t)snprintf(buf + len, cap - len, "%s%u", len ? " " : "", q);
}

unsigned form_rejoins_view(const form_t *f, form_rejoin_view_t *out, unsigned max, uint64_t now)
{
    unsigned n = 0;

    for (const rejoin_t *j = f->rejoins; j != NULL; j = j->next, n++) {
        if (n >= max)
            continue;
        out[n] = (form_rejoin_view_t){.comm_id = j->comm_id,
                                      .nranks = j->nranks,
                                      .back = j->got,
                                      .coop = j->coop,
                                      .left_ms = j->deadline > now ? j->deadline - now : 0};
        missing_ranks(j, out[n].missing, sizeof(out[n].missing));
    }
    return n;
}

uint64_t form_comms_rejoined(const form_t *f)
{
    return f->rejoined;
}

uint64_t form_coop_pieces_retired(const form_t *f)
{
    return f->coop_retired;
}

void form_rejoins_expire(form_t *f, uint64_t now)
{
    for (rejoin_t *j = f->rejoins, *next; j != NULL; j = next) {
        next = j->next;
        if (now < j->deadline)
            continue;
        char why[200], missing[128];
        missing_ranks(j, missing, sizeof(missing));
        snprintf(why, sizeof(why), "rank(s) did not come back within %u ms: %s", j->hold_ms,
                 missing);
        rejoin_unlink(f, j);
        rejoin_fail(f, j, HCCL_E_REMOTE, why);
        rejoin_free(j);
    }
}

void form_rejoins_stop(form_t *f)
{
    while (f->rejoins != NULL) {
        rejoin_t *j = f->rejoins;
        f->rejoins = j->next;
        /* Unanswered: the ranks see the daemon go and ask the next one. */
        rejoin_free(j);
    }
}
