/* The data arena: HcclMemAlloc buffers and staging space, first fit over a sorted block list. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

#define ARENA_ALIGN 4096ull

int hc_arena_init(hc_arena_t *a, uint64_t bytes)
{
    pthread_mutex_init(&a->lock, NULL);
    a->cap = 64;
    a->v = malloc(a->cap * sizeof(*a->v));
    if (a->v == NULL)
        return -ENOMEM;
    a->v[0] = (hc_blk_t){.off = 0, .len = bytes, .used = 0};
    a->n = 1;
    return 0;
}

static int blk_insert(hc_arena_t *a, uint32_t at, hc_blk_t b)
{
    if (a->n == a->cap) {
        hc_blk_t *v = realloc(a->v, 2 * a->cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        a->v = v;
        a->cap *= 2;
    }
    memmove(&a->v[at + 1], &a->v[at], (a->n - at) * sizeof(*a->v));
    a->v[at] = b;
    a->n++;
    return 0;
}

static void blk_remove(hc_arena_t *a, uint32_t at)
{
    memmove(&a->v[at], &a->v[at + 1], (a->n - at - 1) * sizeof(*a->v));
    a->n--;
}

uint64_t hc_arena_alloc(hc_arena_t *a, uint64_t len)
{
    uint64_t off = UINT64_MAX;

    if (len == 0 || len > UINT64_MAX - ARENA_ALIGN)
        return UINT64_MAX;
    len = (len + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    pthread_mutex_lock(&a->lock);
    for (uint32_t i = 0; i < a->n; i++) {
        hc_blk_t *b = &a->v[i];
        if (b->used || b->len < len)
            continue;
        if (b->len > len &&
            blk_insert(a, i + 1, (hc_blk_t){.off = b->off + len, .len = b->len - len}) != 0)
            break;
        b = &a->v[i];
        b->len = len;
        b->used = 1;
        off = b->off;
        break;
    }
    pthread_mutex_unlock(&a->lock);
    return off;
}

int hc_arena_free(hc_arena_t *a, uint64_t off)
{
    int rc = -ENOENT;

    pthread_mutex_lock(&a->lock);
    for (uint32_t i = 0; i < a->n; i++) {
        if (a->v[i].off != off || !a->v[i].used)
            continue;
        a->v[i].used = 0;
        if (i + 1 < a->n && !a->v[i + 1].used) {
            a->v[i].len += a->v[i + 1].len;
            blk_remove(a, i + 1);
        }
        if (i > 0 && !a->v[i - 1].used) {
            a->v[i - 1].len += a->v[i].len;
            blk_remove(a, i);
        }
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int hc_in_arena(const hc_client_t *c, const void *p, uint64_t len, uint64_t *off_p)
{
    uintptr_t a = (uintptr_t)c->arena, q = (uintptr_t)p;

    if (q < a || q - a > c->l.arena_bytes || len > c->l.arena_bytes - (q - a))
        return 0;
    *off_p = q - a;
    return 1;
}
