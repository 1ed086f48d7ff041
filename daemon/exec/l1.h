/*
 * Level 1: runs one node's schedule (algo/algo.h) over a transport (transport/transport.h),
 * without blocking. Each round posts all its transfers at once, runs its local steps, then,
 * once every transfer is done, applies the received reductions. The caller polls
 * l1_progress and sleeps on l1_poll_fds in between.
 */
#ifndef HCCLD_EXEC_L1_H
#define HCCLD_EXEC_L1_H

#include <poll.h>
#include <stdint.h>

#include "algo/algo.h"
#include "transport/transport.h"

typedef struct l1_run l1_run_t;

typedef struct l1_args {
    const sched_t *sched;
    tp_conn_t **conns; /* by node index, each on its own transport; conns[me] unused */
    uint32_t me, nnodes;
    uint8_t *out;      /* OUT: sched->out_elems elements */
    const uint8_t *in; /* IN, for the kinds that have one */
    /* Where received data waits to be reduced: sched->scratch_elems elements. The caller
     * keeps it across runs (a fresh buffer each run costs page faults on every op). */
    uint8_t *scratch;
    /* The node's input where it lies, when the caller did not lay it out in OUT (NULL: it
     * did): it stands for the start of OUT, and the reads that `fresh` marks
     * (sched_fresh_reads, one entry per step) take it from there. The schedule must write
     * all of that range of OUT, unless the caller wants no result on this node. */
    const uint8_t *src;
    const uint8_t *fresh;
    uint8_t dtype;
    uint8_t redop;
    uint64_t tag; /* the same on every node for this operation */
    /* QoS: asked before a round's sends are posted (bytes the round sends); 0 holds the round
     * back until a later l1_progress. NULL: always go. */
    int (*admit)(void *ctx, uint64_t bytes);
    void *admit_ctx;
    /*
     * The operation as this node sees it (check_len bytes; 0: no check). With the first
     * round the run sends it to the next node (me + 1 mod n), tagged check_tag, and receives
     * the previous node's into check_in; if they differ the run fails with -EBADE. Nodes that
     * run different operations (ranks that posted different collectives or counts) thus find
     * out at once, whatever their schedules. Give them the same check_tag and data tags that
     * differ (span/tag.h), so that their data never meets the other's receives.
     */
    const void *check;
    void *check_in;
    uint32_t check_len;
    uint64_t check_tag;
} l1_args_t;

/* 0 and a run, -ENOMEM. The arguments must outlive the run. */
int l1_start(const l1_args_t *a, l1_run_t **r_p);
/* 1 when done, 0 while transfers are pending, or a negative errno (the run stops): -EBADE
 * when the previous node runs another operation (see check). */
int l1_progress(l1_run_t *r);
/* After l1_progress failed: the transport whose transfer failed (for xfer_result), or NULL. */
const transport_ops_t *l1_failed_transport(const l1_run_t *r);
/* The nodes the run waits on now, each once, at most max: the peers of the round's transfers
 * still pending, and the previous node while its operation check has not come. *unstarted_p:
 * that check has not come, so the previous node has not started this operation. Returns how
 * many; 0 while a round is held back (QoS) or nothing is pending. */
uint32_t l1_waiting_on(const l1_run_t *r, uint32_t *nodes, uint32_t max, int *unstarted_p);
/* The round in progress (the schedule's nrounds once all are done). */
uint32_t l1_round(const l1_run_t *r);
/* The fds to wait on for progress; returns how many were written. */
int l1_poll_fds(l1_run_t *r, struct pollfd *pfd, int max);
/* Frees the run (after completion or failure), withdrawing the transfers still pending. */
void l1_free(l1_run_t *r);

#endif
