/*
 * Network-namespace tests: builds private networks (topo.h), runs the netns suite, and removes
 * every namespace, veth, bridge, qdisc and iptables rule it made, also when a test fails or the
 * run is interrupted. Without the means to build namespaces (not root, no iproute2) it prints
 * why and skips, except under CI, where a skip would hide the suite and so is a failure.
 * CK_RUN_CASE=NAME runs one test case (clean_4x1, loss_2x2, wrong_key, ...).
 */
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netns_tests.h"

static char prefix[24];
static char run_dir[64];
static pid_t runner;

static void cleanup(void)
{
    topo_destroy_prefix(prefix);
    if (run_dir[0])
        topo_run(NULL, NULL, 0, "rm", "-rf", run_dir, NULL);
}

/* Kills the runner's children (the forked test, which would otherwise go on building). */
static void kill_children(void)
{
    DIR *d = opendir("/proc");
    struct dirent *e;

    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[300], stat[512];
        int pid = atoi(e->d_name), ppid = 0;
        FILE *f;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        if (pid <= 0 || (f = fopen(path, "r")) == NULL)
            continue;
        /* "pid (comm) state ppid ...": comm may hold spaces, so parse after the last ')'. */
        if (fgets(stat, sizeof(stat), f) != NULL && strrchr(stat, ')') != NULL)
            sscanf(strrchr(stat, ')') + 1, " %*c %d", &ppid);
        fclose(f);
        if (ppid == (int)runner)
            kill(pid, SIGKILL);
    }
    if (d != NULL)
        closedir(d);
}

/* Only the runner cleans up: test processes and ranks inherit this handler. */
static void on_signal(int sig)
{
    if (getpid() == runner) {
        kill_children();
        cleanup();
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* iproute2, iptables and tc live in sbin, which a CI PATH may lack; cat in bin. */
static void complete_path(void)
{
    static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
    const char *path = getenv("PATH");
    char buf[4096];

    snprintf(buf, sizeof(buf), "%s", path ? path : "");
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        char padded[4200], want[32];
        snprintf(padded, sizeof(padded), ":%s:", buf);
        snprintf(want, sizeof(want), ":%s:", dirs[i]);
        if (strstr(padded, want) == NULL)
            snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s", buf[0] ? ":" : "",
                     dirs[i]);
    }
    setenv("PATH", buf, 1);
}

/* ip netns exec runs the daemon from our working directory, but give it an absolute path. */
static int find_daemon(void)
{
    const char *bin = getenv("HCCLD_BIN");
    char abs[PATH_MAX];

    if (realpath(bin ? bin : "build/bin/hccld", abs) == NULL || access(abs, X_OK) != 0) {
        fprintf(stderr, "netns_tests: no hccld at %s (set HCCLD_BIN)\n",
                bin ? bin : "build/bin/hccld");
        return -1;
    }
    setenv("HCCLD_BIN", abs, 1);
    return 0;
}

int main(void)
{
    const char *ci = getenv("CI");
    char why[256];

    complete_path();
    if (!topo_available(why, sizeof(why))) {
        printf("netns_tests: SKIP: %s\n", why);
        if (ci != NULL && strcmp(ci, "true") == 0) {
            printf("netns_tests: CI must run these tests; failing instead of skipping\n");
            return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
    }
    if (find_daemon() != 0)
        return EXIT_FAILURE;
    runner = getpid();
    snprintf(prefix, sizeof(prefix), "%s%d", TOPO_PREFIX, (int)runner);
    snprintf(run_dir, sizeof(run_dir), "/tmp/%s", prefix);
    topo_clean_stale();
    topo_destroy_prefix(prefix);
    topo_run(NULL, NULL, 0, "rm", "-rf", run_dir, NULL);
    if (mkdir(run_dir, 0755) != 0) {
        perror("netns_tests: mkdir");
        return EXIT_FAILURE;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    /* Bounded waits: a missing rank or a stuck operation fails within seconds. */
    setenv("HCCL_CONNECT_TIMEOUT", "10", 0);
    setenv("HCCL_EXEC_TIMEOUT", "20", 0);

    netns_tests_configure(prefix, run_dir);
    SRunner *sr = srunner_create(netns_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    cleanup();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
