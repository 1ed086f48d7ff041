/*
 * Which data connections a child of HcclCommSplit takes from its parent (share.c). Every daemon
 * of the child tells the root daemon, with each JoinReq, the parent it belongs to and the
 * daemons that parent is connected to; the root names the pairs whose two ends both hold a
 * parent connection to each other (Membership.shared_pairs), and every daemon follows that
 * list, so both ends of a pair always take the same decision.
 */
#ifndef HCCLD_SERVER_SHARE_H
#define HCCLD_SERVER_SHARE_H

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

/* The pairs (i < j, flattened into pairs[2k], pairs[2k+1]) of nodes whose notes name the same
 * parent as node 0's and each other's data address; pairs has room for nn * (nn - 1). Returns
 * the number of pairs. */
uint32_t share_pairs(const share_note_t *const *notes, const char *const *data, uint32_t nn,
                     uint32_t *pairs);

/* The server's side; needs server.h. */
typedef struct server server_t;
typedef struct scomm scomm_t;

/* What this daemon says for one joining rank: its parent (NULL: none here) and the data
 * addresses that parent is connected to. */
typedef struct share_word {
    const uint8_t *parent;
    char (*addrs)[64];
    const char **ptrs; /* into addrs, for share_note_add and protobuf */
    uint32_t n;
} share_word_t;
/* Fills w for the rank of session sid that names parent (NULL: none); 0, or -1 if out of
 * memory (w then says nothing). */
int share_word(server_t *srv, const uint8_t *parent, uint64_t sid, share_word_t *w);
void share_word_free(share_word_t *w);

/* The parent comm spanning daemons with job id parent whose ranks here include every nonzero
 * sid of sids[n], or NULL. */
scomm_t *share_parent_find(server_t *srv, const uint8_t *parent, const uint64_t *sids, uint32_t n);

/* The root daemon's answer: the parent and the pairs that share. */
typedef struct share_plan {
    const uint8_t *parent;
    const uint32_t *pairs;
    uint32_t npairs;
} share_plan_t;
/* For comm c (this daemon is node me): share[i] for each node i (c->nnodes bytes), the parent
 * comm's id and whether every pair shares. 0, or -1 when the plan names pairs that this daemon
 * cannot serve (its parent is gone): it must then fail the comm. */
int share_spec(server_t *srv, const scomm_t *c, const share_plan_t *plan, uint32_t me,
               uint8_t *share, uint32_t *parent_comm_p, int *inherit_p);

#endif
