/*
 * hccl_perf_test's processes: under hccl-run this process is one rank (HcclCommInitFromEnv);
 * otherwise it forks -g N ranks that join one root info, waits for them and exits with the
 * worst status, stopping the others when one fails in a way that leaves them stuck.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bind.h"
#include "hccl/hccl.h"
#include "perf_test.h"

int perf_run_from_env(const struct perf_opts *opt)
{
    HcclComm comm;

    if (perf_hccl_error(-1, "HcclCommInitFromEnv", HcclCommInitFromEnv(&comm))) {
        return EXIT_ERROR;
    }
    return perf_bench_rank(opt, comm);
}

static int child_main(const struct perf_opts *opt, const HcclRootInfo *root, uint32_t rank)
{
    HcclComm comm;

    if (perf_hccl_error((int)rank, "HcclCommInitRootInfo",
                        HcclCommInitRootInfo((uint32_t)opt->nranks, root, rank, &comm))) {
        return EXIT_ERROR;
    }
    return perf_bench_rank(opt, comm);
}

static int status_code(int status)
{
    if (WIFEXITED(status)) {
        return WEXITSTATUS(status);
    }
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : EXIT_ERROR;
}

/* The remaining ranks would wait for a dead peer until HCCL's timeouts; stop them sooner. */
static void kill_others(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        if (pids[i] > 0) {
            kill(pids[i], SIGTERM);
        }
    }
}

/*
 * Waits for all children and returns the worst status. A child that failed by anything but
 * wrong values (which every rank sees and reports alike) leaves its peers stuck, so after a
 * grace period the others are terminated; their SIGTERM deaths do not mask the real cause.
 */
static int wait_children(pid_t *pids, int n)
{
    int worst = 0, alive = n, killed = 0;
    double deadline = 0;
    while (alive > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, deadline > 0 ? WNOHANG : 0);
        if (pid < 0 && errno == EINTR) {
            continue;
        }
        if (pid < 0) {
            break;
        }
        if (pid == 0) {
            if (perf_now_us() > deadline) {
                kill_others(pids, n);
                killed = 1;
                deadline = 0;
            } else {
                usleep(10000);
            }
            continue;
        }
        for (int i = 0; i < n; i++) {
            pids[i] = pids[i] == pid ? 0 : pids[i];
        }
        alive--;
        if (killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) {
            continue;
        }
        int code = status_code(status);
        worst = code > worst ? code : worst;
        if (code > EXIT_WRONG && deadline == 0 && !killed) {
            deadline = perf_now_us() + 10e6;
        }
    }
    return worst;
}

int perf_run_forked(const struct perf_opts *opt)
{
    HcclRootInfo root;
    if (perf_hccl_error(-1, "HcclGetRootInfo", HcclGetRootInfo(&root))) {
        return EXIT_ERROR;
    }
    pid_t *pids = calloc((size_t)opt->nranks, sizeof(*pids));
    if (pids == NULL) {
        return EXIT_ERROR;
    }
    fflush(NULL); /* Children must not inherit and repeat buffered output. */
    int started = 0;
    for (; started < opt->nranks; started++) {
        pid_t pid = fork();
        if (pid == 0) {
            bind_local_rank((unsigned)started, (unsigned)opt->nranks);
            exit(child_main(opt, &root, (uint32_t)started));
        }
        if (pid < 0) {
            fprintf(stderr, "%s: fork: %s\n", perf_prog, strerror(errno));
            kill_others(pids, started);
            break;
        }
        pids[started] = pid;
    }
    int worst = wait_children(pids, started);
    free(pids);
    return started < opt->nranks ? EXIT_ERROR : worst;
}
