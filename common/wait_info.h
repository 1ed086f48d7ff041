/*
 * A daemon (node) that a collective on the wire across daemons waits on: span reports it
 * (span_stats_t), the engine passes it up (engine_comm_stats_t), and the daemon's status and
 * op_stalled events name it (by the node's advertised address, which the comm keeps).
 */
#ifndef HCCLD_COMMON_WAIT_INFO_H
#define HCCLD_COMMON_WAIT_INFO_H

#include <stdint.h>

#define WAIT_INFO_MAX 4   /* nodes a stalled collective names */
#define WAIT_INFO_RANKS 8 /* ranks it names of each */

typedef struct wait_info {
    uint32_t node;
    uint32_t nranks; /* ranks it holds; the first WAIT_INFO_RANKS in ranks */
    uint32_t ranks[WAIT_INFO_RANKS];
    int unstarted; /* its operation check has not come: it has not started this op */
} wait_info_t;

#endif
