/*
 * Which data connections a child of HcclCommSplit takes from its parent (share.c). Every daemon
 * of the child tells the root daemon, with each JoinReq, the parent it belongs to and the
 * daemons that parent is connected to; the root names the pairs whose two ends both hold a
 * parent connection to each other (Membership.shared_pairs), and every daemon follows that
 * list, so both ends of a pair always take the same decision.
 */
#ifndef HCCLD_FORM_SHARE_H
#define HCCLD_FORM_SHARE_H

#include <stddef.h>
#include <stdint.h>

#define SHARE_JOB_BYTES 16

/* What one daemon of a child said about its parent. */
typedef struct share_note {
    int state; /* 0: nothing yet; 1: a parent and its links; -1: none, or its ranks disagree */
    uint8_t parent[SHARE_JOB_BYTES];
    char *linked; /* "\nADDR\nADDR\n": data addresses its parent is connected to */
} share_note_t;

/* Adds one rank's word (parent NULL: it named none); a rank that differs from the ones before
 * makes the whole daemon share nothing. */
void share_note_add(share_note_t *n, const uint8_t *parent, const char *const *linked,
                    size_t nlinked);
void share_note_free(share_note_t *n);
/* Folds one daemon's note for another of its ranks into *into, as share_note_add does. */
void share_note_merge(share_note_t *into, const share_note_t *one);

/* The pairs (i < j, flattened into pairs[2k], pairs[2k+1]) of nodes whose notes name the same
 * parent as node 0's and each other's data address; pairs has room for nn * (nn - 1). Returns
 * the number of pairs. */
uint32_t share_pairs(const share_note_t *const *notes, const char *const *data, uint32_t nn,
                     uint32_t *pairs);

/* What this daemon says for one joining rank: its parent (NULL: none here) and the data
 * addresses that parent is connected to (form_int.h, share_word). */
typedef struct share_word {
    const uint8_t *parent;
    char (*addrs)[64];
    const char **ptrs; /* into addrs, for share_note_add and protobuf */
    uint32_t n;
} share_word_t;
void share_word_free(share_word_t *w);

/* The root daemon's answer: the parent and the pairs that share. */
typedef struct share_plan {
    const uint8_t *parent;
    const uint32_t *pairs;
    uint32_t npairs;
} share_plan_t;
#endif
