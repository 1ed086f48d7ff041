/*
 * Lanes: a comm that spans daemons runs its small allreduces, allgathers and barriers between
 * its ranks directly, over TCP connections its daemons set up, instead of through the daemons (the
 * daemon path costs two hand-offs per node on each op: rank to daemon and back). The algorithm is
 * recursive doubling over the largest power of two of ranks, the others folded in first and
 * served last (as MPICH's allreduce for short messages): log2(n) + 2 steps, each with one peer.
 * In every step both partners combine (lower rank's data) op (higher rank's data), so all ranks
 * end with the same bits. An allgather takes the same steps on its whole result (each rank's
 * block in place, the rest zero), OR-ing: no two partners of a step hold the same block.
 *
 * The daemons own the links: a rank's daemon makes its listening socket and the unconnected
 * sockets it connects with (on the data interface, in the daemon's network namespace), and tells
 * every rank where the others listen; ranks prove the comm's lane key to each other (auth.h).
 * Each rank connects to the partners above it and accepts those below, so setup cannot deadlock.
 *
 * Messages are a header (the comm's collective count, op, dtype, count) and the data. Which ops
 * take lanes is decided from what every rank knows alike (kind, count, dtype and the comm's
 * direct_max, the smallest of its ranks' HCCLD_DIRECT_MAX). Ranks that disagree (another op or
 * count: a user's error) must still get the daemon path's answer, HCCL_E_PARA on every rank:
 *  - a collective that goes through the daemon first sends a header saying so to every partner,
 *    and reads theirs once it completed;
 *  - a rank whose lane op meets a header unlike its own, a partner's "fall back", or a partner
 *    that is gone (closed or reset lane) sends "fall back" to every partner and runs the op
 *    through the daemon. Every other rank of the op meets a "fall back" or a daemon header before
 *    it can finish, so all of them end up at the daemon, which matches the op as it matches any
 *    (mismatch: HCCL_E_PARA; a dead rank: HCCL_E_REMOTE).
 * After a fall back the lanes are retired: later ops go through the daemon, or fail with the
 * fallen-back op's status if it failed. A lane op that times out (HCCL_EXEC_TIMEOUT) or meets
 * HcclCommAbort tells its partners (abort header) and fails with HCCL_E_TIMEOUT or
 * HCCL_E_SUSPENDING.
 */
#ifndef HCCLD_LIBCLIENT_LANE_H
#define HCCLD_LIBCLIENT_LANE_H

#include <pthread.h>
#include <stdint.h>

#include "client.h"
#include "lane_plan.h"

#define HC_DIRECT_MAX_DEFAULT 65536
#define HC_DIRECT_MAX_LIMIT (1u << 20)
#define HC_LANE_LEVELS_MAX LANE_LEVELS_MAX

struct hc_lanes {
    pthread_mutex_t lock; /* one lane op of the comm at a time */
    lane_plan_t plan;
    uint64_t max;               /* the comm's direct_max */
    int fold_fd;                /* to plan.fold, or -1 */
    int fd[HC_LANE_LEVELS_MAX]; /* to the doubling partner of each level, -1: none */
    uint8_t *rx;                /* a message's header and data */
    uint8_t *acc;               /* the op's running result: the user's buffers stay as they
                                 * were until it succeeds, for a fall back */
    uint64_t seq;               /* collectives of the comm so far, either path */
    int state;                  /* HC_LANES_ON, _OFF (retired: the daemon path) or _BROKEN */
    HcclResult broken;          /* _BROKEN: the status every later collective fails with */
    int announced;              /* this daemon-path collective's header went to the partners */
};

enum { HC_LANES_ON, HC_LANES_OFF, HC_LANES_BROKEN };

/* lane_conn.c */
/* HCCLD_DIRECT_MAX, the largest op in bytes this rank would run over lanes (0: none). */
uint64_t hc_lanes_wanted(void);
/* Connects the comm's lanes from its init answer (fds: the listener and the sockets to connect
 * with, all taken). HCCL_E_TCP_CONNECT (or HCCL_E_TIMEOUT, HCCL_E_MEMORY) when they cannot be
 * set up within HCCL_CONNECT_TIMEOUT. */
HcclResult hc_lanes_open(hc_comm_t *comm, const Hccld__CommInitResp *r, int *fds, int nfds);
void hc_lanes_close(hc_comm_t *comm);

/* lane.c */
/* Collective op of a comm with lanes, before it runs: 1 when it ran over the lanes (or failed
 * at once), with its status in *rc_p; 0 when the caller runs it through the daemon and then
 * calls hc_lanes_after with its status. Holds the lanes in between. */
int hc_lanes_before(hc_comm_t *comm, const hc_op_t *op, HcclResult *rc_p);
void hc_lanes_after(hc_comm_t *comm, const hc_op_t *op, HcclResult rc);
/* Every later collective fails with status; the partners hear it (at init: the comm broke
 * before this rank's lanes were up). */
void hc_lanes_retire(hc_comm_t *comm, HcclResult status);

#endif
