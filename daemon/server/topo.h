/*
 * The node's topology through hwloc: packages, NUMA nodes, cores, NICs and RDMA devices with
 * their locality, for hccld-ctl topology; and the cores near the NIC the daemon uses, where it
 * pins its threads (when hwloc knows that NIC's locality: not for virtual NICs).
 */
#ifndef HCCLD_SERVER_TOPO_H
#define HCCLD_SERVER_TOPO_H

#include "hccld.pb-c.h"

typedef struct topo topo_t;

/* Loads the topology; NULL (logged) if hwloc fails. */
topo_t *topo_load(void);
void topo_free(topo_t *t);
/* Pins the calling process's threads to the cores near the interface that holds ip (IPv4
 * text); 0 pinned, 1 nothing to do (unknown locality), <0 failed. The cpuset goes to out. */
int topo_pin_near(topo_t *t, const char *ip, char *nic_out, size_t nic_cap, char *out, size_t cap);
/* This host as the level-1 cost model tells hosts apart: 48 bits of a digest of the kernel's
 * boot id (the same in every network namespace of one machine, never 0) << 16 | the cores
 * the daemon may run on (after topo_pin_near). t may be NULL. */
uint64_t topo_host_id(topo_t *t);
/* Fills r (strings point into t, or into allocations freed with topo_resp_free). */
int topo_describe(topo_t *t, Hccld__TopologyResp *r);
void topo_resp_free(Hccld__TopologyResp *r);

#endif
