/* hccl-run's ranks once started: their exits, the signals hccl-run gets, and (with
 * --tag-output) their output, each line prefixed with its rank as mpirun's --tag-output does. */
#ifndef HCCLD_TOOLS_RUN_WATCH_H
#define HCCLD_TOOLS_RUN_WATCH_H

#include <sys/types.h>

typedef struct run_rank {
    pid_t pid;     /* 0 once reaped */
    int out[2];    /* read ends of its stdout and stderr pipes with --tag-output, else -1 */
    char *part[2]; /* a line not ended yet, per pipe */
    size_t part_len[2];
} run_rank_t;

typedef struct run_job {
    run_rank_t *ranks;
    int n;
    int tag;        /* --tag-output */
    int keep_going; /* --keep-going: a failing rank does not stop the others */
    double grace_s; /* between SIGTERM and SIGKILL when the job is stopped */
    int sigfd;      /* signalfd of SIGCHLD, SIGINT, SIGTERM (blocked before the ranks start) */
} run_job_t;

/* Blocks SIGCHLD, SIGINT and SIGTERM and opens job->sigfd on them: before any rank starts, so
 * that none of their signals is lost. 0 or -errno. */
int run_signals(run_job_t *job);
/* In a rank just forked: leads a process group of its own (the job's signals reach what the
 * rank starts too), and unblocks the signals again (exec keeps the mask). */
void run_signals_child(void);
/* Waits for the ranks. The first rank that fails (a status other than 0, or a signal) stops
 * the job: the others (their process groups) get SIGTERM, then SIGKILL after grace_s, and that
 * rank's status is returned, hccl-run saying which rank it was; with keep_going the others run to
 * their own end. SIGINT and SIGTERM to hccl-run stop the job alike. 0 when every rank exits 0. */
int run_watch(run_job_t *job);

#endif
