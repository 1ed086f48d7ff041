/*
 * Issue 37's fault suite ("faultloop"): a job on daemons of its own runs the verified loop
 * (fault_loop.h) while a real fault hits it (fault_inject.h): its daemons' TCP connections
 * reset, a rank or a daemon killed, a daemon killed or stopped and started again. Each row of
 * `rows` says what the suite asserts:
 *   FAILS        every rank's op fails with one of the results allowed, within fail_s of the
 *                fault, none hangs, the daemons left serve a new job; for good (a dead rank,
 *                a daemon that never comes back);
 *   SURVIVES     no op fails, every result is exact, and no rank waits longer than stall_s for
 *                an op after the fault is over (the link reset, the daemon up again).
 * make test runs the rows marked short; HCCLD_FAULTLOOP_LONG=1 runs them all (2 and 3
 * daemons, 1 and 2 ranks each, longer baselines). The test case
 * "p2p" (`p2p_rows`) runs Send/Recv alone with the reset between two exchanges, where every
 * rank meets the failed connection with its transfers still to post; and `maxcnt`, a
 * collective whose connection fails more often than MaxCnt allows.
 * HCCLD_TEST_REPORT=1 prints each rank's figures; HCCLD_FAULTLOOP_KEEP=1 keeps the ranks'
 * logs (the directory is named); HCCLD_FAULTLOOP_VICTIM=K restarts daemon K, not the last.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_inject.h"
#include "fault_loop.h"
#include "harness.h"
#include "suites.h"

/* The jobs' op retry (HCCL_OP_RETRY_*) where a row turns it on: a lost data connection has
 * HOLD_S to come back (IntervalTime 0: HoldTime alone), and an op rides out 2 failures of one
 * connection (ss -K may meet the socket that replaced the one it reset). */
#define HOLD_S 4.0
#define RETRY_PARAMS "MaxCnt:2, HoldTime:4000, IntervalTime:0"
#define RESTART_AFTER_US 500000 /* a killed daemon starts again this long after */
#define ROLL_PAUSE_US 1000000   /* daemon-roll: the job runs this long between two restarts */
/* Issue 37: an op waits at most this long once the restarted daemon is up. */
#define RESTART_STALL_S 2.0
#define RANK_TIMEOUT 90 /* a rank's alarm; every wait below is shorter */
#define MAX_FAIL 3      /* a rank ends its loop after this many failed ops */
#define RC(x) (1u << (x))
#define STR_(x) #x
#define STR(x) STR_(x)

enum fault {
    F_NONE,
    F_RESET,
    F_RANK_KILL,
    F_DAEMON_KILL,
    F_DAEMON_RESTART,
    F_DAEMON_TERM,
    F_RESET_LANES,
    F_DAEMON_ROLL
};
enum expect { FAILS, SURVIVES };

/* HCCLD_FAULTLOOP_FAULT=KEY runs only the rows of that fault. */
static const char *const fault_keys[] = {"none",        "reset",          "rank-kill",
                                         "daemon-kill", "daemon-restart", "daemon-term",
                                         "reset-lanes", "daemon-roll"};
static const char *const fault_names[] = {"no fault",
                                          "ss -K of the daemons' links",
                                          "rank SIGKILL",
                                          "daemon SIGKILL",
                                          "daemon SIGKILL, restart",
                                          "daemon SIGTERM, restart",
                                          "ss -K of the daemons' links and the ranks' lanes",
                                          "every daemon SIGTERM and restart, one after another"};

typedef struct row {
    enum fault fault;
    unsigned daemons, per;
    enum expect expect;
    /* FAILS*: the results allowed for the first failed op of the ranks on the daemon the fault
     * hits (or beside the killed rank), and of the others; and how long after the fault. */
    uint32_t rc_here, rc_away;
    double fail_s;
    double stall_s; /* SURVIVES */
    int in_short;   /* make test runs it */
    int retry;      /* the job runs with HCCL_OP_RETRY_ENABLE="L1:1" (else "L1:0") */
    /* Send/Recv alone (fl_rank_p2p), the fault between two exchanges: the second starts once
     * every daemon's link monitor counts a failed link, and fail_s runs from its start. */
    int p2p;
    int l0_daemon; /* HCCL_L0_MODE=daemon: collectives on one daemon go through it too */
} row_t;

/* A fault on 2 and 3 daemons with 1 and 2 ranks each; make test runs those in `in_short` (a
 * mask of C21, C22, C31, C32: daemons x ranks each). */
enum { C21 = 1, C22 = 2, C31 = 4, C32 = 8 };
#define ROWS_OF(f, retry, ex, here, away, fail_s, stall_s, in_short)                               \
    {f, 2, 1, ex, here, away, fail_s, stall_s, (in_short)&C21, retry, 0, 0},                       \
        {f, 2, 2, ex, here, away, fail_s, stall_s, (in_short)&C22, retry, 0, 0},                   \
        {f, 3, 1, ex, here, away, fail_s, stall_s, (in_short)&C31, retry, 0, 0},                   \
    {                                                                                              \
        f, 3, 2, ex, here, away, fail_s, stall_s, (in_short)&C32, retry, 0, 0                      \
    }

/* HCCL_EXEC_TIMEOUT of the jobs: the bound of every op. */
#define EXEC_TIMEOUT_S 5
/* A reset fails the op in flight with HCCL_E_REMOTE within 0.1 s today, whatever its kind (a
 * Send/Recv across daemons too: it learns the failed connection as a collective does). */
#define RESET_RCS RC(HCCL_E_REMOTE)
/* A dead daemon: HCCL_E_REMOTE, or HCCL_E_UNAVAIL for ranks whose own daemon it was. */
#define DEAD_RCS (RC(HCCL_E_REMOTE) | RC(HCCL_E_UNAVAIL))

/* With retry, the daemons beside a dead one wait HOLD_S for its links, then fail the ops. */
static const row_t rows[] = {
    ROWS_OF(F_NONE, 1, SURVIVES, 0, 0, 0, 0, C21 | C32),
    ROWS_OF(F_RESET, 0, FAILS, RESET_RCS, RESET_RCS, 1.0, 0, C22),
    ROWS_OF(F_RESET, 1, SURVIVES, 0, 0, 0, HOLD_S + 0.5, C22 | C31),
    ROWS_OF(F_RESET_LANES, 1, SURVIVES, 0, 0, 0, HOLD_S + 0.5, C22),
    ROWS_OF(F_RANK_KILL, 1, FAILS, RC(HCCL_E_REMOTE), RC(HCCL_E_REMOTE), 1.0, 0, C22),
    ROWS_OF(F_DAEMON_KILL, 1, FAILS, DEAD_RCS, RC(HCCL_E_REMOTE), HOLD_S + 1.0, 0, C31),
    /* A crash of one daemon: the others run again what the crash lost of collectives
     * (span/rerun.c) and of send/recv (span/p2p_log.c); of 3, the two left first agree to
     * open their connections again (span/drain.c, BACK). */
    ROWS_OF(F_DAEMON_RESTART, 1, SURVIVES, 0, 0, 0, RESTART_STALL_S, C21 | C22 | C32),
    /* A stop of one daemon: its comms across daemons come to rest on every node first, and
     * the others hold their ops until it is back (span/drain.c). */
    ROWS_OF(F_DAEMON_TERM, 1, SURVIVES, 0, 0, 0, RESTART_STALL_S, C21),
    /* An upgrade of every node in turn, the last daemon first: a node that comes back later
     * finds the ones restarted before it at their old data addresses. */
    ROWS_OF(F_DAEMON_ROLL, 1, SURVIVES, 0, 0, 0, RESTART_STALL_S, C31),
    /* One daemon, 2 ranks: its restart costs no op (cooperative collectives, and Send/Recv
     * through it; or everything through it); without retry the ops fail at once; a daemon that
     * stays away fails them after the hold. */
    {F_DAEMON_RESTART, 1, 2, SURVIVES, 0, 0, 0, RESTART_STALL_S, 1, 1, 0, 0},
    {F_DAEMON_RESTART, 1, 2, SURVIVES, 0, 0, 0, RESTART_STALL_S, 1, 1, 0, 1},
    {F_DAEMON_TERM, 1, 2, SURVIVES, 0, 0, 0, RESTART_STALL_S, 0, 1, 0, 0},
    {F_DAEMON_TERM, 1, 2, SURVIVES, 0, 0, 0, RESTART_STALL_S, 1, 1, 0, 1},
    {F_DAEMON_RESTART, 1, 2, FAILS, DEAD_RCS, DEAD_RCS, 1.0, 0, 1, 0, 0, 1},
    {F_DAEMON_KILL, 1, 2, FAILS, DEAD_RCS, DEAD_RCS, HOLD_S + 1.0, 0, 1, 1, 0, 1},
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

/* Send/Recv alone across 2 daemons, their data connection reset between two exchanges: the
 * second fails with HCCL_E_REMOTE on every rank within P2P_FAIL_S of its start, as a collective
 * would (it used to wait for HCCL_EXEC_TIMEOUT and fail with HCCL_E_TIMEOUT). Every run. */
#define P2P_FAIL_S 1.0
static const row_t p2p_rows[] = {
    {F_RESET, 2, 1, FAILS, RC(HCCL_E_REMOTE), RC(HCCL_E_REMOTE), P2P_FAIL_S, 0, 1, 0, 1, 0},
    {F_RESET, 2, 2, FAILS, RC(HCCL_E_REMOTE), RC(HCCL_E_REMOTE), P2P_FAIL_S, 0, 1, 0, 1, 0},
};
#define NP2P (sizeof(p2p_rows) / sizeof(p2p_rows[0]))
/* How often their daemons' link monitors look (HCCLD_LINK_CHECK_MS), and how long the test
 * waits for both to have counted the failed link. */
#define P2P_CHECK_MS "50"
#define P2P_SEEN_S 5.0

static int env_on(const char *name)
{
    const char *e = getenv(name);

    return e != NULL && strcmp(e, "1") == 0;
}

/* What one run saw. */
typedef struct outcome {
    uint32_t n;
    fl_sum_t sum[FL_MAX_RANKS];
    int status[FL_MAX_RANKS];
    double t_fault, t_over; /* when the fault hit; when it was over (a daemon up again) */
    int resets;             /* sockets `ss -K` reset */
    char why[1024];         /* the checks that failed */
} outcome_t;

static void fail_why(outcome_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_why(outcome_t *o, const char *fmt, ...)
{
    size_t len = strlen(o->why);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(o->why + len, sizeof(o->why) - len, fmt, ap);
    va_end(ap);
    len = strlen(o->why);
    snprintf(o->why + len, sizeof(o->why) - len, "; ");
}

/* `per` ranks on each of daemons 0..nd-1 run fn (fault_loop.h) with sh; 0, or -1. */
static int spawn_job(const fi_daemons_t *d, unsigned nd, unsigned per, rank_fn fn, fl_shared_t *sh,
                     pid_t *pids)
{
    char *socks[FL_MAX_RANKS];

    for (uint32_t r = 0; r < nd * per; r++)
        socks[r] = (char *)d->socks[r / per];
    return harness_spawn_ranks_on(nd * per, socks, fn, sh, RANK_TIMEOUT, pids);
}

/* A new job, `per` ranks (at least 2 in all) on daemons 0..nd-1, runs an iteration of the
 * loop: how many ranks failed or saw a failed op or a wrong result. */
static int new_job_fails(const fi_daemons_t *d, unsigned nd, unsigned per)
{
    fl_shared_t *sh = fl_shared_new(1, 1, 0);
    pid_t pids[FL_MAX_RANKS];
    int bad;

    per = nd * per < 2 ? 2 : per;
    if (sh == NULL || spawn_job(d, nd, per, fl_rank_loop, sh, pids) != 0)
        return -1;
    bad = harness_wait(pids, nd * per, 60);
    for (uint32_t r = 0; r < nd * per; r++) {
        fl_sum_t s;
        fl_summarize(sh, r, 0, &s);
        bad += s.failed > 0 || s.wrong > 0 || !s.ended;
    }
    fl_shared_free(sh);
    return bad;
}

static int all_ended(const fl_shared_t *sh, uint32_t n, uint32_t skip)
{
    for (uint32_t r = 0; r < n; r++)
        if (r != skip && __atomic_load_n(&sh->logs[r].state, __ATOMIC_ACQUIRE) != 2)
            return 0;
    return 1;
}

/* The daemon a fault hits: the last, or HCCLD_FAULTLOOP_VICTIM's (a restart, of a row whose
 * ops all survive it: the others' ranks are not told apart). */
static unsigned victim(const row_t *w)
{
    const char *e = getenv("HCCLD_FAULTLOOP_VICTIM");
    unsigned k = e != NULL ? (unsigned)atoi(e) : w->daemons - 1;

    return w->expect == SURVIVES && k < w->daemons ? k : w->daemons - 1;
}

/* Hits the running job (pids) with w's fault; the last daemon (victim()), or the last rank, is
 * the one it hits. */
static void inject(const row_t *w, fi_daemons_t *d, const pid_t *pids, outcome_t *o)
{
    unsigned hit = victim(w);

    o->t_fault = fl_now();
    switch (w->fault) {
    case F_NONE: break;
    case F_RESET:
    case F_RESET_LANES:
        if (w->fault == F_RESET_LANES && fi_reset_ranks(pids, o->n) <= 0)
            fail_why(o, "the ranks hold no TCP connection to reset");
        if ((o->resets = fi_reset_links(d, 5, &o->t_fault)) <= 0)
            fail_why(o, "ss -K reset %d sockets", o->resets);
        break;
    case F_RANK_KILL: kill(pids[o->n - 1], SIGKILL); break;
    case F_DAEMON_KILL:
    case F_DAEMON_RESTART: fi_signal(d, hit, SIGKILL, 0); break;
    case F_DAEMON_TERM:
        if (fi_signal(d, hit, SIGTERM, 20) != 0)
            fail_why(o, "daemon %u did not stop within 20 s of SIGTERM", hit);
        break;
    case F_DAEMON_ROLL:
        for (unsigned k = w->daemons; k-- > 0;) {
            if (fi_signal(d, k, SIGTERM, 20) != 0)
                fail_why(o, "daemon %u did not stop within 20 s of SIGTERM", k);
            usleep(RESTART_AFTER_US);
            if (fi_restart(d, k) != 0)
                fail_why(o, "daemon %u did not start again", k);
            usleep(ROLL_PAUSE_US);
        }
        break;
    }
    o->t_over = o->t_fault; /* daemon-roll: every restart counts */
    if (w->fault == F_DAEMON_RESTART || w->fault == F_DAEMON_TERM) {
        usleep(RESTART_AFTER_US);
        if (fi_restart(d, hit) != 0)
            fail_why(o, "daemon %u did not start again", hit);
        o->t_over = fl_now();
    }
}

/* Whether rank r's log names rank victim as the one that died. */
/* Whether rank r's log (its first 16 KiB) holds want; says what it holds when it does not and
 * should (or does and should not). */
static int log_holds(const char *dir, uint32_t r, const char *want, int should)
{
    char path[96], buf[16384];
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "%s/rank%u.log", dir, r);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    int holds = strstr(buf, want) != NULL;
    if (holds != should)
        fprintf(stderr, "rank %u's log %s \"%s\"; it holds:\n%s", r, holds ? "has" : "lacks", want,
                buf);
    return holds;
}

static int log_names(const char *dir, uint32_t r, uint32_t victim)
{
    char want[64];

    snprintf(want, sizeof(want), "rank %u died or left", victim);
    return log_holds(dir, r, want, 1);
}

/* The checks of one surviving rank r under expectation ex. */
static void judge_rank(const row_t *w, enum expect ex, outcome_t *o, uint32_t r, const char *dir)
{
    const fl_sum_t *s = &o->sum[r];
    int here = r / w->per == w->daemons - 1, st = o->status[r];

    if (st == -1)
        fail_why(o, "rank %u hung", r);
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_why(o, "rank %u ended with status 0x%x", r, st);
    if (!s->ended)
        fail_why(o, "rank %u's loop did not end", r);
    if (s->wrong > 0)
        fail_why(o, "rank %u: %u results differ from the reference", r, s->wrong);
    if (ex == SURVIVES) {
        if (s->failed > 0)
            fail_why(o, "rank %u: %u ops failed, the first (op %u) with %d", r, s->failed,
                     s->first_index, s->first_rc);
        if (w->fault != F_NONE && s->max_stall > w->stall_s)
            fail_why(o, "rank %u waited %.2f s for an op after the fault (at most %.2f)", r,
                     s->max_stall, w->stall_s);
        /* With op retry, a reset lane connects again: no op leaves the lanes for the daemons
         * (lane_keeper.c). */
        if (w->fault == F_RESET_LANES && w->retry &&
            log_holds(dir, r, "goes through the daemon", 0))
            fail_why(o, "rank %u left its lanes for the daemons", r);
        return;
    }
    if (s->failed == 0)
        fail_why(o, "rank %u: no op failed", r);
    else if (!(RC(s->first_rc) & (here ? w->rc_here : w->rc_away)))
        fail_why(o, "rank %u: the first failed op (%s) gave %d", r, fl_kind_name(s->first_kind),
                 s->first_rc);
    else if (s->first_fail < o->t_fault || s->first_fail - o->t_fault > w->fail_s)
        fail_why(o, "rank %u: the first failure came %.3f s after the fault (at most %.1f)", r,
                 s->first_fail - o->t_fault, w->fail_s);
    if (w->fault == F_RANK_KILL && !log_names(dir, r, o->n - 1))
        fail_why(o, "rank %u's log does not name rank %u", r, o->n - 1);
}

static void judge(const row_t *w, enum expect ex, outcome_t *o, const char *dir)
{
    for (uint32_t r = 0; r < o->n; r++) {
        int st = o->status[r];
        if (w->fault != F_RANK_KILL || r != o->n - 1)
            judge_rank(w, ex, o, r, dir);
        else if (!(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
            fail_why(o, "the killed rank ended with status 0x%x", st);
    }
}

/* A reset under retry: every daemon's link monitor counts its connections back (within a few of
 * its samples, HCCLD_LINK_CHECK_MS) and none lost. */
static void retry_counted(const fi_daemons_t *d, outcome_t *o)
{
    for (unsigned k = 0; k < d->n; k++) {
        int back = 0;
        for (double until = fl_now() + 5.0;
             (back = fi_links_resumed(d, k)) < 1 && fl_now() < until;)
            usleep(50 * 1000);
        if (back < 1)
            fail_why(o, "daemon %u counts %d connections back after the reset", k, back);
        if (fi_links_lost(d, k) != 0)
            fail_why(o, "daemon %u counts %d connections lost", k, fi_links_lost(d, k));
    }
}

/* After the fault: the daemons still running answer, and serve a new job. */
static void daemons_serve(const row_t *w, const fi_daemons_t *d, outcome_t *o)
{
    unsigned nd = w->daemons - (w->fault == F_DAEMON_KILL);

    for (unsigned k = 0; k < nd; k++)
        if (!fi_answers(d, k))
            fail_why(o, "daemon %u does not answer", k);
    if (nd > 0 && new_job_fails(d, nd, w->per) != 0)
        fail_why(o, "a new job on %u daemons failed", nd);
}

/* Waits until every daemon's link monitor counts a failed data connection: 0, or -1 after
 * P2P_SEEN_S. */
static int links_seen_lost(const fi_daemons_t *d)
{
    double until = fl_now() + P2P_SEEN_S;
    unsigned k = 0;

    while (k < d->n)
        if (fi_links_lost(d, k) > 0)
            k++;
        else if (fl_now() > until)
            return -1;
        else
            usleep(10 * 1000);
    return 0;
}

/* A p2p row's second exchange starts: after the fault, once the daemons saw it. */
static void p2p_go(fi_daemons_t *d, fl_shared_t *sh, outcome_t *o)
{
    if (links_seen_lost(d) != 0)
        fail_why(o, "the daemons' monitors did not count the failed link within %.0f s",
                 P2P_SEEN_S);
    o->t_fault = o->t_over = fl_now();
    __atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
}

static void run_row(const row_t *w, enum expect ex, outcome_t *o)
{
    char dir[] = "/tmp/hccld-faultloop-XXXXXX", path[96];
    int long_run = env_on("HCCLD_FAULTLOOP_LONG");
    pid_t pids[FL_MAX_RANKS];
    fi_daemons_t d;
    fl_shared_t *sh;

    memset(o, 0, sizeof(*o));
    o->n = w->daemons * w->per;
    if (w->p2p)
        setenv("HCCLD_LINK_CHECK_MS", P2P_CHECK_MS, 1);
    int started = mkdtemp(dir) != NULL && fi_start(&d, w->daemons) == 0;
    unsetenv("HCCLD_LINK_CHECK_MS");
    if (!started) {
        fail_why(o, "no daemons");
        return;
    }
    sh = fl_shared_new(w->fault == F_NONE ? (long_run ? 20 : 2) : 0, MAX_FAIL,
                       w->fault == F_NONE ? 0 : 60);
    setenv("HCCL_EXEC_TIMEOUT", STR(EXEC_TIMEOUT_S), 1);
    setenv("HCCL_OP_RETRY_ENABLE", w->retry ? "L1:1" : "L1:0", 1);
    setenv("HCCL_OP_RETRY_PARAMS", RETRY_PARAMS, 1);
    if (w->l0_daemon)
        setenv("HCCL_L0_MODE", "daemon", 1);
    if (sh != NULL)
        snprintf(sh->log_dir, sizeof(sh->log_dir), "%s", dir);
    if (sh == NULL ||
        spawn_job(&d, w->daemons, w->per, w->p2p ? fl_rank_p2p : fl_rank_loop, sh, pids) != 0) {
        fail_why(o, "the job did not start");
    } else {
        if (w->fault != F_NONE && fl_wait_ops(sh, o->n, w->p2p ? 1 : FL_OPS_PER_ITER, 60) != 0)
            fail_why(o, "the ranks did not get through an iteration");
        else if (w->fault != F_NONE)
            inject(w, &d, pids, o);
        if (w->p2p)
            p2p_go(&d, sh, o);
        /* Until every loop ends, or long after the fault: then the ranks stop (those that
         * failed leave their comm; the others agree to end their loops). */
        double until = o->t_over + (ex == SURVIVES ? w->stall_s : w->fail_s) + 5;
        while (w->fault != F_NONE &&
               !all_ended(sh, o->n, w->fault == F_RANK_KILL ? o->n - 1 : ~0u) && fl_now() < until)
            usleep(10 * 1000);
        if (w->fault != F_NONE)
            __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
        harness_wait_status(pids, o->n, 45, o->status);
        for (uint32_t r = 0; r < o->n; r++)
            fl_summarize(sh, r, o->t_over, &o->sum[r]);
        judge(w, ex, o, dir);
        if ((w->fault == F_RESET || w->fault == F_RESET_LANES) && w->retry && ex == SURVIVES)
            retry_counted(&d, o);
        if (w->fault != F_NONE)
            daemons_serve(w, &d, o);
    }
    if (fi_stop(&d) != 0)
        fail_why(o, "a daemon died, or did not stop on SIGTERM");
    unsetenv("HCCL_EXEC_TIMEOUT");
    unsetenv("HCCL_OP_RETRY_ENABLE");
    unsetenv("HCCL_OP_RETRY_PARAMS");
    unsetenv("HCCL_L0_MODE");
    fl_shared_free(sh);
    if (getenv("HCCLD_FAULTLOOP_KEEP") != NULL) {
        fprintf(stderr, "faultloop: the ranks' logs are kept in %s\n", dir);
        return;
    }
    for (uint32_t r = 0; r < o->n; r++) {
        snprintf(path, sizeof(path), "%s/rank%u.log", dir, r);
        unlink(path);
    }
    rmdir(dir);
}

static void report(const row_t *w, const outcome_t *o)
{
    fprintf(stderr, "faultloop: %s, %u daemons x %u ranks, retry %s%s%s%s:\n",
            fault_names[w->fault], w->daemons, w->per, w->retry ? "on" : "off",
            w->p2p ? ", Send/Recv alone" : "", w->l0_daemon ? ", HCCL_L0_MODE=daemon" : "",
            o->resets > 0 ? " (sockets reset: see below)" : "");
    if (o->resets > 0)
        fprintf(stderr, "  %d sockets reset\n", o->resets);
    for (uint32_t r = 0; r < o->n; r++) {
        const fl_sum_t *s = &o->sum[r];
        fprintf(stderr, "  rank %u (daemon %u): %u ok, %u failed", r, r / w->per, s->ok, s->failed);
        for (int i = 0; i < 4 && s->rc_n[i] > 0; i++)
            fprintf(stderr, "%s%u x %d", i ? ", " : " (", s->rc_n[i], s->rcs[i]);
        if (s->failed > 0)
            fprintf(stderr, "), the first: op %u (%s), %d, %.3f s after the fault", s->first_index,
                    fl_kind_name(s->first_kind), s->first_rc, s->first_fail - o->t_fault);
        fprintf(stderr, "; longest wait %.3f s, %u wrong, %s, status 0x%x\n", s->max_stall,
                s->wrong, s->ended ? "ended" : "did not end", o->status[r]);
    }
}

static unsigned selected[NROWS], nselected, p2p_selected[NP2P], np2p;

static void check_row(const row_t *w)
{
    outcome_t o;

    run_row(w, w->expect, &o);
    if (o.why[0] != '\0' || getenv("HCCLD_TEST_REPORT") != NULL)
        report(w, &o);
    ck_assert_msg(o.why[0] == '\0', "%s, %u daemons x %u ranks, retry %s%s%s: %s",
                  fault_names[w->fault], w->daemons, w->per, w->retry ? "on" : "off",
                  w->p2p ? ", Send/Recv alone" : "", w->l0_daemon ? ", HCCL_L0_MODE=daemon" : "",
                  o.why);
}

START_TEST(test_row)
{
    check_row(&rows[selected[_i]]);
}
END_TEST

/* MaxCnt (issue 37): 2 daemons x 1 rank, MaxCnt 1. Rank 0's second allreduce is in flight
 * between the daemons (rank 1 posts its own only at go) while their connection is reset twice:
 * the op rides out the first failure, not the second, and fails with HCCL_E_OPRETRY_FAIL, as
 * HCCL's op retry does past its MaxCnt; rank 1's then fails with HCCL_E_REMOTE (the comm broke
 * on the other node). */
START_TEST(test_maxcnt)
{
    fl_shared_t *sh = fl_shared_new(0, MAX_FAIL, 0);
    fi_daemons_t d;
    pid_t pids[2];
    double t;

    ck_assert_ptr_nonnull(sh);
    ck_assert_int_eq(fi_start(&d, 2), 0);
    setenv("HCCL_EXEC_TIMEOUT", STR(EXEC_TIMEOUT_S), 1);
    setenv("HCCL_OP_RETRY_ENABLE", "L1:1", 1);
    setenv("HCCL_OP_RETRY_PARAMS", "MaxCnt:1, HoldTime:4000, IntervalTime:0", 1);
    ck_assert_int_eq(spawn_job(&d, 2, 1, fl_rank_held, sh, pids), 0);
    ck_assert_int_eq(fl_wait_ops(sh, 2, 1, 60), 0);
    usleep(200 * 1000); /* rank 0's second allreduce is on the wire */
    for (int k = 0; k < 2; k++) {
        int n = 0;
        for (int tries = 0; tries < 20 && n <= 0; tries++, usleep(100 * 1000))
            n = fi_reset_links(&d, 5, &t);
        ck_assert_int_gt(n, 0);
        usleep(300 * 1000); /* the connection is back (it takes milliseconds) */
    }
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE); /* a rank that failed ends */
    __atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    fl_sum_t s0, s1;
    fl_summarize(sh, 0, 0, &s0);
    fl_summarize(sh, 1, 0, &s1);
    ck_assert_uint_eq(s0.ok, 1);
    ck_assert_uint_eq(s0.failed, 1);
    ck_assert_int_eq(s0.first_rc, HCCL_E_OPRETRY_FAIL);
    ck_assert_uint_eq(s1.ok, 1);
    ck_assert_uint_eq(s1.failed, 1);
    ck_assert_int_eq(s1.first_rc, HCCL_E_REMOTE);
    unsetenv("HCCL_EXEC_TIMEOUT");
    unsetenv("HCCL_OP_RETRY_ENABLE");
    unsetenv("HCCL_OP_RETRY_PARAMS");
    fi_stop(&d);
    fl_shared_free(sh);
}
END_TEST

START_TEST(test_p2p_row)
{
    check_row(&p2p_rows[p2p_selected[_i]]);
}
END_TEST

Suite *faultloop_suite(void)
{
    Suite *s = suite_create("faultloop");
    TCase *tc = tcase_create("loop"), *tp = tcase_create("p2p");

    const char *only = getenv("HCCLD_FAULTLOOP_FAULT");

    nselected = 0;
    for (unsigned i = 0; i < NROWS; i++)
        if ((rows[i].in_short || env_on("HCCLD_FAULTLOOP_LONG")) &&
            (only == NULL || strcmp(only, fault_keys[rows[i].fault]) == 0))
            selected[nselected++] = i;
    np2p = 0;
    for (unsigned i = 0; i < NP2P; i++)
        if (only == NULL || strcmp(only, fault_keys[p2p_rows[i].fault]) == 0)
            p2p_selected[np2p++] = i;
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_row, 0, (int)nselected);
    suite_add_tcase(s, tc);
    tcase_set_timeout(tp, 120);
    tcase_add_loop_test(tp, test_p2p_row, 0, (int)np2p);
    if (only == NULL || strcmp(only, "maxcnt") == 0)
        tcase_add_test(tp, test_maxcnt);
    suite_add_tcase(s, tp);
    return s;
}
