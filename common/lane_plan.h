/*
 * The schedule of a lane allreduce over n ranks (libclient/lane.h): recursive doubling over the
 * largest power of two of ranks, pow2; the first 2 * rem ranks (rem = n - pow2) pair up, the
 * even one of each pair (an "extra") folding its data into the odd one first and taking the
 * result back last. Who talks to whom is all a rank needs to connect its lanes, and all its
 * daemon needs to know how many sockets to hand it.
 */
#ifndef HCCLD_COMMON_LANE_PLAN_H
#define HCCLD_COMMON_LANE_PLAN_H

#include <stdint.h>

#define LANE_LEVELS_MAX 32

typedef struct lane_plan {
    uint32_t n, me, pow2, rem, levels;
    int extra;     /* me folds into me + 1 and takes no part in the doubling */
    uint32_t fold; /* the fold partner, or UINT32_MAX */
    uint32_t vme;  /* virtual rank 0 .. pow2-1 in the doubling, when not extra */
} lane_plan_t;

/* The plan of rank me of n (me < n). */
void lane_plan(uint32_t n, uint32_t me, lane_plan_t *p);
/* The real rank of virtual rank v. */
uint32_t lane_plan_real(const lane_plan_t *p, uint32_t v);
/* Partner of the doubling at level l (l < p->levels, p not extra), as a real rank. */
uint32_t lane_plan_partner(const lane_plan_t *p, uint32_t l);
/* How many partners rank me of n connects to (those above it): the sockets it needs. */
uint32_t lane_plan_up(uint32_t n, uint32_t me);

#endif
