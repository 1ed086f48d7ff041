#include "transport/tp_kept.h"

#include <stdlib.h>
#include <string.h>

#include "futex.h"

void tp_kept_init(tp_kept_t *k, size_t max)
{
    memset(k, 0, sizeof(*k));
    k->max = max;
}

int tp_kept_room(const tp_kept_t *k, size_t len)
{
    return len <= k->max - k->bytes;
}

tp_msg_t *tp_kept_new(tp_kept_t *k, uint64_t tag, size_t len)
{
    tp_msg_t *m = malloc(sizeof(*m) + len);

    if (m == NULL)
        return NULL;
    *m = (tp_msg_t){.tag = tag, .len = len};
    k->bytes += len;
    return m;
}

void tp_kept_push(tp_kept_t *k, tp_msg_t *m)
{
    m->next = NULL;
    if (k->tail != NULL)
        k->tail->next = m;
    else
        k->head = m;
    k->tail = m;
}

/* Unlinks *pp (whose predecessor is prev) and returns it. */
static tp_msg_t *unlink_at(tp_kept_t *k, tp_msg_t **pp, tp_msg_t *prev)
{
    tp_msg_t *m = *pp;

    *pp = m->next;
    if (k->tail == m)
        k->tail = prev;
    m->next = NULL;
    return m;
}

tp_msg_t *tp_kept_take(tp_kept_t *k, uint64_t tag)
{
    for (tp_msg_t **pp = &k->head, *prev = NULL; *pp != NULL; prev = *pp, pp = &(*pp)->next)
        if ((*pp)->tag == tag)
            return unlink_at(k, pp, prev);
    return NULL;
}

void tp_kept_drop(tp_kept_t *k, tp_msg_t *m)
{
    k->bytes -= m->len;
    free(m);
}

unsigned tp_kept_forget(tp_kept_t *k, uint64_t mask, uint64_t value, uint64_t ttl_ns)
{
    unsigned n = 0;

    for (tp_msg_t **pp = &k->head, *prev = NULL; *pp != NULL;) {
        if (((*pp)->tag & mask) != value) {
            prev = *pp;
            pp = &(*pp)->next;
            continue;
        }
        tp_kept_drop(k, unlink_at(k, pp, prev));
        n++;
    }
    k->forget[k->forget_next] =
        (struct tp_forget){.mask = mask, .value = value, .until_ns = now_ns() + ttl_ns};
    k->forget_next = (k->forget_next + 1) % TP_FORGET_MAX;
    return n;
}

int tp_kept_forgotten(tp_kept_t *k, uint64_t tag)
{
    uint64_t now = 0;

    for (unsigned i = 0; i < TP_FORGET_MAX; i++) {
        struct tp_forget *f = &k->forget[i];
        if (f->until_ns == 0 || (tag & f->mask) != f->value)
            continue;
        if (now == 0)
            now = now_ns();
        if (now < f->until_ns)
            return 1;
        f->until_ns = 0;
    }
    return 0;
}

tp_msg_t *tp_kept_take_all(tp_kept_t *k, uint64_t mask, uint64_t value)
{
    tp_msg_t *list = NULL, **tail = &list;

    for (tp_msg_t **pp = &k->head, *prev = NULL; *pp != NULL;) {
        if (((*pp)->tag & mask) != value) {
            prev = *pp;
            pp = &(*pp)->next;
            continue;
        }
        tp_msg_t *m = unlink_at(k, pp, prev);
        k->bytes -= m->len;
        *tail = m;
        tail = &m->next;
    }
    return list;
}

void tp_kept_put(tp_kept_t *k, tp_msg_t *list)
{
    tp_msg_t *last = NULL;

    for (tp_msg_t *m = list; m != NULL; m = m->next) {
        k->bytes += m->len;
        last = m;
    }
    if (last == NULL)
        return;
    last->next = k->head;
    k->head = list;
    if (k->tail == NULL)
        k->tail = last;
}

void tp_msgs_free(tp_msg_t *list)
{
    while (list != NULL) {
        tp_msg_t *m = list;
        list = m->next;
        free(m);
    }
}

void tp_kept_free(tp_kept_t *k)
{
    while (k->head != NULL)
        tp_kept_drop(k, unlink_at(k, &k->head, NULL));
}
