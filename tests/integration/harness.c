#include "harness.h"
#include "uds.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char sock_path[256];
static char admin_path[256];

const char *harness_socket(void)
{
    return sock_path;
}

const char *harness_admin_socket(void)
{
    return admin_path;
}

static int can_connect(const char *path)
{
    int fd = uds_connect(path);

    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

int harness_alive(pid_t pid)
{
    return waitpid(pid, NULL, WNOHANG) == 0;
}

int harness_quick(void)
{
    const char *e = getenv("HCCLD_TEST_QUICK");

    return e != NULL && strcmp(e, "1") == 0;
}

/* The temporary directories of spawned daemons, removed when they stop. */
#define SPAWNED_MAX 64
static struct {
    pid_t pid;
    char dir[32];
} spawned[SPAWNED_MAX];

static void spawned_add(pid_t pid, const char *dir)
{
    for (int i = 0; i < SPAWNED_MAX; i++)
        if (spawned[i].pid == 0) {
            spawned[i].pid = pid;
            snprintf(spawned[i].dir, sizeof(spawned[i].dir), "%s", dir);
            return;
        }
}

static void spawned_remove(pid_t pid)
{
    for (int i = 0; i < SPAWNED_MAX; i++)
        if (spawned[i].pid == pid) {
            /* A daemon that stopped removed its sockets; one that was killed did not. */
            char path[64];
            snprintf(path, sizeof(path), "%s/hccld.sock", spawned[i].dir);
            unlink(path);
            snprintf(path, sizeof(path), "%s/hccld-admin.sock", spawned[i].dir);
            unlink(path);
            if (rmdir(spawned[i].dir) != 0)
                fprintf(stderr, "harness: rmdir(%s): %s\n", spawned[i].dir, strerror(errno));
            spawned[i].pid = 0;
            return;
        }
}

pid_t harness_daemon_spawn(char *sock, size_t cap)
{
    const char *bin = getenv("HCCLD_BIN");
    char dir[] = "/tmp/hccld-test-XXXXXX";
    pid_t pid;

    if (bin == NULL)
        bin = "build/bin/hccld";
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(sock, cap, "%s/hccld.sock", dir);
    pid = fork();
    if (pid == 0) {
        const char *level = getenv("HCCLD_TEST_LOG_LEVEL");
        execl(bin, bin, "--socket", sock, "--foreground", "--listen", "127.0.0.1:0", "--log-level",
              level ? level : "error", (char *)NULL);
        _exit(127);
    }
    if (pid < 0) {
        rmdir(dir);
        return -1;
    }
    spawned_add(pid, dir);
    /* Ready means accepting connections; bounded so that a broken daemon fails fast. */
    for (int i = 0; i < 1000 && !can_connect(sock); i++) {
        if (!harness_alive(pid))
            return -1;
        usleep(10000);
    }
    return pid;
}

pid_t harness_daemon_start(const char *extra_arg)
{
    pid_t pid = harness_daemon_spawn(sock_path, sizeof(sock_path));
    char *slash;

    (void)extra_arg;
    snprintf(admin_path, sizeof(admin_path), "%s", sock_path);
    slash = strrchr(admin_path, '/');
    snprintf(slash + 1, sizeof(admin_path) - (size_t)(slash + 1 - admin_path), "hccld-admin.sock");
    if (pid > 0)
        setenv("HCCLD_SOCKET", sock_path, 1);
    return pid;
}

Hccld__Msg *harness_daemon_status(const char *sock)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__StatusReq req = HCCLD__STATUS_REQ__INIT;
    char admin[256];
    const char *slash = strrchr(sock, '/');
    uds_conn_t conn;
    int fd;

    if (slash == NULL)
        return NULL;
    snprintf(admin, sizeof(admin), "%.*s/hccld-admin.sock", (int)(slash - sock), sock);
    if ((fd = uds_connect(admin)) < 0)
        return NULL;
    uds_conn_init(&conn, fd);
    m.req_id = 1;
    m.body_case = HCCLD__MSG__BODY_STATUS_REQ;
    m.status_req = &req;
    if (uds_send(fd, &m, NULL, 0) != 0 || uds_recv(&conn, &resp, 5000) != 0 ||
        resp->body_case != HCCLD__MSG__BODY_STATUS_RESP) {
        if (resp != NULL)
            frame_msg_free(resp);
        resp = NULL;
    }
    uds_conn_close(&conn);
    return resp;
}

int harness_daemon_addr(const char *sock, char *out, size_t cap)
{
    Hccld__Msg *resp = harness_daemon_status(sock);
    int rc = -1;

    if (resp != NULL && resp->status_resp->advertised[0]) {
        snprintf(out, cap, "%s", resp->status_resp->advertised);
        rc = 0;
    }
    if (resp != NULL)
        frame_msg_free(resp);
    return rc;
}

int harness_daemon_data_conns(const char *sock)
{
    Hccld__Msg *resp = harness_daemon_status(sock);
    int n = resp != NULL ? (int)resp->status_resp->data_conns : -1;

    if (resp != NULL)
        frame_msg_free(resp);
    return n;
}

uint64_t harness_daemon_tx_bytes(const char *sock)
{
    Hccld__Msg *resp = harness_daemon_status(sock);
    uint64_t n = resp != NULL ? resp->status_resp->net_tx_bytes : UINT64_MAX;

    if (resp != NULL)
        frame_msg_free(resp);
    return n;
}

int harness_spawn_ranks_on(uint32_t n, char *const *socks, rank_fn fn, void *arg,
                           unsigned timeout_s, pid_t *pids)
{
    return harness_spawn_ranks_cfg(n, socks, NULL, fn, arg, timeout_s, pids);
}

int harness_spawn_ranks_cfg(uint32_t n, char *const *socks, const HcclCommConfig *cfg, rank_fn fn,
                            void *arg, unsigned timeout_s, pid_t *pids)
{
    HcclRootInfo ri;
    HcclResult rc = HcclGetRootInfo(&ri);

    if (rc != HCCL_SUCCESS) {
        fprintf(stderr, "HcclGetRootInfo: %s\n", HcclGetErrorString(rc));
        return -1;
    }
    for (uint32_t r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            HcclComm comm;
            alarm(timeout_s);
            if (socks != NULL && socks[r] != NULL)
                setenv("HCCLD_SOCKET", socks[r], 1);
            rc = cfg != NULL ? HcclCommInitRootInfoConfig(n, &ri, r, cfg, &comm)
                             : HcclCommInitRootInfo(n, &ri, r, &comm);
            if (rc != HCCL_SUCCESS) {
                fprintf(stderr, "rank %u: init: %s\n", r, HcclGetErrorString(rc));
                _exit(3);
            }
            int st = fn(comm, r, n, arg);
            if (HcclCommDestroy(comm) != HCCL_SUCCESS)
                st = st ? st : 4;
            _exit(st);
        }
    }
    return 0;
}

int harness_spawn_ranks(uint32_t n, rank_fn fn, void *arg, unsigned timeout_s, pid_t *pids)
{
    return harness_spawn_ranks_on(n, NULL, fn, arg, timeout_s, pids);
}

int harness_wait_status(pid_t *pids, uint32_t n, unsigned timeout_s, int *status)
{
    time_t deadline = time(NULL) + timeout_s + 5;
    uint32_t left = n;
    int failed = 0;

    while (left > 0) {
        for (uint32_t r = 0; r < n; r++) {
            int st;
            if (pids[r] <= 0 || waitpid(pids[r], &st, WNOHANG) != pids[r])
                continue;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "rank %u failed (%s %d)\n", r, WIFEXITED(st) ? "exit" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                failed++;
            }
            if (status != NULL)
                status[r] = st;
            pids[r] = 0;
            left--;
        }
        if (left > 0 && time(NULL) > deadline) {
            for (uint32_t r = 0; r < n; r++)
                if (pids[r] > 0) {
                    fprintf(stderr, "rank %u hung: killed\n", r);
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                    if (status != NULL)
                        status[r] = -1;
                    pids[r] = 0;
                    failed++;
                    left--;
                }
        }
        if (left > 0)
            usleep(2000);
    }
    return failed;
}

int harness_wait(pid_t *pids, uint32_t n, unsigned timeout_s)
{
    return harness_wait_status(pids, n, timeout_s, NULL);
}

int harness_run_ranks(uint32_t n, rank_fn fn, void *arg, unsigned timeout_s)
{
    pid_t pids[256];

    if (n > 256 || harness_spawn_ranks(n, fn, arg, timeout_s, pids) != 0)
        return (int)n;
    return harness_wait(pids, n, timeout_s);
}

static void spawn_exec(const harness_daemon_opts_t *o, const char *bin, const char *sock)
{
    const char *argv[32];
    const char *level = o->log_level ? o->log_level : getenv("HCCLD_TEST_LOG_LEVEL");
    size_t n = 0;

    for (size_t i = 0; o->prefix != NULL && o->prefix[i] != NULL && n < 20; i++)
        argv[n++] = o->prefix[i];
    argv[n++] = bin;
    argv[n++] = "--socket";
    argv[n++] = sock;
    argv[n++] = "--foreground";
    argv[n++] = "--listen";
    argv[n++] = o->listen ? o->listen : "127.0.0.1:0";
    argv[n++] = "--log-level";
    argv[n++] = level ? level : "error";
    argv[n] = NULL;
    if (o->die_with_parent)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (o->log_path != NULL) {
        int fd = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
            _exit(126);
    }
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

pid_t harness_daemon_spawn_opts(const harness_daemon_opts_t *o, char *sock, size_t cap)
{
    const char *bin = getenv("HCCLD_BIN");
    char dir[] = "/tmp/hccld-test-XXXXXX", admin[256];
    pid_t pid;

    if (bin == NULL)
        bin = "build/bin/hccld";
    if (o->dir == NULL && mkdtemp(dir) == NULL)
        return -1;
    snprintf(sock, cap, "%s/hccld.sock", o->dir ? o->dir : dir);
    snprintf(admin, sizeof(admin), "%s/hccld-admin.sock", o->dir ? o->dir : dir);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        spawn_exec(o, bin, sock);
    /* Ready means accepting connections on both sockets (the admin one listens just after the
     * clients' one: a status asked in between found nothing, seen once under TSan); bounded so
     * that a broken daemon fails fast. */
    for (int i = 0; i < 1000 && !(can_connect(sock) && can_connect(admin)); i++) {
        if (!harness_alive(pid))
            return -1;
        usleep(10000);
    }
    if (!can_connect(sock) || !can_connect(admin)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

/* Where each thread of a hung process waits: the kernel's view (/proc), then gdb's backtraces
 * when gdb is installed. */
static void dump_threads(pid_t pid)
{
    char path[64], buf[512];
    struct dirent *e;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if ((dir = opendir(path)) == NULL)
        return;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        const char *files[] = {"comm", "wchan", "syscall"};
        fprintf(stderr, "  thread %s:", e->d_name);
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            snprintf(path, sizeof(path), "/proc/%d/task/%.16s/%s", (int)pid, e->d_name, files[i]);
            FILE *f = fopen(path, "r");
            size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
            if (f != NULL)
                fclose(f);
            buf[n] = '\0';
            buf[strcspn(buf, "\n")] = '\0';
            fprintf(stderr, " %s=%s", files[i], buf);
        }
        fprintf(stderr, "\n");
    }
    closedir(dir);
    snprintf(buf, sizeof(buf),
             "command -v gdb >/dev/null && gdb -batch -p %d -ex 'thread apply all bt' 1>&2 "
             "</dev/null",
             (int)pid);
    if (system(buf) != 0)
        fprintf(stderr, "  (no gdb backtraces)\n");
}

static int stop_daemon(pid_t pid, unsigned timeout_s, int *killed_p)
{
    int st, rc = -1, reaped = 0;

    *killed_p = 0;
    if (pid <= 0 || kill(pid, SIGTERM) != 0)
        return -1;
    for (unsigned i = 0; i < timeout_s * 100 && !reaped; i++) {
        pid_t got = waitpid(pid, &st, WNOHANG);
        if (got != 0) { /* it exited, or is not ours to wait for */
            reaped = 1;
            rc = got == pid && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        } else
            usleep(10000);
    }
    if (!reaped) {
        fprintf(stderr, "daemon %d did not stop within %u s of SIGTERM; its threads:\n", (int)pid,
                timeout_s);
        dump_threads(pid);
        *killed_p = 1;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    spawned_remove(pid);
    return rc;
}

int harness_daemon_stop_within(pid_t pid, unsigned timeout_s)
{
    int killed;

    return stop_daemon(pid, timeout_s, &killed);
}

int harness_daemon_stop(pid_t pid)
{
    int killed = 0;

    if (pid > 0)
        stop_daemon(pid, HARNESS_STOP_S, &killed);
    return killed ? -1 : 0;
}

void harness_proc_usage(pid_t pid, long *rss_anon_kb, int *fds)
{
    char path[64], line[256];
    struct dirent *e;
    FILE *f;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    *rss_anon_kb = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "RssAnon: %ld", rss_anon_kb) == 1)
            break;
    fclose(f);
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    dir = opendir(path);
    ck_assert_msg(dir != NULL, "cannot read %s", path);
    *fds = 0;
    while ((e = readdir(dir)) != NULL)
        *fds += e->d_name[0] != '.';
    closedir(dir);
}

const char *harness_bin_dir(void)
{
    static char dir[512];
    const char *bin = getenv("HCCLD_BIN") ? getenv("HCCLD_BIN") : "build/bin/hccld";
    const char *slash = strrchr(bin, '/');

    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - bin) : 1, slash ? bin : ".");
    return dir;
}

/* hccld-ctl beside the daemon under test. */
static const char *ctl_path(void)
{
    static char path[600];

    snprintf(path, sizeof(path), "%s/hccld-ctl", harness_bin_dir());
    return path;
}

/* Runs hccld-ctl with args (as uid/gid if uid > 0); its exit status, or -1. Its stdout and
 * stderr go to out if not NULL. */
int harness_ctl(uid_t uid, char *out, size_t cap, const char *args)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "exec %s --admin-socket %s %s 2>&1", ctl_path(),
             harness_admin_socket(), args);
    return harness_sh(uid, out, cap, cmd);
}

int harness_sh(uid_t uid, char *out, size_t cap, const char *cmd)
{
    int fds[2], status;

    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        if (uid > 0 && (setgid(uid) != 0 || setuid(uid) != 0))
            _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    char sink[256];
    while ((got = read(fds[0], out && n + 1 < cap ? out + n : sink,
                       out && n + 1 < cap ? cap - n - 1 : sizeof(sink))) > 0)
        if (out && n + 1 < cap)
            n += (size_t)got;
    if (out)
        out[n] = '\0';
    close(fds[0]);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* Sends this process's stderr (and its children's) to a fresh file; returns the old stderr. */
int harness_stderr_to(char *path, size_t cap)
{
    int fd, saved;

    snprintf(path, cap, "/tmp/hccld-cfg-log-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
    close(fd);
    return saved;
}

/* Puts stderr back; says whether the file holds needle; removes it. */
int harness_stderr_back_has(int saved, const char *path, const char *needle)
{
    char buf[16384];
    FILE *f;
    size_t n;

    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    unlink(path);
    if (strstr(buf, needle) == NULL) {
        fprintf(stderr, "log lacks \"%s\"; it holds:\n%s\n", needle, buf);
        return 0;
    }
    return 1;
}
