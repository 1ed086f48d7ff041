/* The netns tests' cluster (nscluster.h). */
#include "nscluster.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../integration/harness.h"
#include "netns_tests.h"

static char run_prefix[24];
static char run_dir[64];

void netns_tests_configure(const char *prefix, const char *dir)
{
    snprintf(run_prefix, sizeof(run_prefix), "%s", prefix);
    snprintf(run_dir, sizeof(run_dir), "%s", dir);
}

const char *cluster_run_dir(void)
{
    return run_dir;
}

/* Whether a log line is worth showing after a failure: the per-size algorithm choices are
 * not. */
static int telling(const char *line)
{
    return strstr(line, " INFO COLL: ") == NULL;
}

void dump_logs(const cluster_t *c)
{
    char line[1024];

    for (unsigned k = 0; k < c->topo.n; k++) {
        FILE *f = fopen(c->logs[k], "r");
        long lines = 0, skip;
        if (f == NULL)
            continue;
        while (fgets(line, sizeof(line), f) != NULL)
            lines += telling(line);
        skip = lines > 25 ? lines - 25 : 0;
        rewind(f);
        fprintf(stderr, "--- %s (hccld of node %u, last %ld lines but algorithm choices)\n",
                c->logs[k], k + 1, lines - skip);
        for (long i = 0; fgets(line, sizeof(line), f) != NULL;)
            if (telling(line) && i++ >= skip)
                fputs(line, stderr);
        fclose(f);
    }
}

void cluster_up(cluster_t *c, unsigned nodes)
{
    char dir[128], listen[32];

    memset(c, 0, sizeof(*c));
    ck_assert_msg(topo_create(&c->topo, run_prefix, nodes) == 0, "building %u namespaces", nodes);
    for (unsigned k = 0; k < nodes; k++) {
        snprintf(dir, sizeof(dir), "%s/n%u", run_dir, k + 1);
        ck_assert_msg(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
        snprintf(c->logs[k], sizeof(c->logs[k]), "%s/hccld.log", dir);
        snprintf(listen, sizeof(listen), "%s:%s", c->topo.addr[k], CLUSTER_PORT);
        snprintf(c->socks[k], sizeof(c->socks[k]), "%s/hccld.sock", dir);
        unlink(c->logs[k]);
        unlink(c->socks[k]);
        harness_daemon_opts_t o = {.prefix = c->topo.exec[k],
                                   .listen = listen,
                                   .dir = dir,
                                   .log_path = c->logs[k],
                                   .log_level = getenv("HCCLD_TEST_LOG_LEVEL") ? NULL : "info"};
        c->pids[k] = harness_daemon_spawn_opts(&o, c->socks[k], sizeof(c->socks[k]));
        if (c->pids[k] <= 0)
            dump_logs(c);
        ck_assert_msg(c->pids[k] > 0, "hccld in %s did not start", c->topo.node[k]);
    }
    /* Root infos come from node 1's daemon: it is the root of every job. */
    setenv("HCCLD_SOCKET", c->socks[0], 1);
}

void cluster_down(cluster_t *c)
{
    int alive[TOPO_MAX_NODES], status[TOPO_MAX_NODES];

    for (unsigned k = 0; k < c->topo.n; k++)
        alive[k] = harness_alive(c->pids[k]);
    for (unsigned k = 0; k < c->topo.n; k++)
        status[k] = alive[k] ? harness_daemon_stop_within(c->pids[k], 10) : -1;
    for (unsigned k = 0; k < c->topo.n; k++)
        if (!alive[k] || status[k] != 0) {
            dump_logs(c);
            break;
        }
    topo_destroy(&c->topo);
    for (unsigned k = 0; k < c->topo.n; k++) {
        ck_assert_msg(alive[k], "hccld of node %u died during the test", k + 1);
        ck_assert_msg(status[k] == 0, "hccld of node %u: exit status %d on SIGTERM", k + 1,
                      status[k]);
    }
}
