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
 *
 * With op retry at L1, a lane whose connection fails is not a partner gone: the comm's keeper
 * connects it again and each side sends again what the other lacks (lane_keeper.c); the op
 * waits for that, and falls back only when the lane stays down.
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

/* Messages a lane keeps after sending them: a partner that lost them to a reset gets them
 * again. A rank commits message k + 1 only once its partner took k - 1 (each op sends one
 * message each way on a lane, and a partner sends its message of an op only after it took ours
 * of the op before), plus one more for a fall back or an abort in the middle of an op. */
#define HC_LANE_KEPT 3

/* A message's header: what both sides of a step must agree on. */
typedef struct lane_hdr {
    uint64_t seq;
    uint64_t count;
    uint8_t kind, dtype, redop, flags, pad[4];
} lane_hdr_t;

/* A header's flags: the sender runs this collective through the daemon, falls back to the
 * daemon with it, or gave up on it (count holds its status); it closes the comm (its last
 * message), or heard its partner's goodbye (hc_lanes_bye). */
enum {
    LANE_F_DAEMON = 1,
    LANE_F_FALLBACK = 2,
    LANE_F_ABORT = 4,
    LANE_F_BYE = 8,
    LANE_F_BYE_ACK = 16
};

typedef struct lane_kept {
    uint8_t *buf; /* header and data */
    size_t len, cap;
} lane_kept_t;

/* The connection to one partner. The op's thread sends and receives with trylock (it never
 * waits for the keeper); the keeper holds rx_mu, then tx_mu, while it puts a new connection in
 * place (lane_keeper.c). */
typedef struct hc_lane {
    int fd;        /* -1: no partner here; a repair dup3()s the new connection onto it */
    uint32_t peer; /* its rank */
    char addr[64]; /* where it listens (we connect to partners above us) */
    pthread_mutex_t tx_mu, rx_mu;
    uint32_t gen;      /* connections after the first (both locks; read atomically) */
    int dead;          /* no repair comes: the partner is gone or the hold ran out (atomic) */
    int bye;           /* the partner closed the comm (its goodbye taken): no op takes the lane,
                        * but repairs go on until it has our answer (atomic) */
    uint32_t hurt_gen; /* 1 + the gen the op's thread saw fail (atomic; 0: none) */
    uint64_t down_ns;  /* keeper: when it found this connection failed (0: it works) */
    uint64_t next_try_ns, backoff_ns; /* keeper: when to connect again, and the pause after */
    /* tx_mu */
    uint64_t tx_n;  /* messages committed */
    uint64_t cur_n; /* the next byte to send: message cur_n at cur_off */
    size_t cur_off;
    lane_kept_t kept[HC_LANE_KEPT]; /* message n is kept[n % HC_LANE_KEPT] */
    /* rx_mu */
    uint64_t rx_n; /* messages received whole */
    size_t rx_got; /* bytes of message rx_n so far */
} hc_lane_t;

struct hc_lanes {
    pthread_mutex_t lock; /* one lane op of the comm at a time */
    lane_plan_t plan;
    uint64_t max; /* the comm's direct_max */
    /* [0]: to plan.fold; [1 + l]: to the doubling partner of level l; fd -1: none */
    hc_lane_t lane[HC_LANE_LEVELS_MAX + 1];
    uint8_t *rx;       /* a message's header and data */
    uint8_t *acc;      /* the op's running result: the user's buffers stay as they
                        * were until it succeeds, for a fall back */
    uint64_t seq;      /* collectives of the comm so far, either path */
    int state;         /* HC_LANES_ON, _OFF (retired: the daemon path) or _BROKEN */
    HcclResult broken; /* _BROKEN: the status every later collective fails with */
    int announced;     /* this daemon-path collective's header went to the partners */
    /* Repairs (lane_keeper.c), with op retry at L1 (hold_ms > 0) */
    uint32_t hold_ms;
    int lfd;         /* this rank's listener, for partners below that connect again */
    uint8_t key[32]; /* the comm's lane key (AUTH_DERIVED_BYTES) */
    int wake_fd;     /* eventfd: the keeper looks again */
    int stop;        /* atomic */
    pthread_t keeper;
    int keeper_on;
    pthread_mutex_t mu; /* with cond: the op's thread waits for a repair */
    pthread_cond_t cond;
    struct shm_lane_slot *slot; /* where its lane ops are counted for the daemon, or NULL */
};

#define LANE_FOLD(ln) (&(ln)->lane[0])
#define LANE_LEVEL(ln, l) (&(ln)->lane[1 + (l)])

enum { HC_LANES_ON, HC_LANES_OFF, HC_LANES_BROKEN };

/* lane_conn.c */
/* HCCLD_DIRECT_MAX, the largest op in bytes this rank would run over lanes (0: none). */
uint64_t hc_lanes_wanted(void);
/* Connects the comm's lanes from its init answer (fds: the listener and the sockets to connect
 * with, all taken). HCCL_E_TCP_CONNECT (or HCCL_E_TIMEOUT, HCCL_E_MEMORY) when they cannot be
 * set up within HCCL_CONNECT_TIMEOUT. */
HcclResult hc_lanes_open(hc_comm_t *comm, const Hccld__CommInitResp *r, int *fds, int nfds);
void hc_lanes_close(hc_comm_t *comm);

/* lane_conn.c: the handshake of a lane, at setup and when it connects again. Both sides say
 * how many messages they took from the other (rx_n; 0 at setup); *peer_rx_p: the partner's. */
int lane_connect(hc_lanes_t *ln, int fd, uint32_t to, const char *addr, uint64_t rx_n,
                 uint64_t *peer_rx_p, uint64_t deadline);
/* Accepts a connection and reads its hello: 0 with *fd_p and the lane it is for; -EAGAIN (a
 * stranger, closed), or -ETIMEDOUT. */
int lane_accept_hello(hc_lanes_t *ln, int lfd, uint64_t deadline, hc_lane_t **lane_p,
                      uint64_t *peer_rx_p, uint8_t *nonce, int *fd_p);
/* Finishes the handshake of an accepted connection: 0, or -errno (fd closed). */
int lane_accept_finish(hc_lanes_t *ln, int fd, const hc_lane_t *lane, const uint8_t *nonce,
                       uint64_t rx_n, uint64_t deadline);

/* lane_io.c: a lane's messages */
void lane_init(hc_lane_t *L);
void lane_fini(hc_lane_t *L);
/* Commits (hdr, data) as the lane's next message, kept for a repair; *n_p its number. 0, or
 * -ENOBUFS (the partner lacks more messages than are kept: a fall back). */
int lane_commit(hc_lane_t *L, const void *hdr, size_t hlen, const void *data, size_t len,
                uint64_t *n_p);
/* Sends what was committed, as far as the socket takes it, without waiting: 1 once message n is
 * all sent (UINT64_MAX: every one), 0 not yet, or -errno with *gen_p the connection that failed. */
int lane_pump(hc_lane_t *L, uint64_t n, uint32_t *gen_p);
/* The same with tx_mu held: 0 or -errno. */
int lane_pump_locked(hc_lane_t *L);
/* Whether committed bytes wait to go (the keeper sends them). */
int lane_pending(hc_lane_t *L);
/* Receives toward len bytes of the next message into buf: 1 whole (taken), 0 not yet (*got_p:
 * bytes so far; a repair starts the message again), -errno (-EPIPE: closed; *gen_p set), or
 * -EINPROGRESS: the keeper puts a new connection in place (wait for it as for a failure). */
int lane_recv_some(hc_lane_t *L, uint8_t *buf, size_t len, size_t *got_p, uint32_t *gen_p);
/* The next message's first len bytes if they are all there, not taken: 1, else 0. */
int lane_peek(hc_lane_t *L, void *buf, size_t len);
/* The op's thread met connection gen of L failed with err: 0 once a new one is in place (the
 * messages go on where the partner got to), or err when none will be (no op retry, the partner
 * died or left, the hold ran out), -ETIMEDOUT (deadline) or -ECANCELED (HcclCommAbort). */
int lane_wait_repair(hc_comm_t *comm, hc_lane_t *L, uint32_t gen, int err, uint64_t deadline);

/* lane_keeper.c: puts failed lanes back (op retry at L1) */
int lane_keeper_start(hc_comm_t *comm);
void lane_keeper_stop(hc_lanes_t *ln);
/* Tells the keeper to look again (a lane failed, bytes wait to go). */
void lane_keeper_wake(hc_lanes_t *ln);

/* lane_count.c: the lane ops a rank counts for its daemon's figures (shm_lane_slot_t) */
/* Takes a free slot of the client's segment for the comm (none left: its ops go uncounted). */
void lane_count_claim(hc_comm_t *comm);
/* One lane collective done, in took_ns. */
void lane_count_op(hc_lanes_t *ln, uint64_t took_ns);
/* Frees the slot (once the comm left its daemon, which read it then). */
void lane_count_release(hc_lanes_t *ln);

/* lane.c */
/* Collective op of a comm with lanes, before it runs: 1 when it ran over the lanes (or failed
 * at once), with its status in *rc_p; 0 when the caller runs it through the daemon and then
 * calls hc_lanes_after with its status. Holds the lanes in between. */
int hc_lanes_before(hc_comm_t *comm, const hc_op_t *op, HcclResult *rc_p);
void hc_lanes_after(hc_comm_t *comm, const hc_op_t *op, HcclResult rc);
/* Every later collective fails with status; the partners hear it (at init: the comm broke
 * before this rank's lanes were up). */
void hc_lanes_retire(hc_comm_t *comm, HcclResult status);
/* Before HcclCommDestroy leaves the comm, with op retry at L1: says goodbye on every lane and
 * waits (at most the hold) until each partner answered or said goodbye too, its lane ended, or
 * the partner is gone. A partner may still lack our last op's message, lost to a reset just
 * before: the keeper sends it again meanwhile, which it could not once we had left. */
void hc_lanes_bye(hc_comm_t *comm);

#endif
