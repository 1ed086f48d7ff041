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
    int algo;         /* the last piece's level-1 algorithm, -1: none */
    int algo_src;     /* enum algo_src: what chose it */
    int direct;       /* it ran over the comm's lanes, between the ranks (lane.h) */
    uint32_t retries; /* the most times a piece was posted again to a restarted daemon */
} hc_prof_acc_t;

/* One operation's record, as prof_writer.c writes it (see the README's Profiling section).
 * Strings are static (NULL: the field is left out), but for the two copied here. */
typedef struct hc_prof_rec {
    const char *op, *dtype, *algo, *algo_by, *redop, *path;
    uint64_t count, bytes, chunk_bytes, seq;
    uint32_t comm, rank, nranks, nnodes, pieces, retries;
    int result;
    int collective;     /* carries seq */
    int64_t peer, root; /* -1: none */
    double time_us, queued_us, qos_wait_us, l0_us, l1_us, algbw, busbw, start_us;
    char qos_class[32];
    char comm_name[128];
} hc_prof_rec_t;

/* Whether HCCL_PROF_ENABLE asks for records (read once). */
int hc_prof_enabled(void);
/* The process's rank for %r in HCCL_PROF_FILE: the first one set wins (its first comm). */
void hc_prof_note_rank(uint32_t rank);
/* Opens acc for the call about to run on this thread. */
void hc_prof_begin(hc_prof_acc_t *acc, const hc_call_t *call);
/* Adds one completed piece, posted again `reposts` times after restarts of the daemon, to the
 * thread's open accumulator, if any. */
void hc_prof_piece(const cqe_t *e, uint32_t reposts);
/* Marks the thread's open accumulator, if any: the call runs over lanes. */
void hc_prof_direct(void);
/* An op the ranks run among themselves: how long this rank waited for the others to post it
 * (its queued_us, as the daemon reports its own queue wait). */
void hc_prof_coop_wait(uint64_t ns);
/* Closes acc and writes the call's record. */
void hc_prof_end(hc_prof_acc_t *acc, const hc_call_t *call, int result);

/* prof_writer.c */
/* Queues the record for the writer thread (started on the first), which encodes it and
 * appends it to HCCL_PROF_FILE; waits only while the queue is full. */
void hc_prof_write(const hc_prof_rec_t *rec);
/* Returns once every record queued so far is in the file (HcclCommDestroy, HcclCommAbort,
 * exit). */
void hc_prof_flush(void);

#endif
