/*
 * A test network: one Linux network namespace per node, each with a veth pair to a bridge that
 * lives in a "switch" namespace of its own, so that nothing in the root namespace changes.
 * Node k (0-based) is namespace PREFIX-n<k+1> with eth0 = 10.213.0.<k+1>/24; the switch is
 * PREFIX-sw with bridge br0 and ports p<k+1>. PREFIX is "hcns<pid of the test runner>", so that
 * parallel runs do not clash and leftovers of dead runs can be told apart.
 */
#ifndef HCCLD_TESTS_NETNS_TOPO_H
#define HCCLD_TESTS_NETNS_TOPO_H

#include <stddef.h>

#define TOPO_MAX_NODES 8
#define TOPO_PREFIX "hcns"
#define TOPO_SUBNET "10.213.0"

typedef struct topo {
    char prefix[24];
    unsigned n;
    char sw[40];                         /* the switch namespace */
    char node[TOPO_MAX_NODES][40];       /* node namespaces */
    char addr[TOPO_MAX_NODES][16];       /* node addresses */
    char port[TOPO_MAX_NODES][16];       /* the switch side of each node's veth */
    const char *exec[TOPO_MAX_NODES][5]; /* "ip netns exec NODE", a command prefix */
} topo_t;

/* Runs the command (NULL-terminated arguments; "ip" is looked up in the sbin directories too)
 * inside namespace ns, or here if ns is NULL. Its stdout and stderr go to out (when not NULL),
 * NUL-terminated. Bounded to 20 s. Returns the exit status, or -1. */
int topo_run(const char *ns, char *out, size_t cap, const char *arg0, ...)
    __attribute__((sentinel));

/* 1 if this process may create namespaces (root, `ip` present, a probe namespace works);
 * otherwise 0 and the reason in why. */
int topo_available(char *why, size_t cap);

/* Removes the namespaces of runs whose runner is gone (PREFIX<pid>-* with that pid dead). */
void topo_clean_stale(void);

/* Builds n nodes named after prefix (e.g. "hcns1234"), replacing any leftovers of the same
 * names. Returns 0, or -1 after printing the failed command and undoing what was built. */
int topo_create(topo_t *t, const char *prefix, unsigned n);

/* Removes t (as topo_destroy_prefix). */
void topo_destroy(const topo_t *t);

/* Kills whatever runs in the namespaces named prefix-*, then deletes them (their veths,
 * bridge, qdiscs and iptables rules go with them). */
void topo_destroy_prefix(const char *prefix);

#endif
