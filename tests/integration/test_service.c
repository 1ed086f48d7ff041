/*
 * hccld as a systemd service, under a fake NOTIFY_SOCKET: READY=1 once it listens, WATCHDOG=1
 * pings at half of WATCHDOG_USEC, RELOADING=1 then READY=1 on SIGHUP with its clients still
 * served (a broken config is reported and the old policy kept; the daemon lives on),
 * STOPPING=1 and exit 0 on SIGTERM; the signals go to the event loop's thread.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

typedef struct fake_systemd {
    char dir[64];
    char notify[100];
    char conf[128];
    int fd;
    pid_t pid;
} fake_systemd_t;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void start(fake_systemd_t *s)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char sock[160], level[16];

    snprintf(s->dir, sizeof(s->dir), "/tmp/hccld-svc-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s->dir));
    snprintf(s->notify, sizeof(s->notify), "%s/notify", s->dir);
    snprintf(s->conf, sizeof(s->conf), "%s/hccld.conf", s->dir);
    snprintf(sock, sizeof(sock), "%s/hccld.sock", s->dir);
    write_file(s->conf, "[daemon]\nworkers = 1\n[class.HIGH]\nmax_bw = 25Gbit\n");
    s->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(s->fd, 0);
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", s->notify);
    ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    snprintf(level, sizeof(level), "%s",
             getenv("HCCLD_TEST_LOG_LEVEL") ? getenv("HCCLD_TEST_LOG_LEVEL") : "warn");
    s->pid = fork();
    ck_assert_int_ge(s->pid, 0);
    if (s->pid == 0) {
        const char *bin = getenv("HCCLD_BIN") ? getenv("HCCLD_BIN") : "build/bin/hccld";
        setenv("NOTIFY_SOCKET", s->notify, 1);
        setenv("WATCHDOG_USEC", "200000", 1);
        unsetenv("WATCHDOG_PID");
        execl(bin, bin, "--socket", sock, "--foreground", "--listen", "none", "--config", s->conf,
              "--log-level", level, (char *)NULL);
        _exit(127);
    }
}

/* Waits up to timeout_ms for a datagram containing want: 1 seen, 0 not. */
static int expect(fake_systemd_t *s, const char *want, int timeout_ms)
{
    struct timespec t0, t;
    char buf[512];

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        int left =
            timeout_ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return 0;
        ssize_t n = recv(s->fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (strstr(buf, want) != NULL)
            return 1;
    }
}

static void stop(fake_systemd_t *s)
{
    int status = -1;

    ck_assert_int_eq(kill(s->pid, SIGTERM), 0);
    ck_assert_msg(expect(s, "STOPPING=1", 5000), "no STOPPING=1 after SIGTERM");
    for (int i = 0; i < 500 && waitpid(s->pid, &status, WNOHANG) == 0; i++)
        usleep(10000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "hccld did not exit 0 (%d)",
                  status);
    close(s->fd);
    unlink(s->notify);
    unlink(s->conf);
    rmdir(s->dir);
}

/* A rank connected to the daemon before a reload: it forms a comm, waits for the word, then
 * runs an allreduce. Returns its pid; ready and go are its pipes. */
static pid_t connected_rank(const char *dir, int ready[2], int go[2])
{
    char sock[160];
    pid_t pid;

    snprintf(sock, sizeof(sock), "%s/hccld.sock", dir);
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        HcclRootInfo ri;
        HcclComm comm;
        float x = 2, y = 0;
        char c = 'r';
        alarm(60);
        setenv("HCCLD_SOCKET", sock, 1);
        if (HcclGetRootInfo(&ri) != HCCL_SUCCESS ||
            HcclCommInitRootInfo(1, &ri, 0, &comm) != HCCL_SUCCESS)
            _exit(2);
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(3);
        if (HcclAllReduce(&x, &y, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) !=
                HCCL_SUCCESS ||
            y != 2)
            _exit(4);
        _exit(HcclCommDestroy(comm) == HCCL_SUCCESS ? 0 : 5);
    }
    return pid;
}

START_TEST(test_notify_watchdog_reload)
{
    fake_systemd_t s;

    start(&s);
    ck_assert_msg(expect(&s, "READY=1", 10000), "no READY=1");
    /* 200 ms watchdog: pings every 100 ms. */
    for (int i = 0; i < 3; i++)
        ck_assert_msg(expect(&s, "WATCHDOG=1", 2000), "watchdog ping %d missing", i);
    /* A client connected across the reload keeps working. */
    int ready[2], go[2], status = -1;
    char c;
    pid_t rank = connected_rank(s.dir, ready, go);
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
    ck_assert_msg(expect(&s, "RELOADING=1", 5000), "no RELOADING=1 after SIGHUP");
    ck_assert_msg(expect(&s, "READY=1", 5000), "no READY=1 after the reload");
    ck_assert_int_eq(write(go[1], &c, 1), 1);
    ck_assert_int_eq(waitpid(rank, &status, 0), rank);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank after reload: %d", status);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
    /* A broken file is refused; the daemon keeps running and pinging. */
    write_file(s.conf, "[class.HIGH]\nmax_bw = lots\n");
    ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
    ck_assert_msg(expect(&s, "READY=1", 5000), "no READY=1 after a failed reload");
    ck_assert_msg(expect(&s, "WATCHDOG=1", 2000), "no ping after a failed reload");
    ck_assert(harness_alive(s.pid));
    stop(&s);
}
END_TEST

/* A config that does not parse stops the start, with a message, before READY=1. */
START_TEST(test_bad_config_refused)
{
    fake_systemd_t s;
    int status = 0;

    snprintf(s.dir, sizeof(s.dir), "/tmp/hccld-svc-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s.dir));
    snprintf(s.conf, sizeof(s.conf), "%s/bad.conf", s.dir);
    write_file(s.conf, "[rules]\nuid.0 = GOLD\n");
    pid_t pid = fork();
    if (pid == 0) {
        const char *bin = getenv("HCCLD_BIN") ? getenv("HCCLD_BIN") : "build/bin/hccld";
        char sock[160];
        snprintf(sock, sizeof(sock), "%s/hccld.sock", s.dir);
        execl(bin, bin, "--socket", sock, "--foreground", "--listen", "none", "--config", s.conf,
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++)
        usleep(10000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 127,
                  "hccld started with a broken config (%d)", status);
    unlink(s.conf);
    rmdir(s.dir);
}
END_TEST

/* HCCL_TRANSPORT=rdma where no RDMA device carries the daemon's address (none does on this
 * machine; the soft-RoCE guest tests the other case): the start fails, saying so. */
START_TEST(test_rdma_forced_without_device)
{
    int p[2], status = 0;
    char out[4096] = "";
    ssize_t n, got = 0;

    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        const char *bin = getenv("HCCLD_BIN") ? getenv("HCCLD_BIN") : "build/bin/hccld";
        char sock[64];
        snprintf(sock, sizeof(sock), "/tmp/hccld-rdma-%d.sock", (int)getpid());
        dup2(p[1], 2);
        setenv("HCCL_TRANSPORT", "rdma", 1);
        execl(bin, bin, "--socket", sock, "--foreground", "--listen", "127.0.0.1:0", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    alarm(20);
    while ((n = read(p[0], out + got, sizeof(out) - 1 - (size_t)got)) > 0)
        got += n;
    alarm(0);
    close(p[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 127,
                  "hccld started with HCCL_TRANSPORT=rdma and no device (%d)", status);
    ck_assert_msg(strstr(out, "HCCL_TRANSPORT=rdma, but no RDMA device carries 127.0.0.1") != NULL,
                  "no clear error: %s", out);
}
END_TEST

/* The unit as `make install` writes it (ExecStart in the build tree) passes
 * systemd-analyze verify; a broken copy does not, so the check itself is live. */
START_TEST(test_unit_verifies)
{
    const char *bin = getenv("HCCLD_BIN") ? getenv("HCCLD_BIN") : "build/bin/hccld";
    char dir[] = "/tmp/hccld-unit-XXXXXX", bindir[512], abs[512], cmd[2048];

    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_ptr_nonnull(realpath(bin, abs));
    snprintf(bindir, sizeof(bindir), "%s", abs);
    *strrchr(bindir, '/') = '\0';
    snprintf(cmd, sizeof(cmd),
             "sed 's|@BINDIR@|%s|g' %s/systemd/hccld.service > %s/hccld.service && "
             "systemd-analyze verify %s/hccld.service",
             bindir, getenv("HCCLD_SRC") ? getenv("HCCLD_SRC") : ".", dir, dir);
    ck_assert_msg(system(cmd) == 0, "systemd-analyze verify failed on the unit");
    snprintf(cmd, sizeof(cmd),
             "sed 's|^ExecStart=.*|ExecStart=relative/hccld|' %s/hccld.service > "
             "%s/broken.service && systemd-analyze verify %s/broken.service 2>/dev/null",
             dir, dir, dir);
    ck_assert_msg(system(cmd) != 0, "systemd-analyze accepted a broken unit");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* SigBlk of thread tid of pid, or all ones if it cannot be read. */
static unsigned long long sig_blocked(pid_t pid, const char *tid)
{
    char path[96], line[256];
    unsigned long long blk = ~0ull;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/task/%.16s/status", (int)pid, tid);
    if ((f = fopen(path, "r")) == NULL)
        return blk;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "SigBlk: %llx", &blk) == 1)
            break;
    fclose(f);
    return blk;
}

/* The daemon's helper threads (engine, workers) block SIGTERM, SIGINT and SIGHUP, and the
 * event loop's thread does not: the kernel hands them to the loop, whose libuv handler acts on
 * them, never to a helper that may keep them (under TSan a worker asleep on a futex did). */
START_TEST(test_signals_go_to_the_loop)
{
    char sock[256], path[64];
    const unsigned long long loop_sigs =
        (1ull << (SIGTERM - 1)) | (1ull << (SIGINT - 1)) | (1ull << (SIGHUP - 1));
    pid_t d = harness_daemon_spawn(sock, sizeof(sock));
    int helpers = 0;
    struct dirent *e;
    DIR *dir;

    ck_assert_int_gt(d, 0);
    snprintf(path, sizeof(path), "/proc/%d/task", (int)d);
    ck_assert_ptr_nonnull(dir = opendir(path));
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        unsigned long long blk = sig_blocked(d, e->d_name);
        if (atoi(e->d_name) == (int)d) {
            ck_assert_msg((blk & loop_sigs) == 0, "the loop's thread blocks %llx", blk & loop_sigs);
        } else {
            ck_assert_msg((blk & loop_sigs) == loop_sigs, "thread %s blocks only %llx", e->d_name,
                          blk & loop_sigs);
            helpers++;
        }
    }
    closedir(dir);
    ck_assert_int_ge(helpers, 1); /* the engine, at least */
    ck_assert_int_eq(harness_daemon_stop(d), 0);
}
END_TEST

Suite *service_suite(void)
{
    Suite *s = suite_create("service");
    TCase *tc = tcase_create("systemd");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_notify_watchdog_reload);
    tcase_add_test(tc, test_bad_config_refused);
    tcase_add_test(tc, test_rdma_forced_without_device);
    tcase_add_test(tc, test_unit_verifies);
    tcase_add_test(tc, test_signals_go_to_the_loop);
    suite_add_tcase(s, tc);
    return s;
}
