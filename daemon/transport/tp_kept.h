/*
 * What both transports keep for tag matching: messages that arrived before their receive, in
 * arrival order within a byte budget, each taken by the oldest receive of its tag; and the tags
 * of users gone from a shared connection, whose messages are dropped for a while (transport.h's
 * forget()). The message being read in belongs to the transport until it pushes or drops it.
 */
#ifndef HCCLD_TRANSPORT_TP_KEPT_H
#define HCCLD_TRANSPORT_TP_KEPT_H

#include <stddef.h>
#include <stdint.h>

typedef struct tp_msg {
    struct tp_msg *next;
    uint64_t tag;
    size_t len;
    uint8_t data[];
} tp_msg_t;

#define TP_FORGET_MAX 32

typedef struct tp_kept {
    tp_msg_t *head, *tail; /* complete, in arrival order */
    size_t bytes;          /* their payload, and that of messages given out by tp_kept_new */
    size_t max;            /* the budget */
    struct tp_forget {
        uint64_t mask, value;
        uint64_t until_ns; /* 0: slot unused */
    } forget[TP_FORGET_MAX];
    unsigned forget_next; /* the slot the next forget takes (the oldest goes first) */
} tp_kept_t;

void tp_kept_init(tp_kept_t *k, size_t max);
/* Whether a message of len bytes fits in what is left of the budget. */
int tp_kept_room(const tp_kept_t *k, size_t len);
/* A buffer for a message of len bytes, counted in the budget; NULL if out of memory. */
tp_msg_t *tp_kept_new(tp_kept_t *k, uint64_t tag, size_t len);
/* Keeps a complete message (from tp_kept_new) for a later receive. */
void tp_kept_push(tp_kept_t *k, tp_msg_t *m);
/* The oldest kept message of tag, taken out of the store (still counted: drop it), or NULL. */
tp_msg_t *tp_kept_take(tp_kept_t *k, uint64_t tag);
/* Frees m (kept, taken or from tp_kept_new) and gives its bytes back to the budget. */
void tp_kept_drop(tp_kept_t *k, tp_msg_t *m);
/* Drops the kept messages whose tag & mask == value, and those to come for ttl_ns. Returns
 * how many were dropped. */
unsigned tp_kept_forget(tp_kept_t *k, uint64_t mask, uint64_t value, uint64_t ttl_ns);
/* Whether tag belongs to a forgotten user whose time has not run out. */
int tp_kept_forgotten(tp_kept_t *k, uint64_t tag);
/* Takes every kept message whose tag & mask == value out, in arrival order, no longer counted:
 * a list for tp_kept_put (another connection's store) or tp_msgs_free. */
tp_msg_t *tp_kept_take_all(tp_kept_t *k, uint64_t mask, uint64_t value);
/* Puts list (from tp_kept_take_all) before the kept messages, counted. */
void tp_kept_put(tp_kept_t *k, tp_msg_t *list);
void tp_msgs_free(tp_msg_t *list);
/* Frees every kept message (not one the transport holds). */
void tp_kept_free(tp_kept_t *k);

#endif
