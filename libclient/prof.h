/*
 * HCCL_PROF_ENABLE=1: every operation a rank runs appends one JSON record to HCCL_PROF_FILE.
 * The daemon reports in each completion how long the descriptor waited and executed (cqe_t);
 * hc_wait_by() hands those figures to the accumulator the calling thread has open.
 */
#ifndef HCCLD_LIBCLIENT_PROF_H
#define HCCLD_LIBCLIENT_PROF_H

#include <stdint.h>

#include "shm.h"
#include "stream.h"

typedef struct hc_prof_acc {
    uint64_t t0_ns;     /* when the call started running */
    uint64_t seq;       /* collectives only: the comm's count of them before this one */
    uint64_t queued_ns; /* the first piece's wait in the daemon */
    uint64_t qos_wait_ns, l0_ns, l1_ns; /* summed over pieces */
    uint32_t pieces;
    int algo;     /* the last piece's level-1 algorithm, -1: none */
    int algo_src; /* enum algo_src: what chose it */
} hc_prof_acc_t;

/* Whether HCCL_PROF_ENABLE asks for records (read once). */
int hc_prof_enabled(void);
/* The process's rank for %r in HCCL_PROF_FILE: the first one set wins (its first comm). */
void hc_prof_note_rank(uint32_t rank);
/* Opens acc for the call about to run on this thread. */
void hc_prof_begin(hc_prof_acc_t *acc, const hc_call_t *call);
/* Adds one completed piece to the thread's open accumulator, if any. */
void hc_prof_piece(const cqe_t *e);
/* Closes acc and writes the call's record. */
void hc_prof_end(hc_prof_acc_t *acc, const hc_call_t *call, int result);

#endif
