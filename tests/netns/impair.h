/*
 * Impairments of a test network (topo.h) and the counters that show they acted: random loss
 * of incoming packets with iptables' statistic match, a rate limit with tc's token bucket.
 * They live inside the namespaces and go away with them.
 */
#ifndef HCCLD_TESTS_NETNS_IMPAIR_H
#define HCCLD_TESTS_NETNS_IMPAIR_H

#include <stdint.h>

#include "topo.h"

/* Drops each packet that node k receives on eth0 with the given probability ("0.01"). */
int impair_drop_input(const topo_t *t, unsigned k, const char *probability);
/* Drops each packet that node k receives on eth0 from node src's address with the given
 * probability: only the traffic between those two nodes suffers. */
int impair_drop_from(const topo_t *t, unsigned k, unsigned src, const char *probability);
/* Removes that rule again. */
int impair_undrop_input(const topo_t *t, unsigned k, const char *probability);
/* Packets dropped so far by impair_drop_input's rule on node k; -1 if unknown. */
int64_t impair_dropped(const topo_t *t, unsigned k);

/* Drops (op "-A") every new TCP connection to node k on eth0 but those to port keep (the
 * daemons' control port), or stops that (op "-D"). */
int impair_block_tcp(const topo_t *t, unsigned k, const char *op, const char *keep);

/* A token bucket of the given rate ("1gbit") on both ends of every node's veth. */
int impair_rate_limit(const topo_t *t, const char *rate);
/* A token bucket of rate on node k's eth0 whose queue holds up to latency ("300ms"): a link
 * that gets slow and deep, as a congested switch port does. */
int impair_queue(const topo_t *t, unsigned k, const char *rate, const char *latency);
/* Bytes that the root qdisc of dev in namespace ns has sent; -1 if unknown. */
int64_t impair_qdisc_sent(const char *ns, const char *dev);

/* Bytes that eth0 of node k has sent (its kernel counter); -1 if unknown. */
int64_t impair_tx_bytes(const topo_t *t, unsigned k);

#endif
