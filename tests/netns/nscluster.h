/* A cluster for the netns tests: one hccld per node namespace (topo.h), listening on the
 * node's private address, with its socket and log in the run's directory. */
#ifndef HCCLD_TESTS_NETNS_NSCLUSTER_H
#define HCCLD_TESTS_NETNS_NSCLUSTER_H

#include <sys/types.h>

#include "topo.h"

#define CLUSTER_PORT "60000" /* each daemon's control port, on its node's address */

typedef struct cluster {
    topo_t topo;
    pid_t pids[TOPO_MAX_NODES];
    char socks[TOPO_MAX_NODES][256];
    char logs[TOPO_MAX_NODES][256];
} cluster_t;

/* The directory of the run (sockets, logs, files the tests leave for their ranks). */
const char *cluster_run_dir(void);
/* Builds `nodes` namespaces and starts a daemon in each; HCCLD_SOCKET names node 1's, the root
 * of every job. Fails the test (ck_assert) if any step fails. */
void cluster_up(cluster_t *c, unsigned nodes);
/* Every daemon must still run and stop cleanly on SIGTERM; then the namespaces go. */
void cluster_down(cluster_t *c);
/* The last telling lines of every daemon's log, to explain a failure. */
void dump_logs(const cluster_t *c);

#endif
