/*
 * hccl_perf_test's pieces shared between its files: the options, a collective's description
 * (sizes, buffers, launch, expected values; perf_colls.c), one rank's benchmark state, the
 * helpers the -A comparison (perf_compare.c) uses from the main sweep (hccl_perf_test.c), and
 * the processes that run the ranks (perf_procs.c).
 */
#ifndef HCCLD_TOOLS_PERF_TEST_H
#define HCCLD_TOOLS_PERF_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hccl/hccl.h"

#define EXIT_WRONG 1
#define EXIT_ERROR 2
#define MAX_COLLS 8

/* ---- Options ---- */

struct perf_opts {
    int colls[MAX_COLLS]; /* indexes into perf_colls, in run order */
    int ncolls;
    size_t min_bytes;
    size_t max_bytes;
    double factor; /* > 1: multiply; otherwise add step */
    size_t step;
    int nranks;
    int iters;
    int warmup;
    HcclDataType dtype;
    HcclReduceOp op;
    int root;
    int check;
    int zero_copy;
    int register_bufs; /* -R: malloc'ed buffers registered with HcclCommRegister */
    int use_stream;
    int median;        /* the time column is the median iteration, not the mean */
    int latency;       /* hccl_latency_test: each size's percentiles of ITERS timed launches */
    const char *algos; /* -A: level-1 algorithms to compare, comma-separated */
    const char *json_path;
};

/* ---- Collectives ---- */

/* Element counts of one test size, as nccl-tests defines them per collective. */
struct coll_size {
    size_t bytes;      /* the printed size: the larger of the send and receive sizes */
    size_t count;      /* the printed count: the count argument of the call */
    size_t send_count; /* elements this rank sends (input) */
    size_t recv_count; /* elements this rank receives (output) */
};

struct bench;

enum inplace_kind { INPLACE_REAL, INPLACE_SAME, INPLACE_NONE };

struct coll_ops {
    const char *name;
    int reduces; /* takes a reduction operator */
    int rooted;  /* takes a root */
    enum inplace_kind inplace;
    double (*bus_factor)(uint32_t n);
    void (*sizes)(size_t bytes, size_t esize, uint32_t n, struct coll_size *cs);
    /* Points send and recv at this run's buffers; in-place layouts follow HCCL. */
    void (*buffers)(const struct bench *b, const struct coll_size *cs, int inplace, void **send,
                    void **recv);
    HcclResult (*launch)(const struct bench *b, const struct coll_size *cs, void *send, void *recv,
                         HcclStream stream);
    /* The value output element k must hold on this rank; NAN means "not checked". */
    double (*expect)(const struct bench *b, const struct coll_size *cs, size_t k);
};

struct bench {
    struct perf_opts opt;
    const struct coll_ops *coll;
    HcclComm comm;
    HcclStream stream;
    uint32_t rank;
    uint32_t nranks;
    size_t esize;
    size_t buf_bytes;
    void *sendbuf;
    void *recvbuf;
    void *reg_send; /* -R: registration handles */
    void *reg_recv;
    uint64_t pattern_mod; /* input values are in [0, pattern_mod) */
    FILE *json;
    int json_records;
    double *iter_us; /* -m: each timed iteration's time, opt.iters of them */
};

/* ---- The collectives (perf_colls.c) ---- */

/* allreduce, allgather, reducescatter, broadcast, reduce, alltoall, scatter, sendrecv. */
extern const struct coll_ops perf_colls[MAX_COLLS];

/* One checked run, synchronous, with fresh inputs; -1 on an HCCL error. */
int perf_check_once(struct bench *b, const struct coll_size *cs, void *send, void *recv,
                    uint64_t *wrong);
/* Input values for the collective in b->coll, kept small enough to check bit for bit. */
void perf_pattern_setup(struct bench *b);

/* ---- Helpers (hccl_perf_test.c) ---- */

/* Reports a failed HCCL call on stderr, with the rank unless it is negative; 1 if it failed. */
int perf_hccl_error(int rank, const char *call, HcclResult rc);
/* The same for this rank's calls. */
int perf_hccl_failed(const struct bench *b, const char *call, HcclResult rc);

#define TRY(b, call)                                                                               \
    do {                                                                                           \
        if (perf_hccl_failed((b), #call, (call))) {                                                \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

double perf_now_us(void);
/* ITERS launches; with PER, each one timed (blocking launches only) into PER[i]. */
int perf_run_iters(struct bench *b, const struct coll_size *cs, void *send, void *recv, int iters,
                   double *per);
/* The middle one of N values (the mean of the two middle ones of an even N); sorts V. */
double perf_median(double *v, int n);
size_t perf_next_size(const struct perf_opts *o, size_t bytes);
/* Runs the whole benchmark on an initialised communicator, which it destroys; returns an
 * exit status. */
int perf_bench_rank(const struct perf_opts *opt, HcclComm comm);
/* The program's name in messages: hccl_perf_test, or hccl_latency_test under that name. */
extern const char *perf_prog;

/* ---- The -A comparison (perf_compare.c) ---- */

/* Every size of one collective under each level-1 algorithm of opt.algos; *wrong gets the
 * total of wrong elements. */
int perf_compare_collective(struct bench *b, const struct coll_ops *coll, uint64_t *wrong);

/* ---- Processes (perf_procs.c): each returns the exit status ---- */

/* This process is one rank of a job started by hccl-run (or another launcher). */
int perf_run_from_env(const struct perf_opts *opt);
/* Forks opt->nranks ranks that join one new root info; the worst of their statuses. */
int perf_run_forked(const struct perf_opts *opt);

#endif
