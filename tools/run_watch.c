#include "run_watch.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static sigset_t watched(void)
{
    sigset_t s;

    sigemptyset(&s);
    sigaddset(&s, SIGCHLD);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    return s;
}

int run_signals(run_job_t *job)
{
    sigset_t s = watched();

    if (sigprocmask(SIG_BLOCK, &s, NULL) != 0)
        return -errno;
    job->sigfd = signalfd(-1, &s, SFD_CLOEXEC | SFD_NONBLOCK);
    return job->sigfd < 0 ? -errno : 0;
}

void run_signals_child(void)
{
    sigset_t s = watched();

    setpgid(0, 0);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Each rank leads a process group of its own (run_signals_child), so that what it started
 * goes with it. */
static void signal_all(run_job_t *job, int sig)
{
    for (int r = 0; r < job->n; r++)
        if (job->ranks[r].pid > 0 && kill(-job->ranks[r].pid, sig) != 0)
            kill(job->ranks[r].pid, sig); /* it left its group (setsid) */
}

/* Writes one line of rank r's pipe i (0: stdout, 1: stderr) with its tag, in one write. */
static void emit(int r, int i, const char *s, size_t len)
{
    char head[48];
    int h = snprintf(head, sizeof(head), "[1,%d]<%s>:", r, i ? "stderr" : "stdout");
    char *line = malloc((size_t)h + len + 1);

    if (line == NULL)
        return;
    memcpy(line, head, (size_t)h);
    memcpy(line + h, s, len);
    line[(size_t)h + len] = '\n';
    if (write(i ? 2 : 1, line, (size_t)h + len + 1) < 0) {
        /* hccl-run's own output is gone: nothing to tell it to */
    }
    free(line);
}

/* Reads what pipe i of rank r holds; emits its whole lines, keeps the rest. At the end of the
 * pipe, the rest goes out as a line of its own and the pipe is closed. */
static void drain(run_rank_t *rk, int r, int i)
{
    char buf[65536];
    ssize_t got = read(rk->out[i], buf, sizeof(buf));

    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (got <= 0) {
        if (rk->part_len[i] > 0)
            emit(r, i, rk->part[i], rk->part_len[i]);
        free(rk->part[i]);
        rk->part[i] = NULL;
        rk->part_len[i] = 0;
        close(rk->out[i]);
        rk->out[i] = -1;
        return;
    }
    char *all = realloc(rk->part[i], rk->part_len[i] + (size_t)got);
    if (all == NULL)
        return;
    memcpy(all + rk->part_len[i], buf, (size_t)got);
    size_t len = rk->part_len[i] + (size_t)got, start = 0;
    for (size_t k = 0; k < len; k++)
        if (all[k] == '\n') {
            emit(r, i, all + start, k - start);
            start = k + 1;
        }
    memmove(all, all + start, len - start);
    rk->part[i] = all;
    rk->part_len[i] = len - start;
}

static int status_of(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

typedef struct watch {
    run_job_t *job;
    int left, first_bad, status, stopping, killed, by_signal;
    double kill_at;
} watch_t;

static void stop(watch_t *w, double now)
{
    if (w->stopping)
        return;
    w->stopping = 1;
    w->kill_at = now + w->job->grace_s;
}

static void reap(watch_t *w)
{
    int st;
    pid_t pid;

    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int r = 0; r < w->job->n; r++) {
            if (w->job->ranks[r].pid != pid)
                continue;
            w->job->ranks[r].pid = 0;
            w->left--;
            if (status_of(st) == 0 || w->first_bad >= 0)
                break;
            w->first_bad = r;
            w->status = status_of(st);
            if (w->by_signal)
                break;
            if (WIFEXITED(st))
                fprintf(stderr, "hccl-run: rank %d exited with status %d", r, w->status);
            else
                fprintf(stderr, "hccl-run: rank %d was killed by signal %d (%s)", r, WTERMSIG(st),
                        strsignal(WTERMSIG(st)));
            if (w->left > 0 && w->job->keep_going)
                fprintf(stderr, "; the other %d rank%s run%s on (--keep-going)", w->left,
                        w->left > 1 ? "s" : "", w->left > 1 ? "" : "s");
            else if (w->left > 0)
                fprintf(stderr, "; stopping the other %d rank%s (SIGTERM, then SIGKILL after %g s)",
                        w->left, w->left > 1 ? "s" : "", w->job->grace_s);
            fprintf(stderr, "\n");
            if (!w->job->keep_going) {
                signal_all(w->job, SIGTERM);
                stop(w, now_s());
            }
            break;
        }
    }
}

static void on_signals(watch_t *w)
{
    struct signalfd_siginfo si;

    while (read(w->job->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD) {
            reap(w);
        } else {
            /* Forwarded, as mpirun does; ranks that ignore it are killed after the grace. */
            w->by_signal = 1;
            signal_all(w->job, (int)si.ssi_signo);
            stop(w, now_s());
        }
    }
    reap(w); /* SIGCHLDs coalesce: look for every exit */
}

int run_watch(run_job_t *job)
{
    watch_t w = {.job = job, .left = job->n, .first_bad = -1};
    struct pollfd *pf = calloc(1 + 2 * (size_t)job->n, sizeof(*pf));
    int *who = calloc(1 + 2 * (size_t)job->n, sizeof(*who));

    if (pf == NULL || who == NULL) {
        free(pf);
        free(who);
        return 1;
    }
    reap(&w); /* ranks that ended before the loop */
    for (;;) {
        nfds_t np = 1;
        pf[0] = (struct pollfd){.fd = job->sigfd, .events = POLLIN};
        for (int r = 0; r < job->n; r++)
            for (int i = 0; i < 2; i++)
                if (job->ranks[r].out[i] >= 0) {
                    who[np] = 2 * r + i;
                    pf[np++] = (struct pollfd){.fd = job->ranks[r].out[i], .events = POLLIN};
                }
        /* Once every rank is gone, what their pipes still hold is read, but nothing waits for
         * a pipe that a rank's own child keeps open. */
        if (w.left == 0 && np == 1)
            break;
        int timeout = -1;
        if (w.left == 0)
            timeout = 0;
        else if (w.stopping && !w.killed)
            timeout = (int)((w.kill_at - now_s()) * 1000) + 1;
        int ready = poll(pf, np, timeout < 0 ? -1 : timeout);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready == 0 && w.left == 0)
            break;
        if (ready > 0 && (pf[0].revents & POLLIN))
            on_signals(&w);
        for (nfds_t k = 1; ready > 0 && k < np; k++)
            if (pf[k].revents & (POLLIN | POLLHUP | POLLERR))
                drain(&job->ranks[who[k] / 2], who[k] / 2, who[k] % 2);
        if (w.stopping && !w.killed && w.left > 0 && now_s() >= w.kill_at) {
            signal_all(job, SIGKILL);
            w.killed = 1;
        }
    }
    for (int r = 0; r < job->n; r++)
        for (int i = 0; i < 2; i++)
            if (job->ranks[r].out[i] >= 0) {
                if (job->ranks[r].part_len[i] > 0)
                    emit(r, i, job->ranks[r].part[i], job->ranks[r].part_len[i]);
                free(job->ranks[r].part[i]);
                close(job->ranks[r].out[i]);
            }
    free(pf);
    free(who);
    return w.first_bad >= 0 ? w.status : 0;
}
