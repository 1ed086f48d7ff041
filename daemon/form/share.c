/*
 * The root daemon's decision on the connections a split's child shares with its parent (see
 * share.h), and this daemon's side of it: a daemon's word about its parent, and what it takes
 * from the root's answer.
 */
#include "form/share.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "form/form_int.h"
#include "log.h"

_Static_assert(ENGINE_ADDR_MAX == 64, "share_word_t holds engine addresses");

/* "\nA\nB\n" for the list; NULL if out of memory. */
static char *linked_text(const char *const *linked, size_t n)
{
    size_t len = 2;
    char *t, *w;

    for (size_t i = 0; i < n; i++)
        len += strlen(linked[i]) + 1;
    if ((t = malloc(len)) == NULL)
        return NULL;
    w = t;
    *w++ = '\n';
    for (size_t i = 0; i < n; i++)
        w += sprintf(w, "%s\n", linked[i]);
    *w = '\0';
    return t;
}

void share_note_add(share_note_t *n, const uint8_t *parent, const char *const *linked,
                    size_t nlinked)
{
    char *t;

    if (n->state < 0)
        return;
    if (parent == NULL || (t = linked_text(linked, nlinked)) == NULL) {
        share_note_free(n);
        n->state = -1;
        return;
    }
    if (n->state == 0) {
        memcpy(n->parent, parent, SHARE_JOB_BYTES);
        n->linked = t;
        n->state = 1;
        return;
    }
    /* Every rank of one daemon sees the same parent comm: a difference is a misbehaving
     * client, whose daemon then simply connects as if there were no parent. */
    if (memcmp(n->parent, parent, SHARE_JOB_BYTES) != 0 || strcmp(n->linked, t) != 0) {
        share_note_free(n);
        n->state = -1;
    }
    free(t);
}

void share_note_free(share_note_t *n)
{
    free(n->linked);
    n->linked = NULL;
    n->state = 0;
}

void share_note_merge(share_note_t *into, const share_note_t *one)
{
    if (into->state < 0)
        return;
    if (one->state == 1 && into->state == 0 && (into->linked = strdup(one->linked)) != NULL) {
        memcpy(into->parent, one->parent, SHARE_JOB_BYTES);
        into->state = 1;
        return;
    }
    if (one->state != 1 || into->state != 1 ||
        memcmp(into->parent, one->parent, SHARE_JOB_BYTES) != 0 ||
        strcmp(into->linked, one->linked) != 0) {
        share_note_free(into);
        into->state = -1;
    }
}

static int note_links(const share_note_t *n, const char *addr)
{
    const char *p = n->linked;
    size_t len = strlen(addr);

    while ((p = strstr(p, addr)) != NULL) {
        if (p[-1] == '\n' && p[len] == '\n')
            return 1;
        p++;
    }
    return 0;
}

uint32_t share_pairs(const share_note_t *const *notes, const char *const *data, uint32_t nn,
                     uint32_t *pairs)
{
    const share_note_t *ref = nn > 0 ? notes[0] : NULL;
    uint32_t k = 0;

    if (ref == NULL || ref->state != 1)
        return 0;
    for (uint32_t i = 0; i < nn; i++)
        for (uint32_t j = i + 1; j < nn; j++) {
            const share_note_t *a = notes[i], *b = notes[j];
            if (a == NULL || b == NULL || a->state != 1 || b->state != 1 ||
                memcmp(a->parent, ref->parent, SHARE_JOB_BYTES) != 0 ||
                memcmp(b->parent, ref->parent, SHARE_JOB_BYTES) != 0 || !note_links(a, data[j]) ||
                !note_links(b, data[i]))
                continue;
            pairs[2 * k] = i;
            pairs[2 * k + 1] = j;
            k++;
        }
    return k;
}

/* HCCLD_SPLIT_SHARE=0: this daemon never offers its comms' connections to their children
 * (their pairs with it connect anew); for tests and for telling a sharing problem apart. */
static int share_enabled(void)
{
    const char *v = getenv("HCCLD_SPLIT_SHARE");

    return v == NULL || strcmp(v, "0") != 0;
}

static int comm_has(const form_comm_t *c, uint64_t sid)
{
    for (uint32_t r = 0; r < c->nranks; r++)
        if (c->sids[r] == sid)
            return 1;
    return 0;
}

form_comm_t *share_parent_find(form_t *f, const uint8_t *parent, const uint64_t *sids, uint32_t n)
{
    for (form_comm_t *c = f->comms; c != NULL; c = c->next) {
        if (!c->has_job || c->nnodes < 2 || memcmp(c->job_id, parent, SHARE_JOB_BYTES) != 0)
            continue;
        /* The child's ranks here must be the parent's: the same tenant's processes, so no
         * one takes another job's connections by naming its id. */
        uint32_t r = 0;
        while (r < n && (sids[r] == 0 || comm_has(c, sids[r])))
            r++;
        if (r == n)
            return c;
    }
    return NULL;
}

int share_word(form_t *f, const uint8_t *parent, uint64_t sid, share_word_t *w)
{
    form_comm_t *pc =
        parent != NULL && share_enabled() ? share_parent_find(f, parent, &sid, 1) : NULL;

    memset(w, 0, sizeof(*w));
    if (pc == NULL)
        return 0;
    if ((w->addrs = calloc(pc->nnodes, sizeof(*w->addrs))) == NULL ||
        (w->ptrs = calloc(pc->nnodes, sizeof(*w->ptrs))) == NULL) {
        share_word_free(w);
        return -1;
    }
    w->n = engine_comm_links(f->env.eng, pc->id, w->addrs, pc->nnodes);
    for (uint32_t i = 0; i < w->n; i++)
        w->ptrs[i] = w->addrs[i];
    w->parent = parent;
    return 0;
}

void share_word_free(share_word_t *w)
{
    free(w->addrs);
    free(w->ptrs);
    memset(w, 0, sizeof(*w));
}

int share_spec(form_t *f, const form_comm_t *c, const share_plan_t *plan, uint32_t me,
               uint8_t *share, uint32_t *parent_comm_p, int *inherit_p)
{
    uint32_t nn = c->nnodes, mine = 0;
    form_comm_t *pc;

    *parent_comm_p = 0;
    *inherit_p = 0;
    memset(share, 0, nn);
    for (uint32_t k = 0; plan != NULL && k < plan->npairs; k++) {
        uint32_t i = plan->pairs[2 * k], j = plan->pairs[2 * k + 1];
        if (i >= nn || j >= nn || i == j)
            return -1;
        if (i == me || j == me) {
            share[i == me ? j : i] = 1;
            mine++;
        }
    }
    if (mine == 0)
        return 0;
    if ((pc = share_parent_find(f, plan->parent, c->sids, c->nranks)) == NULL) {
        WARN("INIT",
             "comm %u: the root daemon says it shares its parent's connections, and "
             "its parent is not here (any more)",
             c->id);
        return -1;
    }
    *parent_comm_p = pc->id;
    /* Every pair shares: the links are the parent's, and so are their figures. */
    *inherit_p = plan->npairs == nn * (nn - 1) / 2;
    return 0;
}
