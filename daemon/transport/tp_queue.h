/*
 * The request bookkeeping both transports share: a request's completion, the FIFO queues a
 * connection keeps them in (sends in posting order, receives waiting for their message), the
 * oldest receive of a tag, and the free list of a connection's request slots. Each transport's
 * request starts with its tp_req_t, so these work on that and the transport casts back.
 */
#ifndef HCCLD_TRANSPORT_TP_QUEUE_H
#define HCCLD_TRANSPORT_TP_QUEUE_H

#include <errno.h>
#include <stddef.h>

#include "transport/transport.h"

typedef struct tp_queue {
    tp_req_t *head, *tail;
} tp_queue_t;

static inline void tp_req_complete(tp_req_t *r, int status)
{
    r->done = 1;
    r->status = status;
}

static inline void tp_queue_push(tp_queue_t *q, tp_req_t *r)
{
    r->next = NULL;
    if (q->tail != NULL)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

/* Puts r first: the oldest again (a receive whose message must come again). */
static inline void tp_queue_push_front(tp_queue_t *q, tp_req_t *r)
{
    r->next = q->head;
    q->head = r;
    if (q->tail == NULL)
        q->tail = r;
}

/* Moves every request of from, in its order, in front of those of q; from ends empty. */
static inline void tp_queue_prepend(tp_queue_t *q, tp_queue_t *from)
{
    if (from->head == NULL)
        return;
    from->tail->next = q->head;
    if (q->tail == NULL)
        q->tail = from->tail;
    q->head = from->head;
    from->head = from->tail = NULL;
}

/* The oldest request; q must not be empty. */
static inline tp_req_t *tp_queue_pop(tp_queue_t *q)
{
    tp_req_t *r = q->head;

    q->head = r->next;
    if (q->head == NULL)
        q->tail = NULL;
    return r;
}

/* Takes r out of q: 0, or -ENOENT if it is not queued there. */
static inline int tp_queue_unlink(tp_queue_t *q, tp_req_t *r)
{
    for (tp_req_t *prev = NULL, *x = q->head; x != NULL; prev = x, x = x->next) {
        if (x != r)
            continue;
        if (prev != NULL)
            prev->next = r->next;
        else
            q->head = r->next;
        if (q->tail == r)
            q->tail = prev;
        r->next = NULL;
        return 0;
    }
    return -ENOENT;
}

/* Takes the oldest request with this tag out of q, or NULL. */
static inline tp_req_t *tp_queue_take(tp_queue_t *q, uint64_t tag)
{
    for (tp_req_t *r = q->head; r != NULL; r = r->next)
        if (r->tag == tag) {
            tp_queue_unlink(q, r);
            return r;
        }
    return NULL;
}

/* Completes every request of q with err, oldest first, and empties it. */
static inline void tp_queue_fail(tp_queue_t *q, int err)
{
    while (q->head != NULL)
        tp_req_complete(tp_queue_pop(q), err);
}

/* A connection's free request slots: a stack through next. */
static inline void tp_free_push(tp_req_t **free_list, tp_req_t *r)
{
    r->next = *free_list;
    *free_list = r;
}

/* A free slot, or NULL if all are in use. */
static inline tp_req_t *tp_free_pop(tp_req_t **free_list)
{
    tp_req_t *r = *free_list;

    if (r != NULL)
        *free_list = r->next;
    return r;
}

#endif
