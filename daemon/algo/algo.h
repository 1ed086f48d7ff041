/*
 * Level-1 algorithms as schedules. An algorithm knows nothing of sockets, verbs, clients or
 * tenants: for one collective among `nnodes` nodes it produces, for node `me`, an ordered list
 * of rounds; a round is a set of steps (send a range of a buffer to a peer, receive a range
 * from a peer, receive and reduce into a range) that may all run at once, and the next round
 * starts when every step of this one is complete. Transfers between two nodes match in order:
 * the k-th send from A to B pairs with the k-th receive at B from A, with the same length.
 *
 * Buffers (element offsets; the element type does not matter to a schedule):
 *   SCHED_BUF_OUT  the node's working/result buffer; SCHED_BUF_IN  a read-only input.
 * Before the schedule runs, the executor lays the node's data out as follows (count = elements
 * per block as in the descriptor; n = nnodes):
 *   ALLREDUCE, REDUCE   OUT[0, count) holds the node's input; result in OUT (REDUCE: at root).
 *   BROADCAST           OUT[0, count) holds the data at the root; result in OUT everywhere.
 *   ALLGATHER           OUT[me*count, +count) holds the node's block; result: OUT[0, n*count).
 *   REDUCE_SCATTER      OUT[0, n*count) holds the node's input; result: OUT[me*count, +count).
 *   ALLTOALL            IN[j*count, +count) goes to node j; result: OUT[i*count, +count) from i.
 *   SCATTER             IN[0, n*count) at the root; result: OUT[0, count) everywhere.
 *   BARRIER             count 0: steps of length 0 carry only synchronization.
 * A RECV_REDUCE step receives into executor scratch and then applies the reduction
 * OUT[off..] = OUT[off..] op received, element by element.
 * COPY and REDUCE steps are local (peer = me): OUT[off, +len) = buf[src_off, +len), and
 * OUT[off, +len) = OUT[off, +len) op buf[src_off, +len). COPY moves a node's own block
 * between buffers (the root's block in SCATTER, IN to OUT[0]; every node's own block in
 * ALLTOALL, IN[me*count] to OUT[me*count]). REDUCE combines contributions that arrived in
 * one round into staging ranges of OUT (fullmesh), since two steps of one round may not
 * reduce into the same range.
 * Steps of one round never write overlapping ranges of OUT, and no step reads a range of OUT
 * that another step of the same round writes, so the executor may run them in any order or
 * in parallel. The exception: RECV_REDUCE steps of one round into one range (fullmesh's
 * contributions to a block), which the executor applies in step order. Zero-length transfers are
 * left out of schedules (both ends agree on every length, so they leave them out alike), except in
 * BARRIER, where they are the point.
 */
#ifndef HCCLD_ALGO_ALGO_H
#define HCCLD_ALGO_ALGO_H

#include <stdint.h>

#include "algo_id.h"

enum step_op { STEP_SEND = 1, STEP_RECV, STEP_RECV_REDUCE, STEP_COPY, STEP_REDUCE };
enum sched_buf { SCHED_BUF_OUT = 0, SCHED_BUF_IN = 1 };

typedef struct step {
    uint8_t op;       /* enum step_op */
    uint8_t buf;      /* enum sched_buf: where a send reads; receives always write OUT */
    uint32_t peer;    /* node index */
    uint64_t off;     /* element offset in the buffer */
    uint64_t len;     /* elements (0 allowed: synchronization only) */
    uint64_t src_off; /* COPY, REDUCE: where in `buf` the source starts; `off` is in OUT */
} step_t;

typedef struct sched {
    step_t *steps; /* all rounds, in order */
    uint32_t nsteps;
    uint32_t nrounds;
    uint32_t *round_start;  /* nrounds + 1 entries: round r is steps[round_start[r] .. [r+1]) */
    uint64_t out_elems;     /* OUT size the schedule needs (>= the layout's; the rest stages) */
    uint64_t scratch_elems; /* largest RECV_REDUCE of any round, summed over that round */
} sched_t;

/* Builds node me's schedule of `algo` for collective `kind` (enum desc_kind from shm.h).
 * Returns 0, -EINVAL (kind not served by this algorithm, bad arguments) or -ENOMEM. */
int algo_build(int algo, int kind, uint32_t nnodes, uint32_t me, uint32_t root, uint64_t count,
               sched_t *out);
/*
 * The same for the kinds with a block per rank (ALLGATHER, REDUCE_SCATTER, SCATTER, ALLTOALL)
 * when nodes hold different numbers of ranks: node i holds ranks[i] ranks (0 allowed), each
 * with blocks of `unit` elements, and nothing moves that no rank has. With R(i) the ranks of
 * the nodes below i, node i's block of the layout above becomes:
 *   ALLGATHER, REDUCE_SCATTER  OUT[R(i) * unit, R(i + 1) * unit)
 *   SCATTER                    IN[R(i) * unit, R(i + 1) * unit) at the root; the result is
 *                              OUT[0, ranks[me] * unit)
 *   ALLTOALL                   IN (to node i) and OUT (from node i) [ranks[me] * R(i) * unit,
 *                              ranks[me] * R(i + 1) * unit)
 * ranks NULL: algo_build with count = unit (every node one rank's worth).
 */
int algo_build_ranks(int algo, int kind, uint32_t nnodes, uint32_t me, uint32_t root, uint64_t unit,
                     const uint32_t *ranks, sched_t *out);
void sched_free(sched_t *s);
/* Elements this node sends (op STEP_SEND) and receives (STEP_RECV, STEP_RECV_REDUCE). */
void sched_traffic(const sched_t *s, uint64_t *sent, uint64_t *received);
/*
 * For an executor that leaves the node's input where it is instead of copying it into
 * OUT[0, len) first: fresh[i] (s->nsteps entries) gets SCHED_FRESH_SRC when step i reads its
 * source (a SEND's range, a COPY's or REDUCE's source in OUT) from that range before any step
 * wrote there, and SCHED_FRESH_DST when a RECV_REDUCE or REDUCE reads its destination so;
 * those reads then go to the input. *all tells whether the schedule writes all of OUT[0, len)
 * by its end (else OUT lacks the input's unwritten parts). Returns 0, -EINVAL when a read
 * straddles the range's edge or a write (the executor must copy first), or -ENOMEM.
 */
#define SCHED_FRESH_SRC 1
#define SCHED_FRESH_DST 2
int sched_fresh_reads(const sched_t *s, uint64_t len, uint8_t *fresh, int *all);
/* Elements of OUT the layout above needs for kind (before any staging). */
uint64_t algo_layout_elems(int kind, uint32_t n, uint64_t count);

#endif
