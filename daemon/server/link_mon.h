/*
 * The link monitor: every HCCLD_LINK_CHECK_MS (default 1000; 0: off) it reads the health of
 * every data connection to a peer daemon (engine_links, link_info.h), turns the counters into
 * rates, adds them up per peer daemon (with the connections closed since the daemon started,
 * so that counters never go back), and warns when a connection's retransmissions or round
 * trip jump. hccld-ctl links and /metrics show what it last sampled (status.c).
 */
#ifndef HCCLD_SERVER_LINK_MON_H
#define HCCLD_SERVER_LINK_MON_H

#include "hccld.pb-c.h"

typedef struct server server_t;
typedef struct link_mon link_mon_t;

/* Warns when, within one sampling interval, at least this many segments of a connection were
 * retransmitted and they were at least LINK_WARN_RETRANS_PCT of those it sent. */
#define LINK_WARN_RETRANS_MIN 3
#define LINK_WARN_RETRANS_PCT 1.0
/* ... or its round trip is LINK_WARN_RTT_FACTOR times its usual one and LINK_WARN_RTT_US
 * above it (the usual: the lower envelope of what it had, rising slowly). A busy link's own
 * queues add milliseconds on a loaded host (measured: 0.3 -> 3.8 ms on a veth of this 2-core
 * machine), so only tens of milliseconds count as a jump. */
#define LINK_WARN_RTT_FACTOR 4
#define LINK_WARN_RTT_US 20000
/* A connection is healthy again after this long without a finding; while unhealthy it is
 * warned about again at most every LINK_WARN_REPEAT_MS. */
#define LINK_HEALTHY_AFTER_MS 10000
#define LINK_WARN_REPEAT_MS 60000

/* Starts sampling on srv's loop; NULL when off (HCCLD_LINK_CHECK_MS=0) or out of memory
 * (logged). An invalid HCCLD_LINK_CHECK_MS is -EINVAL through *err_p. */
link_mon_t *link_mon_start(server_t *srv, int *err_p);
void link_mon_stop(link_mon_t *m);
/* Data address `data` (TCP or RDMA) is the daemon advertised as `name`: its peer events say
 * `name`. */
void link_mon_name(link_mon_t *m, const char *data, const char *name);
/* Takes a sample now (the timer does this by itself). */
void link_mon_sample(link_mon_t *m);
/* Looks at the connections for failed and closed ones only, at the loop's next turn (however
 * many comms broke meanwhile: one walk), so that their peer_lost goes out at once instead of at
 * the next sample; rates and warnings wait for the sample. NULL: nothing. */
void link_mon_check_failed(link_mon_t *m);
/* Points r's data_links and peer_links at the last sample (valid until the next one, which only
 * this loop takes). */
void link_mon_status(link_mon_t *m, Hccld__StatusResp *r);

#endif
