/* libhccl internals: the process's connection to its daemon, communicators and operations. */
#ifndef HCCLD_LIBCLIENT_CLIENT_H
#define HCCLD_LIBCLIENT_CLIENT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "desc_check.h"
#include "hccl/hccl.h"
#include "retry_conf.h"
#include "ring.h"
#include "uds.h"

#define HC_COMM_MAGIC 0x68636f6du   /* "hcom" */
#define HC_COMM_ABORTED 0x68636162u /* "hcab": what an aborted comm leaves */
#define HC_PIPELINE 4               /* staged chunks in flight per operation */

typedef struct hc_comm hc_comm_t;

typedef struct hc_slot {
    uint32_t gen;
    int busy;
    int posted; /* pushed to the daemon (under sq_lock): d is what a restarted one gets again */
    int done;
    int abandoned;    /* its waiter gave up (timeout, abort); free it when the completion comes */
    const int *abort; /* the comm's HcclCommAbort flag: its waiter stops waiting */
    cqe_t cqe;        /* the completion, once done */
    desc_t d;         /* as posted */
    hc_comm_t *comm;  /* whose piece it is */
    uint64_t post_no; /* the order of posting */
    uint32_t reposts; /* posted again to a restarted daemon (the profile's retries) */
} hc_slot_t;

typedef struct hc_blk {
    uint64_t off, len;
    int used;
} hc_blk_t;

typedef struct hc_arena {
    pthread_mutex_t lock;
    hc_blk_t *v;
    uint32_t n, cap;
} hc_arena_t;

typedef struct hc_client {
    pid_t pid;
    /* control socket: requests are sent under ctl_lock; one thread at a time reads and
     * parks answers meant for others */
    pthread_mutex_t ctl_lock;
    pthread_cond_t ctl_cv;
    uds_conn_t conn;
    uint64_t next_req;
    int reader_active;
    Hccld__Msg *parked[16];
    int parked_fds[16][UDS_MAX_FDS]; /* descriptors that came with each parked answer */
    int parked_nfds[16];
    /* data path */
    uint8_t *seg;
    shm_layout_t l;
    shm_hdr_t *hdr;
    uint8_t *arena;
    ring_t sq, cq;
    pthread_mutex_t sq_lock;
    pthread_mutex_t cq_lock;
    hc_slot_t *slots;
    uint32_t nslots;
    int doorbell;
    hc_arena_t alloc;
    int dead; /* through hc_client_dead() and hc_client_set_dead() only (atomic) */
    uint64_t spin_ns;
    uint64_t stream_min; /* HCCLD_STREAM_MIN: node-wide output bytes that bypass the cache */
    int spin_score;      /* adaptive spinning (submit.c); atomic */
    uint64_t exec_timeout_ns;
    char advertised[64]; /* "IP:PORT" peer daemons reach our daemon at; empty: not listening */
    pthread_mutex_t reg_lock;
    struct hc_reg *regs; /* registered buffers (reg.h), newest first */
    unsigned holds;      /* callers and comms using it (conn.c's lock) */
    /* A daemon that restarts (rejoin.c). The segment and arena memfds stay open to hand them to
     * the next daemon; a keeper thread watches the connection once a comm waits for restarts
     * (restart_hold_ms > 0) and registers everything again. While it does, `away` is set:
     * waits go on, requests wait for it (ctl_cv). */
    char socket_path[108];
    int seg_fd, arena_fd;
    uint64_t post_no; /* descriptors posted so far (sq_lock) */
    pthread_mutex_t comms_lock;
    hc_comm_t *comms;         /* every live comm of the process */
    uint32_t restart_hold_ms; /* the longest hold of its comms (comms_lock) */
    int away;                 /* atomic */
    int keeper_on, keeper_stop;
    pthread_t keeper;
} hc_client_t;

typedef struct hc_reg hc_reg_t;

typedef struct hc_coop hc_coop_t;
typedef struct hc_lanes hc_lanes_t;

/* A comm's settings from its HcclCommConfig (comm_cfg.c); a split's child inherits them. */
typedef struct hc_comm_cfg {
    char name[COMM_NAME_MAX_LENGTH];      /* "": hcclD names the comm (HcclGetCommName) */
    char algo[HCCL_COMM_ALGO_MAX_LENGTH]; /* hcclAlgo; "": the HCCL_ALGO variable */
    int deterministic;                    /* 0, 1, or -1: HCCL_DETERMINISTIC */
    uint32_t buff_mb;                     /* 0: HCCL_BUFFSIZE */
    uint64_t exec_timeout_ns;             /* hcclExecTimeOut; 0: HCCL_EXEC_TIMEOUT */
    char retry_enable[HCCL_COMM_RETRY_ENABLE_MAX_LENGTH]; /* hcclRetryEnable; "": not set */
    char retry_params[HCCL_COMM_RETRY_PARAMS_MAX_LENGTH]; /* hcclRetryParams; "": not set */
    int qos_set;                                          /* hcclQos given: qos_level 0..7 */
    uint32_t qos_level;
} hc_comm_cfg_t;

/* What a comm init or split request says of the level-1 algorithms. */
typedef struct hc_algo_req {
    const char *algo, *algorithm; /* HCCL_ALGO (or hcclAlgo), HCCL_ALGORITHM; "" none */
    int by_config;                /* algo is hcclAlgo */
    int deterministic;
} hc_algo_req_t;

struct hc_comm {
    uint32_t magic;
    hc_client_t *c;
    uint32_t id;
    uint32_t nranks;
    uint32_t rank;
    uint64_t chunk_bytes;
    uint64_t coll_seq;
    HcclResult async_err;
    hc_coop_t *coop;    /* cooperative level 0, or NULL: everything through the daemon */
    hc_lanes_t *lanes;  /* small ops straight between the ranks (lane.h), or NULL */
    uint32_t nnodes;    /* daemons the comm spans */
    uint64_t split_seq; /* HcclCommSplit calls so far (they pair up across ranks) */
    int has_job;        /* job_id/job_key known: comms across daemons derive children from them */
    uint8_t job_id[16];
    uint8_t job_key[16];
    char qos_class[32];  /* as the daemon (or the root daemon) decided */
    uint64_t prof_colls; /* collectives profiled so far: their sequence in the records */
    int aborted;         /* HcclCommAbort began (atomic) */
    int culprit_logged;  /* the rank at fault was named in the log */
    int short_logged;    /* a call ran fewer pieces at once for want of arena (coll.c) */
    int users;           /* calls running or queued on streams (atomic) */
    uint64_t health_ns;  /* now_ns() of the last ask whether the comm broke (health.c; atomic) */
    hc_comm_cfg_t cfg;   /* its settings; cfg.name is its name */
    /* A daemon restart (rejoin.c): how long this rank waits for it (0: not at all), the token
     * that registers the comm again, and how far its pieces got: collective pieces posted,
     * and per peer the send and receive pieces numbered and posted (sq_lock). */
    uint32_t restart_hold_ms;
    uint32_t lane_hold_ms; /* op retry at L1: a failed lane has this long to connect again */
    int has_token;
    uint8_t resume_token[32];
    int rejoin_failed; /* the next daemon did not take it: its ops fail (atomic) */
    /* Across daemons: the daemon's record of its part (CommInitResp.span_record), or NULL */
    uint8_t *span_record;
    size_t span_record_len;
    uint64_t coll_posted;
    uint64_t *p2p_seq;    /* [2 * nranks]: sends to, receives from each peer, numbered */
    uint64_t *p2p_posted; /* [2 * nranks]: the same, posted */
    hc_comm_t *next_live; /* the client's list (comms_lock) */
};

/* One collective or point-to-point transfer as the user described it. */
typedef struct hc_op {
    uint8_t kind;
    uint8_t dtype;
    uint8_t redop;
    uint8_t own_algo; /* 1 + the op's own level-1 algorithm (enum algo_id); 0: the comm's */
    uint32_t root;    /* root, or peer for send/recv */
    uint64_t count;   /* elements per block */
    const uint8_t *send;
    uint64_t send_stride; /* bytes between the user's send blocks */
    uint8_t *recv;
    uint64_t recv_stride;
} hc_op_t;

/* conn.c */
/* The process's connection to its daemon, opened on first use, with a hold the caller gives back
 * with hc_client_put (a comm keeps one for its life). A connection whose daemon is gone is
 * replaced by a new one once nothing holds it and its arena is empty (the daemon restarted).
 * NULL and *err_p when the daemon is away. */
hc_client_t *hc_client_get(HcclResult *err_p);
/* The same; a first connection gets an arena of mb MB (0: HCCL_BUFFSIZE's). */
hc_client_t *hc_client_get_mb(uint64_t mb, HcclResult *err_p);
void hc_client_hold(hc_client_t *c);
void hc_client_put(hc_client_t *c);
/* Cooperative ops whose outputs, all ranks together, reach this many bytes write them with
 * streaming stores (coop.c): half the last-level cache of the machines measured. */
#define HC_STREAM_MIN_DEFAULT (16ull << 20)
#define HC_BUFFSIZE_DEFAULT_MB 200
#define HC_BUFFSIZE_MAX_MB 16384
/* Sends req and waits for the answer with the same id; HCCL_E_TIMEOUT or HCCL_E_UNAVAIL. */
HcclResult hc_ctl_call(hc_client_t *c, Hccld__Msg *req, Hccld__Msg **resp_p, int timeout_ms);
int hc_daemon_gone(hc_client_t *c);
/* Whether the daemon is known to be gone (or to have broken the protocol). Any thread may find
 * out first (a waiter, a request, the completion ring), so the flag is atomic; it publishes
 * nothing else, hence relaxed. */
static inline int hc_client_dead(hc_client_t *c)
{
    return __atomic_load_n(&c->dead, __ATOMIC_RELAXED);
}
/* Marks it; returns whether it was marked already, so that only the first finder logs. */
static inline int hc_client_set_dead(hc_client_t *c)
{
    return __atomic_exchange_n(&c->dead, 1, __ATOMIC_RELAXED);
}
/* hc_ctl_call that also hands over the descriptors that came with this answer (up to
 * UDS_MAX_FDS into fds, their count in *nfds_p), whichever thread read it: concurrent comm
 * inits in one process each get their own. hc_ctl_call closes any that come. */
HcclResult hc_ctl_call_fds(hc_client_t *c, Hccld__Msg *req, Hccld__Msg **resp_p, int timeout_ms,
                           int *fds, int *nfds_p);
uint64_t hc_env_connect_timeout_s(void);
/* The two halves of a call, for requests whose answers come in any order (rejoin.c): sends
 * req with fds (0 or -EPIPE; *id_p its id), and waits for the answer with that id. */
int hc_ctl_send(hc_client_t *c, Hccld__Msg *req, const int *fds, int nfds, uint64_t *id_p);
HcclResult hc_ctl_wait(hc_client_t *c, uint64_t id, uint64_t deadline, Hccld__Msg **resp_p,
                       int *fds, int *nfds_p);

/* rejoin.c */
/* Whether the daemon went away and the keeper is bringing it back (waits go on meanwhile). */
static inline int hc_client_away(hc_client_t *c)
{
    return __atomic_load_n(&c->away, __ATOMIC_ACQUIRE);
}
/* A comm is live (after its init answer): tracked for a restart, the keeper started when it
 * waits for one. Untrack before freeing it. */
void hc_comm_track(hc_comm_t *comm);
void hc_comm_untrack(hc_comm_t *comm);
/* The hold of a comm whose retry settings are rr: HoldTime + (MaxCnt - 1) * IntervalTime ms
 * with op retry on at L0 or L1, else 0. */
uint32_t hc_restart_hold_ms(const retry_conf_t *rr);
/* Stops the keeper (the client is freed). */
void hc_keeper_stop(hc_client_t *c);
/* Waits while the daemon is away: 0 once it is back, -EPIPE when it is gone for good. */
int hc_wait_back(hc_client_t *c);
/* Drains the completion ring into the slots; the caller holds cq_lock (submit.c). */
void hc_drain_locked(hc_client_t *c);

/* arena.c */
int hc_arena_init(hc_arena_t *a, uint64_t bytes);
/* Offset of a new block of len bytes (page aligned), or UINT64_MAX. */
uint64_t hc_arena_alloc(hc_arena_t *a, uint64_t len);
int hc_arena_free(hc_arena_t *a, uint64_t off);
/* Whether [p, p+len) lies inside the arena; then *off_p is its offset. */
int hc_in_arena(const hc_client_t *c, const void *p, uint64_t len, uint64_t *off_p);

/* submit.c */
int hc_slots_init(hc_client_t *c);
/* Posts d; abort (may be NULL) is a flag whose setting ends the wait for its completion. */
HcclResult hc_submit(hc_comm_t *comm, desc_t *d, uint32_t *slot_p);
/* Waits for the completion in slot, giving up at `deadline` (now_ns() clock): the pieces of
 * one operation share one HCCL_EXEC_TIMEOUT. hc_deadline(c): now plus HCCL_EXEC_TIMEOUT. For
 * HCCL_E_REMOTE, *culprit_p (if not NULL) gets 1 + the comm rank that died or left, or 0. */
HcclResult hc_wait_by(hc_client_t *c, uint32_t slot, uint64_t deadline, uint32_t *culprit_p);
uint64_t hc_deadline(const hc_client_t *c);
/* The comm's own: now plus its hcclExecTimeOut, or HCCL_EXEC_TIMEOUT when it has none. */
uint64_t hc_comm_deadline(const hc_comm_t *comm);
void hc_wake_waiters(hc_client_t *c);

/* coll.c */
/* Logs, once per comm, that the comm failed because rank culprit - 1 died or left (0: who is
 * not known, nothing logged). */
void hc_comm_log_culprit(hc_comm_t *comm, uint32_t culprit);
HcclResult hc_ops_run(hc_comm_t *comm, const hc_op_t *ops, unsigned nops);
HcclResult hc_alltoallv_run(hc_comm_t *comm, const uint8_t *send, const uint64_t *scounts,
                            const uint64_t *sdispls, uint8_t *recv, const uint64_t *rcounts,
                            const uint64_t *rdispls, uint8_t dtype);

/* Staging and pieces, shared by the daemon path and the coop path (coll.c). */
typedef struct op_plan {
    const hc_op_t *op;
    desc_side_t s, r;      /* blocks of this rank's descriptor */
    uint64_t s_off, r_off; /* arena offsets when zero-copy */
    int s_zc, r_zc;
    uint64_t piece; /* elements per block per descriptor */
    uint64_t npieces;
    uint64_t slot_bytes; /* staging bytes per piece */
    uint64_t stage_off;  /* nstage slots of slot_bytes */
    unsigned nstage;     /* pieces in flight at once, each in its own slot */
    uint64_t next;       /* next piece to post */
} op_plan_t;

uint64_t hc_kind_max_blocks(uint8_t kind, uint32_t n);
/* Plans op with nstage pieces in flight, each staged in its own slot, pieces 2^shrink times
 * smaller than the comm's chunk makes them; HCCL_E_MEMORY when the arena has no room for the
 * slots (the caller may try fewer or smaller). */
HcclResult hc_plan(hc_comm_t *comm, const hc_op_t *op, unsigned nstage, unsigned shrink,
                   op_plan_t *p);
void hc_plan_free(hc_comm_t *comm, op_plan_t *p);
int hc_piece_zc(hc_comm_t *comm, int op_zc, uint64_t op_off, const uint8_t *base, uint64_t stride,
                uint32_t nblocks, uint64_t es, uint64_t first, uint64_t n, uint64_t *off_p);
void hc_piece_prep(hc_comm_t *comm, op_plan_t *p, uint64_t piece, unsigned stage, desc_t *d,
                   int *r_staged_p);
void hc_piece_copy_out(hc_comm_t *comm, const op_plan_t *p, uint64_t piece, unsigned stage);

/* coop.c */
/* Maps the control block and the peers' arenas passed with the comm's init answer. */
HcclResult hc_coop_attach(hc_comm_t *comm, const Hccld__CommInitResp *r, int *fds, int nfds);
void hc_coop_detach(hc_comm_t *comm);
/* The control block's memfd (still open), or -1 without coop. */
int hc_coop_ctl_fd(const hc_comm_t *comm);
/* Fails every rank's waits on the comm's control block (HcclCommAbort); no-op without coop. */
void hc_coop_abort(hc_comm_t *comm);
HcclResult hc_coop_run(hc_comm_t *comm, const hc_op_t *op);
/* The comm's control block says a member died or aborted (not: left cleanly). */
int hc_coop_aborted(const hc_comm_t *comm);

/* comm.c */
HcclResult hc_comm_check(HcclComm comm, hc_comm_t **c_p);
/* health.c: waits until the daemon says the comm (c->id, c->rank) is connected to the other
 * daemons and measured; HCCL_E_TIMEOUT past deadline, or the comm's error. */
HcclResult hc_comm_wait_ready(hc_comm_t *c, uint64_t deadline);
/* Whether the comm broke (a member died or left, a peer daemon was lost): HCCL_SUCCESS, or what
 * its ops now fail with. Asks the daemon at most every 10 ms (HCCL_SUCCESS in between). */
HcclResult hc_comm_health(hc_comm_t *c);
void hc_comm_set_error(hc_comm_t *comm, HcclResult rc);
/* Joins rank `rank` of n to the job ri names (agreed: computed by the ranks, see agreed.c) and
 * returns the new communicator in *comm. parent_job: a split child's parent's job id, or NULL;
 * cfg: its settings (NULL: none; an empty name becomes "hccl-" and the job id). */
HcclResult hc_comm_init(hc_client_t *c, const Hccld__RootInfo *ri, uint32_t n, uint32_t rank,
                        int agreed, const uint8_t *parent_job, const hc_comm_cfg_t *cfg,
                        HcclComm *comm);

/* HcclCommInitRootInfo with settings (NULL: none). */
HcclResult hc_comm_init_root(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                             const hc_comm_cfg_t *cfg, HcclComm *comm);

/* comm_cfg.c */
/* Checks a user's HcclCommConfig and takes the fields its size covers into *out. */
HcclResult hc_comm_cfg_from(const HcclCommConfig *config, hc_comm_cfg_t *out);
/* The level-1 fields of a request for a comm with cfg, from cfg and the environment
 * (HCCL_ALGO, HCCL_ALGORITHM, HCCL_DETERMINISTIC); HCCL_E_PARA for a bad HCCL_DETERMINISTIC. */
HcclResult hc_algo_req(const hc_comm_cfg_t *cfg, hc_algo_req_t *r);
/* The op retry settings of a request for a comm with cfg (retry_conf_resolve: cfg's over
 * HCCL_OP_RETRY_ENABLE's and HCCL_OP_RETRY_PARAMS'); HCCL_E_PARA, logged, for a bad one. */
HcclResult hc_retry_req(const hc_comm_cfg_t *cfg, retry_conf_t *r);
/* A split child's name: "<parent>_split<seq>_c<color>", the parent's part shortened to fit. */
void hc_comm_name_child(const char *parent, uint64_t seq, uint32_t color, char *out);

#endif
