/*
 * Scheduling between QoS classes on the data path: strict priority between classes, and a
 * token bucket per class that caps what this daemon sends to peer daemons for it. The unit is
 * a level-1 round: a comm posts a round's sends only when qos_admit() says so, which it does
 * not while a comm of a class of higher priority has an op under way. A round may take the bucket
 * below zero (it is never split), so the rate holds on average, and a class waits at most one
 * round of a lower class already on the wire.
 */
#ifndef HCCLD_SCHED_QOS_SCHED_H
#define HCCLD_SCHED_QOS_SCHED_H

#include <stdint.h>

#define QOS_SCHED_CLASSES 8
/* Tokens a class may save while idle: bursts beyond this wait. */
#define QOS_BURST_NS 10000000ull

typedef struct qos_bucket {
    uint32_t priority;   /* 0 first */
    uint64_t rate_Bps;   /* bytes per second; 0: no cap */
    double tokens;       /* bytes; may go negative */
    uint64_t last_ns;    /* last refill */
    uint32_t active;     /* comms of the class with an op under way, counted each pass */
    uint64_t sent_bytes; /* admitted so far */
    uint32_t waiting;    /* comms held back in the last pass (its queue depth) */
    uint32_t waiting_now;
    uint64_t win_start_ns, win_bytes; /* the current one-second window of admitted bytes */
    uint64_t recent_Bps;              /* bytes per second admitted over the last full window */
    int dscp;                         /* marks the class's connections; -1: leave unmarked */
    uint64_t hold_ns;      /* the class stays active this long after its last op (its latency
                            * target): its next op, a client wake-up away, finds the wire free */
    uint64_t last_busy_ns; /* when a comm of the class last had an op under way */
} qos_bucket_t;

typedef struct qos_sched {
    qos_bucket_t cls[QOS_SCHED_CLASSES];
    int ncls;
} qos_sched_t;

/* Sets (or changes, keeping the tokens) class i's priority, cap in bits per second and DSCP. */
void qos_sched_set(qos_sched_t *q, int i, uint32_t priority, uint64_t max_bw_bps, int dscp,
                   uint64_t now);
/* Sets how long class i stays active after its last op (0: not at all). */
void qos_sched_set_hold(qos_sched_t *q, int i, uint64_t hold_ns);
/* Starts a pass: no class is active until qos_active() says so, except one whose last op
 * ended less than its hold ago. */
void qos_sched_pass(qos_sched_t *q, uint64_t now);
/* What class i sent lately (bytes/s over the last second, 0 after two idle ones). */
uint64_t qos_recent_rate(const qos_bucket_t *b, uint64_t now);
/* A comm of class i has an op under way. */
void qos_active(qos_sched_t *q, int i, uint64_t now);
/* Class i has a round of `bytes` to send now: 1 and the tokens taken, or 0 (a class of higher
 * priority is active, or this one is over its cap). */
int qos_admit(qos_sched_t *q, int i, uint64_t bytes, uint64_t now);

#endif
