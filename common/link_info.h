/*
 * The health of a data connection between daemons, as the transport reports it
 * (transport.h, link_info) and the daemon's link monitor shows it (hccld-ctl links, /metrics).
 * Counters run from the connection's start; several sockets or queue pairs of one connection
 * (striping) add up.
 */
#ifndef HCCLD_COMMON_LINK_INFO_H
#define HCCLD_COMMON_LINK_INFO_H

#include <stdint.h>

typedef struct link_info {
    uint32_t nlinks;             /* sockets or queue pairs */
    uint64_t tx_bytes, rx_bytes; /* TCP: acknowledged by the peer / received (the kernel's
                                  * count, TCP_INFO); RDMA: sent / received by our requests */
    uint64_t segs_out;           /* TCP: segments sent */
    uint64_t retrans;            /* TCP: segments retransmitted */
    uint64_t spurious;           /* TCP: of those, the ones the peer had already (it said so
                                  * with a D-SACK): a timer that fired early, not a loss */
    uint32_t rtt_us, rttvar_us;  /* TCP: smoothed round trip and its variation (the largest of
                                  * its sockets) */
    /* RDMA: a queue pair not in RTS; the port's error counters (symbol_error, port_rcv_errors,
     * port_xmit_discards, link_downed) and the counters that count retransmission where the
     * driver has them (local_ack_timeout_err, packet_seq_err, out_of_sequence, rcvd_seq_err):
     * port-wide, not the queue pair's own. */
    int qp_state_bad;
    uint64_t port_errors, port_retries;
    int failed; /* the connection failed with an error (any of its sockets or QPs) */
    /* Op retry (transport.h, tp_retry_t): sockets suspended now, waiting to come back; times
     * they came back; and time spent suspended, the current suspensions included. */
    uint32_t suspended;
    uint32_t resumes;
    uint64_t suspended_ns;
} link_info_t;

#define LINK_PEER_MAX 64 /* "ip:port", IPv6 in brackets */
#define LINK_DESC_MAX 32 /* "tcp", "rdma/rxe0:1 x4" */

/* One data connection as the monitor sees it (shared ones once). */
typedef struct link_view {
    uint64_t serial;          /* the connection's, never reused while the daemon runs */
    uint32_t comm_id;         /* the comm that opened it */
    uint32_t users;           /* comms that use it (a split's children share their parent's) */
    char peer[LINK_PEER_MAX]; /* the peer daemon's data address */
    char desc[LINK_DESC_MAX];
    int closed; /* it closed since the last walk: its last figures (reported once) */
    link_info_t info;
} link_view_t;

typedef void (*link_view_fn)(void *ctx, const link_view_t *v);

#endif
