/*
 * Load: 32 client processes in 8 jobs of different sizes and QoS classes, each job spread over
 * 2 daemons, run random collectives (kind, dtype, op, placement, size, root) for HCCLD_SOAK_SECS
 * seconds (default 20 here; `make soak` runs 600), every result checked element by element.
 * Zero errors; the daemons' own memory (RssAnon: the clients' shared segments it maps count
 * in RssShmem and grow as it touches more of them) stays within 5% between warm-up and the
 * end, and their descriptor counts return to where they were before the jobs.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define NJOBS 8
#define MAX_COUNT 65537ull

static const uint32_t job_size[NJOBS] = {2, 2, 4, 4, 4, 4, 6, 6}; /* 32 ranks */
static const char *const job_class[3] = {"HIGH", "MEDIUM", "LOW"};

typedef struct soak_arg {
    unsigned job;
    double until; /* CLOCK_MONOTONIC seconds */
} soak_arg_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Random cases until time is up; every 16 the ranks agree (max over them) whether to stop,
 * so that all run the same sequence. */
static int soak_rank(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const soak_arg_t *a = arg;
    uint64_t it = 0;

    /* Warm-up: the largest cases first, so that the daemons' buffers reach their size before
     * memory is measured. */
    for (uint64_t k = 0; k < 64; k++)
        if (colls_random_case(comm, r, n, ~k, MAX_COUNT, 1) != 0)
            return 3;
    for (;;) {
        for (int k = 0; k < 16; k++, it++)
            if (colls_random_case(comm, r, n, (uint64_t)a->job << 40 | it, MAX_COUNT, 0) != 0) {
                fprintf(stderr, "job %u rank %u: case %llu failed\n", a->job, r,
                        (unsigned long long)it);
                return 1;
            }
        int32_t stop = now_s() >= a->until, any = 0;
        if (HcclAllReduce(&stop, &any, 1, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_MAX, comm, NULL) !=
            HCCL_SUCCESS)
            return 2;
        if (any)
            break;
    }
    if (getenv("HCCLD_TEST_REPORT") != NULL && r == 0)
        fprintf(stderr, "soak: job %u (%u ranks): %llu cases\n", a->job, n, (unsigned long long)it);
    return 0;
}

START_TEST(test_soak)
{
    const char *e = getenv("HCCLD_SOAK_SECS");
    double secs = e != NULL ? atof(e) : 20;
    char socks_buf[2][256], *socks[8];
    pid_t d[2], pids[NJOBS][8];
    soak_arg_t args[NJOBS];
    long rss_warm[2], rss_end[2], rss0;
    int fds0[2], fds_end[2], failed = 0;

    HcclRootInfo ri;

    for (int i = 0; i < 2; i++) {
        d[i] = harness_daemon_spawn(socks_buf[i], sizeof(socks_buf[i]));
        ck_assert_int_gt(d[i], 0);
    }
    /* Root infos come from daemon 0: this process is its client from now on (its session
     * belongs in the baseline). */
    setenv("HCCLD_SOCKET", socks_buf[0], 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    for (int i = 0; i < 2; i++)
        harness_proc_usage(d[i], &rss0, &fds0[i]);
    double start = now_s();
    for (unsigned j = 0; j < NJOBS; j++) {
        char name[32];
        uint32_t n = job_size[j];
        snprintf(name, sizeof(name), "soak-%u", j);
        setenv("HCCL_JOB_NAME", name, 1);
        setenv("HCCL_QOS_CLASS", job_class[j % 3], 1);
        args[j] = (soak_arg_t){.job = j, .until = start + secs};
        for (uint32_t r = 0; r < n; r++)
            socks[r] = socks_buf[r / (n / 2)];
        ck_assert_int_eq(
            harness_spawn_ranks_on(n, socks, soak_rank, &args[j], (unsigned)secs + 300, pids[j]),
            0);
    }
    unsetenv("HCCL_JOB_NAME");
    unsetenv("HCCL_QOS_CLASS");
    /* Warm-up: a quarter of a long run, half of a short one; then the end, still under load. */
    int warm = secs >= 120 ? 5 : 10;
    for (int t = 1; t <= 20; t++) {
        usleep((useconds_t)(secs / 20 * 1e6));
        for (int i = 0; i < 2; i++) {
            harness_proc_usage(d[i], t <= warm ? &rss_warm[i] : &rss_end[i], &fds_end[i]);
            if (getenv("HCCLD_TEST_REPORT") != NULL)
                fprintf(stderr, "soak: %.0f s: daemon %d RssAnon %ld KiB\n", secs * t / 20, i,
                        t <= warm ? rss_warm[i] : rss_end[i]);
        }
        if (t == 18)
            break;
    }
    for (unsigned j = 0; j < NJOBS; j++)
        failed += harness_wait(pids[j], job_size[j], (unsigned)secs + 300);
    ck_assert_int_eq(failed, 0);
    for (int i = 0; i < 2; i++) {
        long rss;
        /* Sessions of clients that just exited close as the daemon notices. */
        for (int k = 0; k < 50; k++) {
            harness_proc_usage(d[i], &rss, &fds_end[i]);
            if (fds_end[i] == fds0[i])
                break;
            usleep(100 * 1000);
        }
        if (fds_end[i] != fds0[i]) {
            char cmd[64];
            snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)d[i]);
            (void)system(cmd);
        }
        if (getenv("HCCLD_TEST_REPORT") != NULL)
            fprintf(stderr,
                    "soak: daemon %d: RssAnon %ld KiB after warm-up, %ld at 90%%; fds %d "
                    "before, %d after\n",
                    i, rss_warm[i], rss_end[i], fds0[i], fds_end[i]);
            /* AddressSanitizer keeps freed memory in quarantine (up to 256 MiB): there the RSS
             * grows by design, and LeakSanitizer checks for leaks when the daemon exits (a leak
             * makes its exit status nonzero, checked below). */
#ifndef __SANITIZE_ADDRESS__
        ck_assert_msg(rss_end[i] <= rss_warm[i] + rss_warm[i] / 20,
                      "daemon %d: RssAnon grew from %ld to %ld KiB", i, rss_warm[i], rss_end[i]);
#endif
        ck_assert_msg(fds_end[i] == fds0[i], "daemon %d: %d fds before, %d after", i, fds0[i],
                      fds_end[i]);
        ck_assert_msg(harness_alive(d[i]), "daemon %d died", i);
        int st = harness_daemon_stop_within(d[i], 30);
        ck_assert_msg(st == 0, "daemon %d: exit status %d on SIGTERM", i, st);
    }
    setenv("HCCLD_SOCKET", harness_socket(), 1);
}
END_TEST

Suite *soak_suite(void)
{
    Suite *s = suite_create("soak");
    TCase *tc = tcase_create("load");
    const char *e = getenv("HCCLD_SOAK_SECS");

    tcase_set_timeout(tc, (double)(e != NULL ? atoi(e) : 20) + 600);
    tcase_add_test(tc, test_soak);
    suite_add_tcase(s, tc);
    return s;
}
