#include "impair.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Adds (-A) or deletes (-D) the rule that drops input of node k with that probability. */
static int drop_rule(const topo_t *t, unsigned k, const char *op, const char *probability)
{
    char out[1024];
    int rc = topo_run(t->node[k], out, sizeof(out), "iptables", "-w", "5", op, "INPUT", "-i",
                      "eth0", "-m", "statistic", "--mode", "random", "--probability", probability,
                      "-j", "DROP", NULL);

    if (rc != 0)
        fprintf(stderr, "netns: iptables %s in %s failed (status %d): %s\n", op, t->node[k], rc,
                out);
    return rc == 0 ? 0 : -1;
}

int impair_drop_input(const topo_t *t, unsigned k, const char *probability)
{
    return drop_rule(t, k, "-A", probability);
}

int impair_drop_from(const topo_t *t, unsigned k, unsigned src, const char *probability)
{
    char out[1024];
    int rc = topo_run(t->node[k], out, sizeof(out), "iptables", "-w", "5", "-A", "INPUT", "-i",
                      "eth0", "-s", t->addr[src], "-m", "statistic", "--mode", "random",
                      "--probability", probability, "-j", "DROP", NULL);

    if (rc != 0)
        fprintf(stderr, "netns: iptables -A (from %s) in %s failed (status %d): %s\n", t->addr[src],
                t->node[k], rc, out);
    return rc == 0 ? 0 : -1;
}

int impair_undrop_input(const topo_t *t, unsigned k, const char *probability)
{
    return drop_rule(t, k, "-D", probability);
}

int impair_block_tcp(const topo_t *t, unsigned k, const char *op, const char *keep)
{
    char out[1024];
    int rc = topo_run(t->node[k], out, sizeof(out), "iptables", "-w", "5", op, "INPUT", "-i",
                      "eth0", "-p", "tcp", "--syn", "!", "--dport", keep, "-j", "DROP", NULL);

    if (rc != 0)
        fprintf(stderr, "netns: iptables %s (TCP but port %s) in %s failed (status %d): %s\n", op,
                keep, t->node[k], rc, out);
    return rc == 0 ? 0 : -1;
}

int64_t impair_dropped(const topo_t *t, unsigned k)
{
    char out[4096];
    int64_t sum = -1;

    if (topo_run(t->node[k], out, sizeof(out), "iptables", "-w", "5", "-n", "-v", "-x", "-L",
                 "INPUT", NULL) != 0)
        return -1;
    /* Rule lines start with the packet and byte counters: "  123  4567 DROP ...". */
    for (char *save, *line = strtok_r(out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        long long pkts, bytes;
        char target[32];
        if (sscanf(line, " %lld %lld %31s", &pkts, &bytes, target) == 3 &&
            strcmp(target, "DROP") == 0)
            sum = (sum < 0 ? 0 : sum) + pkts;
    }
    return sum;
}

static int tbf_queue(const char *ns, const char *dev, const char *rate, const char *latency)
{
    char out[1024];
    int rc = topo_run(ns, out, sizeof(out), "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                      "rate", rate, "burst", "512kb", "latency", latency, NULL);

    if (rc != 0)
        fprintf(stderr, "netns: tc on %s in %s failed (status %d): %s\n", dev, ns, rc, out);
    return rc == 0 ? 0 : -1;
}

static int tbf(const char *ns, const char *dev, const char *rate)
{
    return tbf_queue(ns, dev, rate, "20ms");
}

int impair_queue(const topo_t *t, unsigned k, const char *rate, const char *latency)
{
    return tbf_queue(t->node[k], "eth0", rate, latency);
}

int impair_rate_limit(const topo_t *t, const char *rate)
{
    for (unsigned k = 0; k < t->n; k++)
        if (tbf(t->node[k], "eth0", rate) != 0 || tbf(t->sw, t->port[k], rate) != 0)
            return -1;
    return 0;
}

int64_t impair_qdisc_sent(const char *ns, const char *dev)
{
    char out[4096];
    const char *p;
    long long sent;

    if (topo_run(ns, out, sizeof(out), "tc", "-s", "qdisc", "show", "dev", dev, "root", NULL) !=
            0 ||
        strstr(out, "tbf") == NULL || (p = strstr(out, "Sent ")) == NULL ||
        sscanf(p, "Sent %lld bytes", &sent) != 1)
        return -1;
    return sent;
}

int64_t impair_tx_bytes(const topo_t *t, unsigned k)
{
    char out[256];

    if (topo_run(t->node[k], out, sizeof(out), "cat", "/sys/class/net/eth0/statistics/tx_bytes",
                 NULL) != 0)
        return -1;
    return strtoll(out, NULL, 10);
}
