/*
 * The verified loop of the fault suites: each rank of a job runs the same sequence of ops
 * (allreduce in place and out of place, allgather, broadcast, reduce-scatter, alltoall, reduce,
 * a Send/Recv ring) over a size that runs between the ranks (lanes, below HCCLD_DIRECT_MAX) and
 * one that goes through the daemons, on malloc, HcclMemAlloc and HcclCommRegister buffers,
 * every result compared bitwise with the reference of ref.h. Each op is recorded (index, kind,
 * result, start and end) in memory shared with the test, which sums the records up per rank.
 */
#ifndef HCCLD_TESTS_FAULT_LOOP_H
#define HCCLD_TESTS_FAULT_LOOP_H

#include <stdint.h>
#include <sys/types.h>

#include "hccl/hccl.h"

/* Ops of one iteration of the loop (the last one: the ranks agree whether to stop). */
#define FL_OPS_PER_ITER 49
/* Records a rank keeps; its loop ends when they are used up. */
#define FL_MAX_RECS 8192
#define FL_MAX_RANKS 8
/* The large size (bytes of an op's largest buffer); the small one is 16 KiB. */
#define FL_BIG_BYTES (1u << 20)

typedef struct fl_rec {
    uint32_t index; /* the op's place in the rank's sequence */
    uint8_t kind;   /* enum fl_kind (fault_loop.c) */
    uint8_t exact;  /* the result matched the reference (ops that succeeded) */
    int32_t rc;     /* its HcclResult */
    double t0, t1;  /* CLOCK_MONOTONIC seconds */
} fl_rec_t;

typedef struct fl_log {
    uint32_t nrec;  /* records written (atomic) */
    uint32_t state; /* 0 forming, 1 looping, 2 done (atomic) */
    fl_rec_t rec[FL_MAX_RECS];
} fl_log_t;

/* What a job's ranks share with the test: mmap'ed before they fork. */
typedef struct fl_shared {
    uint32_t stop;     /* set by the test: the ranks agree to end after this iteration */
    uint32_t go;       /* set by the test: fl_rank_p2p's second exchange may start */
    uint32_t iters;    /* iterations to run (0: until stop, a failure or run_s) */
    uint32_t max_fail; /* a rank ends its loop after this many failed ops */
    double run_s;      /* a loop ends after this long (ranks agree after each iteration) */
    char log_dir[64];  /* where ranks' stderr goes, rank<r>.log ("": inherited) */
    fl_log_t logs[FL_MAX_RANKS];
} fl_shared_t;

/* A rank_fn (harness.h); arg is the fl_shared_t. Returns 0 when every op succeeded and matched
 * (the harness then destroys the comm); after a failure it waits for `stop`, then leaves the
 * comm and exits 0: its records tell what happened. */
int fl_rank_loop(HcclComm comm, uint32_t r, uint32_t n, void *arg);

/* A rank_fn (harness.h) with the same records, ending and arg: Send/Recv alone, a 1 MiB exchange
 * around the ring (checked), then, once the test sets `go`, another. */
int fl_rank_p2p(HcclComm comm, uint32_t r, uint32_t n, void *arg);
/* The same with two 1 MiB allreduces, the last rank's second one posted only at go: the
 * others' is in flight between daemons meanwhile. */
int fl_rank_held(HcclComm comm, uint32_t r, uint32_t n, void *arg);

/* A fresh shared area (zeroed, MAP_SHARED) or NULL; fl_shared_free unmaps it. */
fl_shared_t *fl_shared_new(uint32_t iters, uint32_t max_fail, double run_s);
void fl_shared_free(fl_shared_t *sh);
/* Waits until every one of n ranks has recorded at least ops ops (or ended): 0, or -1 after
 * timeout_s. */
int fl_wait_ops(const fl_shared_t *sh, uint32_t n, uint32_t ops, double timeout_s);

/* One rank's records, summed up. */
typedef struct fl_sum {
    uint32_t ok, failed, wrong; /* ops that succeeded, failed, succeeded with a wrong result */
    int32_t first_rc;           /* the first failed op's HcclResult */
    uint32_t first_index;       /* and its index */
    uint32_t first_kind;        /* and kind (fl_kind_name) */
    double first_fail;          /* its end (CLOCK_MONOTONIC), 0 if none failed */
    double max_stall;           /* the longest time between two op completions (or the start
                                 * of the first op, or `since`) */
    double last_ok;             /* the end of the last op that succeeded */
    int32_t rcs[4];             /* distinct results of failed ops, and how many of each */
    uint32_t rc_n[4];
    uint32_t ended; /* the loop ended by itself */
} fl_sum_t;

/* max_stall counts the waits after `since` only (CLOCK_MONOTONIC; 0: all of them). */
void fl_summarize(const fl_shared_t *sh, uint32_t r, double since, fl_sum_t *s);
double fl_now(void);
/* "allreduce", "send/recv", ... for fl_rec_t.kind. */
const char *fl_kind_name(unsigned kind);

#endif
