/*
 * Communicator formation: the layer between the server (sockets, libuv) and the data-path
 * engine (sched). It takes the ranks' requests (a root info, a join, a split, a destroy), the
 * peer daemons' messages (a remote rank's join, the root's membership) and the passing of time,
 * and decides: which jobs are open, when a comm forms and how (level 0, class, piece size, lanes,
 * the connections a split's child shares), what each rank is answered, and a comm's state
 * (form/comm_state.h). It knows no libuv: every entry point is told the time (ms on a monotonic
 * clock), form_next_deadline() says when it next wants form_expire(), and every effect outside
 * the engine (a message to a rank or a peer daemon, a control connection, an event) goes through
 * form_ops_t, which the server implements (server/formation.c) and unit tests fake.
 */
#ifndef HCCLD_FORM_FORM_H
#define HCCLD_FORM_FORM_H

#include <stdint.h>

#include "form/comm_state.h"
#include "form/lanes.h"
#include "form/share.h"
#include "hccl/hccl.h"
#include "hccld.pb-c.h"
#include "sched/engine.h"
#include "sched/qos_conf.h"

#define FORM_ADDR_MAX 64 /* "IP:PORT" of a daemon, its data or RDMA listener */
#define FORM_MAX_LOCAL_RANKS 256
#define FORM_MAX_RANKS 4096
#define FORM_JOB_HEX 33
#define FORM_SECRET_BYTES 32 /* a comm's secret for a restart (form/rejoin.c) */

typedef struct form form_t;

/* A client process (a rank's session) as formation sees it; the server keeps it in the session,
 * current (qos_class changes when the policy does), and hands its address to every call. */
typedef struct form_client {
    uint64_t sid;
    int pid;
    uint32_t uid;
    char job_name[64];
    int qos_class;        /* index into the policy's classes */
    int ruled_class;      /* the class the policy's rules give its tenant: what it may ask */
    uint64_t arena_bytes; /* its data arena */
    int arena_fd;         /* shown to peers of the same tenant in cooperative level 0 */
} form_client_t;

enum form_l0_mode { FORM_L0_AUTO = 0, FORM_L0_COOP = 1, FORM_L0_DAEMON = 2 };

/* A communicator as the control plane knows it (the engine has the data-path half). */
typedef struct form_comm {
    uint32_t id;
    uint32_t nranks;
    uint32_t nlocal; /* ranks on this node */
    uint32_t nnodes;
    uint32_t left;
    comm_state_t state;
    int qos_class; /* index into the policy's classes */
    char job_hex[FORM_JOB_HEX];
    int has_job; /* spans daemons: its job id follows (its children may share its links) */
    uint8_t job_id[SHARE_JOB_BYTES];
    uint64_t *sids; /* per rank; 0 once the rank left */
    /* Spanning daemons: each node's daemon address (advertised), what events name; or NULL */
    char (*nodes)[FORM_ADDR_MAX];
    struct coop_ctl *coop; /* cooperative level 0, or NULL */
    uint64_t coop_bytes;
    int coop_fd;
    uint32_t coop_lat_seen[12]; /* coop->lat4 when last folded (form_ranks_lat) */
    uint64_t coop_sum_seen;
    /* Lane ops (libclient/lane.h) its ranks here ran, as they reported them (form_lane_fold),
     * and the durations that reported when last folded. */
    uint64_t lane_ops;
    uint32_t lane_lat_seen[12];
    uint64_t lane_sum_seen;
    int rejoined; /* registered again after a restart of the daemon (form/rejoin.c) */
    /* Its ranks wait this long (ms) for a restarted daemon and register it again; 0: a
     * restart ends it. A stopping daemon leaves such a comm's control block alone. */
    uint32_t restart_hold_ms;
    uint8_t secret[FORM_SECRET_BYTES]; /* what its ranks show to register it again */
    /* Across daemons: what its ranks keep for the next daemon (a packed SpanRecord), or NULL */
    uint8_t *record;
    size_t record_len;
    struct form_comm *next;
} form_comm_t;

/* What formation reads of the daemon: fixed once the server listens (the strings are the
 * server's, and outlive the form_t). */
typedef struct form_env {
    engine_t *eng;
    const qos_policy_t *qos;
    uint64_t chunk_bytes;    /* staging chunk of a comm of this node (the arenas may lower it) */
    int l0_mode;             /* enum form_l0_mode: the operator's say (HCCLD_L0_MODE) */
    const char *socket_path; /* the client socket, which root infos name */
    const char *advertised;  /* "IP:PORT" peers reach us at; "" when not listening */
    const char *data_addr;   /* the engine's data listener */
    const char *rdma_addr;   /* its RDMA listener, "" without a device */
    /* Comm ids start after this one (the server: at random, so that a restarted daemon does
     * not take the ids of the comms that come back to it; tests: 0). */
    uint32_t comm_id_base;
} form_env_t;

/* The effects; ctx is form_new's. A link is the server's control connection to one peer
 * daemon for one job (opaque here). */
typedef struct form_ops {
    /* Sends m to a local client, with nfds descriptors (0: none): 0 or a negative errno. */
    int (*client_send)(void *ctx, const form_client_t *c, const Hccld__Msg *m, const int *fds,
                       int nfds);
    int (*peer_send)(void *ctx, void *link, const Hccld__Msg *m);
    /* Connects to the daemon at addr for a job and proves its key: the link, or NULL. The
     * server calls form_link_ready() when the handshake ends, and after a failure closes the
     * link itself. agreed: the other daemon may not know the job yet (retried). */
    void *(*peer_connect)(void *ctx, const char *addr, const uint8_t *job_id, const uint8_t *key,
                          unsigned timeout_ms, int agreed);
    /* Closes a link formation no longer needs (no form_link_gone() follows for it). */
    void (*peer_close)(void *ctx, void *link);
    /* Events (hccld-ctl watch) and names of links (the link monitor). */
    void (*comm_formed)(void *ctx, const form_comm_t *c);
    void (*rank_died)(void *ctx, const form_comm_t *c, uint32_t rank, int pid);
    void (*comm_broken)(void *ctx, const form_comm_t *c, const char *why, HcclResult result);
    void (*peer_lost)(void *ctx, const char *addr, const char *why);
    void (*name_link)(void *ctx, const char *data_addr, const char *node);
    /* Whether "IP:PORT" reaches this daemon (a root info may name it by any of its addresses). */
    int (*is_self)(void *ctx, const char *addr);
} form_ops_t;

/* NULL if out of memory. */
form_t *form_new(const form_env_t *env, const form_ops_t *ops, void *ctx);
/* The daemon stops: every pending join is answered with an error, every comm goes (its
 * cooperative ranks woken and told). */
void form_free(form_t *f);

/* Requests of a local client c; each ends in an answer to it, now or later. */
void form_root_info(form_t *f, const form_client_t *c, uint64_t req_id,
                    const Hccld__RootInfoReq *req, uint64_t now);
void form_comm_init(form_t *f, const form_client_t *c, uint64_t req_id,
                    const Hccld__CommInitReq *req, uint64_t now);
void form_comm_split(form_t *f, const form_client_t *c, uint64_t req_id,
                     const Hccld__CommSplitReq *req, uint64_t now);
/* A rank whose daemon restarted registers comm req->comm_id again (rejoin.c), handing back its
 * cooperative control block (coop_fd, taken; -1 none); answered once every rank of the comm
 * asked, or with an error. */
void form_comm_rejoin(form_t *f, const form_client_t *c, uint64_t req_id,
                      const Hccld__CommRejoinReq *req, int coop_fd, uint64_t now);
/* HcclCommDestroy of rank `rank`: HCCL_SUCCESS, or HCCL_E_PARA when c is not that rank. */
HcclResult form_comm_leave(form_t *f, const form_client_t *c, uint32_t comm_id, uint32_t rank);
/* Whether the comm broke (a member here left, or the engine broke it), as the rank's answer;
 * *ready: its connections are up and measured. */
HcclResult form_comm_health(form_t *f, const form_client_t *c, uint32_t comm_id, uint32_t rank,
                            int *ready);
/* The client went away: it leaves pending joins, splits and comms. */
void form_client_gone(form_t *f, const form_client_t *c);

/* Peer daemons. The key of a job this daemon knows (as root or member): 0, or -ENOENT. */
int form_key_for(const form_t *f, const uint8_t *job_id, uint8_t *key);
/* A message on an authenticated link for job job_id from the daemon advertising addr. */
void form_peer_msg(form_t *f, void *link, const char *addr, const uint8_t *job_id,
                   const Hccld__Msg *m, uint64_t now);
/* A link of peer_connect() authenticated (HCCL_SUCCESS) or never will (HCCL_E_NOT_FOUND: the
 * other daemon does not know the job; HCCL_E_TCP_CONNECT: anything else). */
void form_link_ready(form_t *f, void *link, HcclResult result, uint64_t now);
/* A link closed (either side, or it failed); addr names the other daemon. */
void form_link_gone(form_t *f, void *link, const char *addr);

/* When form_expire() is next due (ms, the clock of the calls), or UINT64_MAX: never. */
uint64_t form_next_deadline(const form_t *f);
/* Fails the joins, splits and root links whose time ran out by now. */
void form_expire(form_t *f, uint64_t now);

/* The comms, for status and events (valid until the next call into formation). */
const form_comm_t *form_comms(const form_t *f);

/* Comms whose ranks register them again after a restart, still waiting (for status). */
typedef struct form_rejoin_view {
    uint32_t comm_id, nranks, back;
    int coop;
    uint64_t left_ms;
    char missing[128]; /* "1 2 ..." */
} form_rejoin_view_t;
/* Up to max of them into out, as of now; returns how many there are. */
unsigned form_rejoins_view(const form_t *f, form_rejoin_view_t *out, unsigned max, uint64_t now);
/* Comms registered again since this daemon started. */
uint64_t form_comms_rejoined(const form_t *f);
/* Pieces the ranks of cooperative comms ran among themselves, of the comms freed so far (those
 * of a live comm are in its control block: coop_pieces_done). */
uint64_t form_coop_pieces_retired(const form_t *f);
/* How long the ops that ranks ran among themselves took, cooperative and lane ops, live comms
 * and gone: a count per power of 4 us (shm.h's SHM_LAT_BUCKETS) and their sum, as of now. */
void form_ranks_lat(form_t *f, uint64_t lat[12], uint64_t *sum_us);
/* Lane ops of comm comm_id as its ranks here report them: the most any of them ran (ops), with
 * that rank's durations (lat4 and sum as in shm_lane_slot_t). What grew since the last report
 * goes to the comm's and the daemon's figures; a count that went back is ignored (counters never
 * fall). */
void form_lane_fold(form_t *f, uint32_t comm_id, uint64_t ops, const uint32_t lat4[12],
                    uint64_t sum_us);
/* Lane ops of every comm so far, gone ones included. */
uint64_t form_lane_ops(const form_t *f);

#endif
