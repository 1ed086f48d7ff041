#include "topo.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 40

static const char *ip_bin(void)
{
    static const char *const paths[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return "ip";
}

/* Reads the child's output until it closes it or the deadline passes. */
static void drain(int fd, pid_t pid, char *out, size_t cap)
{
    time_t deadline = time(NULL) + 20;
    size_t len = 0;
    char tmp[4096];

    out[0] = '\0';
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) > 0) {
            ssize_t got = read(fd, tmp, sizeof(tmp));
            if (got <= 0)
                return;
            size_t take = (size_t)got < cap - 1 - len ? (size_t)got : cap - 1 - len;
            memcpy(out + len, tmp, take);
            out[len += take] = '\0';
        }
        if (time(NULL) > deadline) {
            kill(pid, SIGKILL);
            return;
        }
    }
}

static int spawn_capture(const char *const *argv, char *out, size_t cap)
{
    int fds[2], st = 0;
    pid_t pid;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDONLY);
        if (nul < 0 || dup2(nul, STDIN_FILENO) < 0 || dup2(fds[1], STDOUT_FILENO) < 0 ||
            dup2(fds[1], STDERR_FILENO) < 0)
            _exit(126);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    drain(fds[0], pid, out, cap);
    close(fds[0]);
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static size_t build_argv(const char **argv, const char *ns, const char *arg0, va_list ap)
{
    size_t n = 0;
    const char *a;

    if (ns != NULL) {
        argv[n++] = ip_bin();
        argv[n++] = "netns";
        argv[n++] = "exec";
        argv[n++] = ns;
    }
    argv[n++] = strcmp(arg0, "ip") == 0 ? ip_bin() : arg0;
    while (n < MAX_ARGS - 1 && (a = va_arg(ap, const char *)) != NULL)
        argv[n++] = a;
    argv[n] = NULL;
    return n;
}

int topo_run(const char *ns, char *out, size_t cap, const char *arg0, ...)
{
    const char *argv[MAX_ARGS];
    char local[1024];
    va_list ap;

    va_start(ap, arg0);
    build_argv(argv, ns, arg0, ap);
    va_end(ap);
    if (out == NULL || cap == 0)
        return spawn_capture(argv, local, sizeof(local));
    return spawn_capture(argv, out, cap);
}

/* Runs a setup step; a failure is printed with the command and its output. */
static int step(const char *ns, const char *arg0, ...) __attribute__((sentinel));
static int step(const char *ns, const char *arg0, ...)
{
    const char *argv[MAX_ARGS];
    char out[1024], cmd[512] = "";
    va_list ap;
    int rc;

    va_start(ap, arg0);
    build_argv(argv, ns, arg0, ap);
    va_end(ap);
    if ((rc = spawn_capture(argv, out, sizeof(out))) == 0)
        return 0;
    for (size_t i = 0; argv[i] != NULL; i++)
        snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), "%s%s", i ? " " : "", argv[i]);
    fprintf(stderr, "netns: `%s` failed (status %d): %s\n", cmd, rc, out);
    return -1;
}

/* Kills every process in the namespace, waits until none is left, deletes it. */
static void destroy_ns(const char *name)
{
    char out[4096];

    for (int round = 0; round < 150; round++) {
        if (topo_run(NULL, out, sizeof(out), "ip", "netns", "pids", name, NULL) != 0 ||
            strspn(out, " \n") == strlen(out))
            break;
        for (char *save, *tok = strtok_r(out, " \n", &save); tok != NULL;
             tok = strtok_r(NULL, " \n", &save)) {
            char *end;
            long pid = strtol(tok, &end, 10);
            /* Only whole numbers: kill(0) or kill(-1) would hit far more than the namespace. */
            if (*end == '\0' && pid > 1 && pid != getpid())
                kill((pid_t)pid, SIGKILL);
        }
        usleep(20000);
    }
    topo_run(NULL, NULL, 0, "ip", "netns", "del", name, NULL);
}

/* Calls fn on the name of every namespace that `ip netns list` shows. */
static void each_ns(void (*fn)(const char *name, const void *arg), const void *arg)
{
    char out[16384];

    if (topo_run(NULL, out, sizeof(out), "ip", "netns", "list", NULL) != 0)
        return;
    for (char *save, *line = strtok_r(out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        line[strcspn(line, " \t")] = '\0';
        if (*line)
            fn(line, arg);
    }
}

static void destroy_if_prefixed(const char *name, const void *arg)
{
    const char *prefix = arg;
    size_t len = strlen(prefix);

    if (strncmp(name, prefix, len) == 0 && name[len] == '-')
        destroy_ns(name);
}

void topo_destroy_prefix(const char *prefix)
{
    each_ns(destroy_if_prefixed, prefix);
}

void topo_destroy(const topo_t *t)
{
    topo_destroy_prefix(t->prefix);
}

/* A run is alive while its runner's pid runs a program of the same name as this one. */
static int run_alive(pid_t pid)
{
    char path[64], mine[64] = "", theirs[64] = "";
    FILE *f;

    if (pid == getpid())
        return 1;
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    if (fgets(theirs, sizeof(theirs), f) == NULL)
        theirs[0] = '\0';
    fclose(f);
    if ((f = fopen("/proc/self/comm", "r")) != NULL) {
        if (fgets(mine, sizeof(mine), f) == NULL)
            mine[0] = '\0';
        fclose(f);
    }
    return strcmp(mine, theirs) == 0;
}

static void destroy_if_stale(const char *name, const void *arg)
{
    const char *p = name + strlen(TOPO_PREFIX);
    char *end;
    long pid;

    (void)arg;
    if (strncmp(name, TOPO_PREFIX, strlen(TOPO_PREFIX)) != 0)
        return;
    pid = strtol(p, &end, 10);
    if (end == p || *end != '-' || pid <= 0 || run_alive((pid_t)pid))
        return;
    fprintf(stderr, "netns: removing %s, left by a run that is gone\n", name);
    destroy_ns(name);
}

void topo_clean_stale(void)
{
    each_ns(destroy_if_stale, NULL);
}

int topo_available(char *why, size_t cap)
{
    char probe[64], out[1024];
    int rc;

    if (geteuid() != 0) {
        snprintf(why, cap, "not root (network namespaces need CAP_SYS_ADMIN)");
        return 0;
    }
    if (access(ip_bin(), X_OK) != 0 && topo_run(NULL, NULL, 0, "ip", "-V", NULL) != 0) {
        snprintf(why, cap, "no `ip` command (iproute2)");
        return 0;
    }
    snprintf(probe, sizeof(probe), "%s%d-probe", TOPO_PREFIX, (int)getpid());
    rc = topo_run(NULL, out, sizeof(out), "ip", "netns", "add", probe, NULL);
    topo_run(NULL, NULL, 0, "ip", "netns", "del", probe, NULL);
    if (rc != 0) {
        out[strcspn(out, "\n")] = '\0';
        snprintf(why, cap, "cannot create a network namespace: %s", out);
        return 0;
    }
    return 1;
}

static int add_node(topo_t *t, unsigned k)
{
    char cidr[24];

    snprintf(cidr, sizeof(cidr), "%s/24", t->addr[k]);
    if (step(NULL, "ip", "netns", "add", t->node[k], NULL) ||
        step(NULL, "ip", "-n", t->node[k], "link", "set", "lo", "up", NULL) ||
        step(NULL, "ip", "-n", t->node[k], "link", "add", "eth0", "type", "veth", "peer", "name",
             t->port[k], "netns", t->sw, NULL) ||
        step(NULL, "ip", "-n", t->node[k], "addr", "add", cidr, "dev", "eth0", NULL) ||
        step(NULL, "ip", "-n", t->node[k], "link", "set", "eth0", "up", NULL) ||
        step(NULL, "ip", "-n", t->sw, "link", "set", t->port[k], "master", "br0", NULL) ||
        step(NULL, "ip", "-n", t->sw, "link", "set", t->port[k], "up", NULL))
        return -1;
    return 0;
}

int topo_create(topo_t *t, const char *prefix, unsigned n)
{
    if (n == 0 || n > TOPO_MAX_NODES)
        return -1;
    memset(t, 0, sizeof(*t));
    snprintf(t->prefix, sizeof(t->prefix), "%s", prefix);
    t->n = n;
    snprintf(t->sw, sizeof(t->sw), "%s-sw", prefix);
    for (unsigned k = 0; k < n; k++) {
        snprintf(t->node[k], sizeof(t->node[k]), "%s-n%u", prefix, k + 1);
        snprintf(t->addr[k], sizeof(t->addr[k]), "%s.%u", TOPO_SUBNET, k + 1);
        snprintf(t->port[k], sizeof(t->port[k]), "p%u", k + 1);
        t->exec[k][0] = ip_bin();
        t->exec[k][1] = "netns";
        t->exec[k][2] = "exec";
        t->exec[k][3] = t->node[k];
        t->exec[k][4] = NULL;
    }
    topo_destroy(t);
    if (step(NULL, "ip", "netns", "add", t->sw, NULL) ||
        step(NULL, "ip", "-n", t->sw, "link", "add", "br0", "type", "bridge", NULL) ||
        step(NULL, "ip", "-n", t->sw, "link", "set", "br0", "up", NULL))
        goto err_destroy;
    for (unsigned k = 0; k < n; k++)
        if (add_node(t, k) != 0)
            goto err_destroy;
    return 0;

err_destroy:
    topo_destroy(t);
    return -1;
}
