/*
 * HcclCommSplit on the daemon: the k-th split call of every rank of a parent communicator is
 * gathered; then each color forms a child (ranks ordered by key, then parent rank) and every
 * rank gets its answer. A rank that never calls makes the others fail with HCCL_E_TIMEOUT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "form/form_int.h"
#include "hccl/hccl.h"
#include "log.h"

typedef struct split_rank {
    join_t join; /* join.c NULL: not called yet */
    uint32_t color, key;
} split_rank_t;

struct split {
    uint32_t parent;
    uint64_t seq;
    uint32_t nranks, called;
    char hex[FORM_JOB_HEX];
    split_rank_t *r;
    uint64_t deadline; /* ms: the ranks that called fail if the others did not by then */
    split_t *next;
};

static void split_free(form_t *f, split_t *sp)
{
    for (split_t **pp = &f->splits; *pp != NULL; pp = &(*pp)->next)
        if (*pp == sp) {
            *pp = sp->next;
            break;
        }
    free(sp->r);
    free(sp);
}

static void split_fail(form_t *f, split_t *sp, HcclResult result, const char *why)
{
    WARN("INIT", "comm %u split %llu: %s", sp->parent, (unsigned long long)sp->seq, why);
    for (uint32_t r = 0; r < sp->nranks; r++)
        if (sp->r[r].join.c != NULL)
            form_answer_result(f, sp->r[r].join.c, sp->r[r].join.req_id, result, why, 0, 0);
    split_free(f, sp);
}

static int by_key(const void *a, const void *b, void *arg)
{
    const split_rank_t *r = arg;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    if (r[x].key != r[y].key)
        return r[x].key < r[y].key ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* Forms one child per color, then answers the ranks that asked for none. */
static void split_complete(form_t *f, split_t *sp)
{
    uint32_t *order = calloc(sp->nranks, sizeof(*order));
    join_t *child = calloc(sp->nranks, sizeof(*child));
    char hex[33];

    for (uint32_t r = 0; order && child && r < sp->nranks; r++) {
        uint32_t color = sp->r[r].color, n = 0;
        if (color == HCCL_SPLIT_NOCOLOR) {
            form_answer_result(f, sp->r[r].join.c, sp->r[r].join.req_id, HCCL_SUCCESS, "", 0, 0);
            continue;
        }
        int first = 1;
        for (uint32_t q = 0; q < r && first; q++)
            first = sp->r[q].color != color;
        if (!first)
            continue;
        for (uint32_t q = r; q < sp->nranks; q++)
            if (sp->r[q].color == color)
                order[n++] = q;
        qsort_r(order, n, sizeof(*order), by_key, sp->r);
        for (uint32_t i = 0; i < n; i++)
            child[i] = sp->r[order[i]].join;
        snprintf(hex, sizeof(hex), "%.16s.s%llu.c%u", sp->hex, (unsigned long long)sp->seq, color);
        form_comm_local(f, n, child, hex);
    }
    free(order);
    free(child);
    split_free(f, sp);
}

static split_t *split_get(form_t *f, const form_comm_t *c, const Hccld__CommSplitReq *req,
                          uint64_t now)
{
    split_t *sp;

    for (sp = f->splits; sp != NULL; sp = sp->next)
        if (sp->parent == c->id && sp->seq == req->seq)
            return sp;
    if ((sp = calloc(1, sizeof(*sp))) == NULL ||
        (sp->r = calloc(c->nranks, sizeof(*sp->r))) == NULL) {
        free(sp);
        return NULL;
    }
    sp->parent = c->id;
    sp->seq = req->seq;
    sp->nranks = c->nranks;
    snprintf(sp->hex, sizeof(sp->hex), "%s", c->job_hex);
    sp->deadline =
        now + (uint64_t)(req->timeout_s ? req->timeout_s : FORM_DEFAULT_TIMEOUT_S) * 1000;
    sp->next = f->splits;
    f->splits = sp;
    return sp;
}

void form_comm_split(form_t *f, const form_client_t *c, uint64_t req_id,
                     const Hccld__CommSplitReq *req, uint64_t now)
{
    form_comm_t *pc = form_comm_find(f, req->comm_id);
    const char *why = NULL;
    HcclResult result = HCCL_E_PARA;
    split_t *sp = NULL;
    char err[160];
    join_t join = {.c = c,
                   .req_id = req_id,
                   .l0_mode = req->l0_mode,
                   .qos_class = form_qos_class(f, c, req->qos_level_set, req->qos_level)};

    form_retry_take_split(&join.retry, req);
    if (pc == NULL || req->rank >= pc->nranks || pc->sids[req->rank] != c->sid)
        why = "not a rank of that communicator";
    else if (form_level1_take(&join.want, req->algo, req->algorithm, req->algo_by_config,
                              req->deterministic, err, sizeof(err), join.notice,
                              sizeof(join.notice)) != 0)
        why = err; /* an unknown HCCL_ALGO fails a split as it fails an init */
    else if (pc->nnodes > 1)
        why = "a communicator that spans daemons is split by its ranks (libhccl), not here",
        result = HCCL_E_NOT_SUPPORT;
    else if ((sp = split_get(f, pc, req, now)) == NULL)
        why = "out of memory", result = HCCL_E_MEMORY;
    else if (sp->r[req->rank].join.c != NULL)
        why = "this rank already called this split";
    if (why != NULL) {
        WARN("INIT", "pid %d: comm split refused: %s", c->pid, why);
        form_answer_result(f, c, req_id, result, why, 0, 0);
        return;
    }
    sp->r[req->rank] = (split_rank_t){.join = join, .color = req->color, .key = req->key};
    if (++sp->called == sp->nranks)
        split_complete(f, sp);
}

void form_splits_client_gone(form_t *f, const form_client_t *c)
{
    for (split_t *sp = f->splits, *next; sp != NULL; sp = next) {
        next = sp->next;
        for (uint32_t r = 0; r < sp->nranks; r++)
            if (sp->r[r].join.c == c) {
                sp->r[r].join.c = NULL;
                split_fail(f, sp, HCCL_E_REMOTE, "a rank of the parent went away");
                break;
            }
    }
}

void form_splits_stop(form_t *f)
{
    while (f->splits != NULL)
        split_fail(f, f->splits, HCCL_E_REMOTE, "the daemon is shutting down");
}

uint64_t form_splits_deadline(const form_t *f)
{
    uint64_t d = FORM_NEVER;

    for (const split_t *sp = f->splits; sp != NULL; sp = sp->next)
        d = sp->deadline < d ? sp->deadline : d;
    return d;
}

void form_splits_expire(form_t *f, uint64_t now)
{
    for (split_t *sp = f->splits, *next; sp != NULL; sp = next) {
        next = sp->next;
        if (sp->deadline <= now)
            split_fail(f, sp, HCCL_E_TIMEOUT, "not every rank of the parent called HcclCommSplit");
    }
}
