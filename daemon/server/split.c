/*
 * HcclCommSplit on the daemon: the k-th split call of every rank of a parent communicator is
 * gathered; then each color forms a child (ranks ordered by key, then parent rank) and every
 * rank gets its answer. A rank that never calls makes the others fail with HCCL_E_TIMEOUT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hccl/hccl.h"
#include "log.h"
#include "server/server.h"

typedef struct split_rank {
    join_t join; /* join.s NULL: not called yet */
    uint32_t color, key;
} split_rank_t;

struct split {
    server_t *srv;
    uint32_t parent;
    uint64_t seq;
    uint32_t nranks, called;
    char hex[33];
    split_rank_t *r;
    uv_timer_t timer;
    split_t *next;
};

static void split_freed(uv_handle_t *h)
{
    split_t *sp = h->data;

    free(sp->r);
    free(sp);
}

static void split_free(split_t *sp)
{
    for (split_t **pp = &sp->srv->splits; *pp != NULL; pp = &(*pp)->next)
        if (*pp == sp) {
            *pp = sp->next;
            break;
        }
    uv_close((uv_handle_t *)&sp->timer, split_freed);
}

static void split_fail(split_t *sp, int result, const char *why)
{
    WARN("INIT", "comm %u split %llu: %s", sp->parent, (unsigned long long)sp->seq, why);
    for (uint32_t r = 0; r < sp->nranks; r++)
        if (sp->r[r].join.s != NULL)
            send_init_resp(sp->r[r].join.s, sp->r[r].join.req_id, result, why, 0, 0, 0, 0);
    split_free(sp);
}

static void on_split_timeout(uv_timer_t *t)
{
    split_fail(t->data, HCCL_E_TIMEOUT, "not every rank of the parent called HcclCommSplit");
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
static void split_complete(split_t *sp)
{
    uint32_t *order = calloc(sp->nranks, sizeof(*order));
    join_t *child = calloc(sp->nranks, sizeof(*child));
    char hex[33];

    for (uint32_t r = 0; order && child && r < sp->nranks; r++) {
        uint32_t color = sp->r[r].color, n = 0;
        if (color == HCCL_SPLIT_NOCOLOR) {
            send_init_resp(sp->r[r].join.s, sp->r[r].join.req_id, HCCL_SUCCESS, "", 0, 0, 0, 0);
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
        comm_form(sp->srv, n, child, hex);
    }
    free(order);
    free(child);
    split_free(sp);
}

static split_t *split_get(server_t *srv, scomm_t *c, const Hccld__CommSplitReq *req)
{
    split_t *sp;

    for (sp = srv->splits; sp != NULL; sp = sp->next)
        if (sp->parent == c->id && sp->seq == req->seq)
            return sp;
    if ((sp = calloc(1, sizeof(*sp))) == NULL ||
        (sp->r = calloc(c->nranks, sizeof(*sp->r))) == NULL) {
        free(sp);
        return NULL;
    }
    sp->srv = srv;
    sp->parent = c->id;
    sp->seq = req->seq;
    sp->nranks = c->nranks;
    snprintf(sp->hex, sizeof(sp->hex), "%s", c->job_hex);
    uv_timer_init(srv->loop, &sp->timer);
    sp->timer.data = sp;
    uv_timer_start(&sp->timer, on_split_timeout,
                   (uint64_t)(req->timeout_s ? req->timeout_s : 120) * 1000, 0);
    sp->next = srv->splits;
    srv->splits = sp;
    return sp;
}

void jobs_comm_split(server_t *srv, session_t *s, uint64_t req_id, const Hccld__CommSplitReq *req)
{
    scomm_t *c = scomm_lookup(srv, req->comm_id);
    const char *why = NULL;
    int result = HCCL_E_PARA;
    split_t *sp = NULL;
    char err[160];
    join_t join = {.s = s, .req_id = req_id, .l0_mode = req->l0_mode};

    if (c == NULL || req->rank >= c->nranks || c->sids[req->rank] != s->sid)
        why = "not a rank of that communicator";
    else if (algo_check(&join.want, req->algo, req->algorithm, req->algo_by_config,
                        req->deterministic, err, sizeof(err), join.notice,
                        sizeof(join.notice)) != 0)
        why = err; /* an unknown HCCL_ALGO fails a split as it fails an init */
    else if (c->nnodes > 1)
        why = "a communicator that spans daemons is split by its ranks (libhccl), not here",
        result = HCCL_E_NOT_SUPPORT;
    else if ((sp = split_get(srv, c, req)) == NULL)
        why = "out of memory", result = HCCL_E_MEMORY;
    else if (sp->r[req->rank].join.s != NULL)
        why = "this rank already called this split";
    if (why != NULL) {
        WARN("INIT", "pid %d: comm split refused: %s", (int)s->pid, why);
        send_init_resp(s, req_id, result, why, 0, 0, 0, 0);
        return;
    }
    sp->r[req->rank] = (split_rank_t){.join = join, .color = req->color, .key = req->key};
    if (++sp->called == sp->nranks)
        split_complete(sp);
}

void splits_session_gone(server_t *srv, session_t *s)
{
    for (split_t *sp = srv->splits, *next; sp != NULL; sp = next) {
        next = sp->next;
        for (uint32_t r = 0; r < sp->nranks; r++)
            if (sp->r[r].join.s == s) {
                sp->r[r].join.s = NULL;
                split_fail(sp, HCCL_E_REMOTE, "a rank of the parent went away");
                break;
            }
    }
}

void splits_stop(server_t *srv)
{
    while (srv->splits != NULL)
        split_fail(srv->splits, HCCL_E_REMOTE, "the daemon is shutting down");
}
