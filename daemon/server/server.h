/*
 * The control plane: a libuv loop that owns the client and admin sockets, the sessions (one per
 * client connection, each with its memfd segment), the jobs that root infos name and the
 * communicators formed from them. The data path runs in sched/engine.
 */
#ifndef HCCLD_SERVER_SERVER_H
#define HCCLD_SERVER_SERVER_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "algo/algo_want.h"
#include "frame.h"
#include "sched/engine.h"
#include "server/lanes.h"
#include "server/peer.h"
#include "server/qos_conf.h"
#include "server/share.h"
#include "shm.h"

#define SERVER_MAX_CLIENTS 1024
#define SERVER_MAX_LOCAL_RANKS 256
#define SERVER_MAX_RANKS 4096
#define SERVER_HELLO_TIMEOUT_MS 5000
#define SERVER_SQ_ENTRIES 256
#define SERVER_MAX_ARENA (16ull << 30)

typedef struct server_config {
    const char *socket_path;
    const char *admin_path;
    unsigned workers;
    uint64_t chunk_bytes; /* staging chunk agreed by a comm's ranks */
    uint64_t max_arena;
    int l0_mode;                /* 0 auto, 1 coop, 2 daemon: HCCLD_L0_MODE, the operator's say */
    const char *listen;         /* "IP:PORT" for peer daemons, or NULL */
    const char *config_path;    /* hccld.conf: its QoS sections are read at start and on SIGHUP */
    const char *metrics_listen; /* "IP:PORT" of the Prometheus endpoint, or NULL */
} server_config_t;

typedef struct rjob rjob_t;
typedef struct split split_t;
typedef struct peer peer_t;
typedef struct session session_t;

/* A rank that asked to join a communicator. */
typedef struct join {
    session_t *s; /* a rank of this node, or */
    peer_t *p;    /* the daemon of a remote rank; both NULL: not joined */
    uint64_t req_id;
    uint32_t l0_mode; /* what the rank asked for */
    algo_want_t want; /* its level-1 settings (checked) */
    char notice[256]; /* a warning its init answer carries ("" none) */
    int log_ops;      /* it runs at HCCL_DEBUG=INFO: log each op's algorithm choice */
    int has_parent;   /* a split's child: the parent's job id follows */
    uint8_t parent[SHARE_JOB_BYTES];
    lane_offer_t lane; /* a local rank's listener, a remote rank's address; LANE_OFFER_NONE */
} join_t;

typedef struct job job_t;
typedef struct scomm scomm_t;
typedef struct session session_t;

typedef struct server {
    uv_loop_t *loop;
    server_config_t cfg;
    uv_pipe_t listener;
    uv_pipe_t admin;
    uv_signal_t sigterm, sigint, sighup;
    engine_t *eng;
    session_t *sessions;
    unsigned nsessions;
    job_t *jobs;
    rjob_t *rjobs;   /* jobs whose root is another daemon */
    split_t *splits; /* HcclCommSplit calls waiting for the other ranks */
    scomm_t *comms;
    uv_tcp_t tcp_listener;
    int tcp_listening;
    char advertised[PEER_ADDR_MAX]; /* "IP:PORT" peers reach us at; empty when not listening */
    char data_addr[PEER_ADDR_MAX];  /* "IP:PORT" of the engine's data listener */
    char rdma_addr[PEER_ADDR_MAX];  /* its RDMA listener's, "" without an RDMA device */
    peer_t *peers;
    char **whitelist; /* HCCL_WHITELIST_FILE's host_ip, or NULL: anyone */
    size_t nwhitelist;
    uint64_t next_sid;
    uint32_t next_comm_id;
    uint64_t started_ms;
    int stopping;
    qos_policy_t qos;
    struct topo *topo; /* hwloc's view of the node, or NULL */
    char nic[32];      /* the interface of the advertised address */
    char pinned[64];   /* the cores our threads run on, empty if not pinned */
    uv_timer_t watchdog;
    int watchdog_on;
    struct metrics_http *metrics;     /* the Prometheus endpoint, or NULL */
    char metrics_addr[PEER_ADDR_MAX]; /* its bound "IP:PORT", empty when off */
    struct link_mon *links;           /* the link monitor (link_mon.h), or NULL: off */
    struct events *events;            /* hccld-ctl watch (events.h), NULL until one watches */
} server_t;

enum l0_mode { L0_AUTO = 0, L0_COOP = 1, L0_DAEMON = 2 };

enum session_kind { SESSION_CLIENT, SESSION_ADMIN };
enum session_state { SESSION_HELLO_WAIT, SESSION_READY, SESSION_CLOSING };

struct session {
    server_t *srv;
    uv_pipe_t pipe;
    uv_timer_t hello_timer;
    frame_dec_t *dec;
    enum session_kind kind;
    enum session_state state;
    uint64_t sid;
    pid_t pid;
    uid_t uid;
    gid_t gid;
    char job_name[64];
    int qos_class;                /* index into srv->qos.cls (clients) */
    char qos_asked[QOS_NAME_MAX]; /* its HCCL_QOS_CLASS, or empty */
    int memfd;                    /* control segment: header and rings */
    int arena_fd;                 /* data arena, shown to peers of the same tenant in coop mode */
    void *seg;
    void *arena;
    shm_layout_t layout;
    int in_engine;
    int closes_pending;
    session_t *next;
};

/* A communicator as the control plane knows it (the engine has the data-path half). */
struct scomm {
    uint32_t id;
    uint32_t nranks;
    uint32_t nlocal; /* ranks on this node */
    uint32_t nnodes;
    uint32_t left;
    int broken;    /* a member here died (or its shared segments could not be passed) */
    int qos_class; /* index into srv->qos.cls */
    char job_hex[33];
    int has_job; /* spans daemons: its job id follows (its children may share its links) */
    uint8_t job_id[SHARE_JOB_BYTES];
    uint64_t *sids; /* per rank; 0 once the rank left */
    /* Spanning daemons: each node's daemon address (advertised), what events name; or NULL */
    char (*nodes)[PEER_ADDR_MAX];
    struct coop_ctl *coop; /* cooperative level 0, or NULL */
    uint64_t coop_bytes;
    int coop_fd;
    scomm_t *next;
};

int server_start(server_t *srv, uv_loop_t *loop, const server_config_t *cfg);
void server_stop(server_t *srv);

/* framed.c: frames over libuv streams */
int framed_send(uv_stream_t *stream, const Hccld__Msg *m);
void framed_alloc(frame_dec_t *dec, uv_buf_t *buf);

/* session.c */
void session_accept(server_t *srv, uv_stream_t *listener, enum session_kind kind);
int session_send(session_t *s, const Hccld__Msg *m);
int session_send_fds(session_t *s, const Hccld__Msg *m, const int *fds, int nfds);
/* A sealed memfd of bytes, mapped; returns the fd or -errno. */
int server_memfd_map(const char *name, uint64_t bytes, void **base_p);
void session_close(session_t *s);

/* jobs.c */
void jobs_root_info(server_t *srv, session_t *s, uint64_t req_id, const Hccld__RootInfoReq *req);
void jobs_comm_init(server_t *srv, session_t *s, uint64_t req_id, const Hccld__CommInitReq *req);
/* The session is going away: leave pending joins and communicators. */
void jobs_session_gone(server_t *srv, session_t *s);
void jobs_stop(server_t *srv);
/* The key of a job this daemon knows (as root or member); 0 or -ENOENT. */
int jobs_key_for(server_t *srv, const uint8_t *job_id, uint8_t *key);
void jobs_peer_msg(peer_t *p, const Hccld__Msg *m);
void jobs_peer_gone(peer_t *p);
/* Takes a rank's level-1 settings (HCCL_ALGO or hcclAlgo, HCCL_ALGORITHM, deterministic) into
 * *w and checks them: 0, or -EINVAL with the reason in err (logged). notice gets "" or the
 * warning for the rank when HCCL_ALGO and HCCL_ALGORITHM disagree (also logged). */
int algo_check(algo_want_t *w, const char *algo, const char *algorithm, int by_config,
               int deterministic, char *err, size_t cap, char *notice, size_t ncap);

/* scomm.c: this daemon's communicators */
void scomm_on_destroy(server_t *srv, session_t *s, uint64_t req_id,
                      const Hccld__CommDestroyReq *req);
/* Answers whether the comm broke (a member here left, or the engine broke it). */
void scomm_on_health(server_t *srv, session_t *s, uint64_t req_id, const Hccld__CommHealthReq *req);
/* The session's ranks leave every comm; a comm none of whose local ranks is left goes. */
void scomms_session_gone(server_t *srv, session_t *s);
/* The daemon stops: every comm goes, its cooperative ranks woken and told. */
void scomms_stop(server_t *srv);
void send_init_resp(session_t *s, uint64_t req_id, HcclResult result, const char *why,
                    uint32_t comm_id, uint32_t nranks, uint32_t rank, uint64_t chunk);
/* What a comm's lanes need for an init answer (lanes.h): every rank's listener address, the
 * comm's direct_max (0: no lanes) and the job key. */
typedef struct lanes_info {
    const char *const *addrs;
    uint64_t direct_max;
    const uint8_t *key;
} lanes_info_t;
/* chunk: the piece size the root daemon decided (Membership.chunk_bytes); lane: the rank's
 * listener, handed over with the answer when ln gives the comm lanes. */
void send_multinode_resp(session_t *s, uint64_t req_id, const scomm_t *c, uint32_t rank,
                         uint32_t nnodes, uint64_t chunk, const char *notice, lane_offer_t *lane,
                         const lanes_info_t *ln);
/* Forms a communicator of n ranks of this node (ranks[r] in comm rank order) and answers each;
 * job_hex names it in logs and status. 0, or a negative errno after answering with an error. */
int comm_form(server_t *srv, uint32_t n, const join_t *ranks, const char *hex);
/* Creates the engine half of a comm spanning daemons from its membership (rank_node: each
 * rank's node, placed in any way; this daemon's ranks, those with sids set, must be exactly one
 * node's). HCCL_SUCCESS, or the HcclResult of the failure with *why set. */
typedef struct multinode_opts {
    const algo_want_t *want;  /* a local rank's level-1 settings */
    int log_ops;              /* a local rank asked for each op's algorithm choice in the log */
    int qos_class;            /* index into srv->qos.cls, as the root decided */
    const share_plan_t *plan; /* a split's child: the connections it shares, or NULL */
    const char *const *rdma_nodes; /* RDMA data address per node ("" none), or NULL */
    const char *const *nodes;      /* each node's daemon address (advertised), or NULL */
    uint32_t connect_timeout_s;    /* the job's HCCL_CONNECT_TIMEOUT, for its data connections */
} multinode_opts_t;
HcclResult multinode_engine_comm(server_t *srv, scomm_t *c, const char *const *data_nodes,
                                 const uint32_t *rank_node, uint32_t nnodes, const uint8_t *job_id,
                                 const uint8_t *key, const multinode_opts_t *o, const char **why);
/* A communicator record for ranks of this node; sids[r] for local ranks, 0 for others. */
scomm_t *scomm_add(server_t *srv, uint32_t nranks, uint32_t nnodes, const char *job_hex);

scomm_t *scomm_lookup(server_t *srv, uint32_t id);

/* split.c */
void jobs_comm_split(server_t *srv, session_t *s, uint64_t req_id, const Hccld__CommSplitReq *req);
void splits_session_gone(server_t *srv, session_t *s);
void splits_stop(server_t *srv);

/* rjobs.c: the member side of a job whose root is another daemon */
void rjobs_join(server_t *srv, session_t *s, uint64_t req_id, const Hccld__CommInitReq *req);
int rjobs_key_for(server_t *srv, const uint8_t *job_id, uint8_t *key);
void rjobs_membership(server_t *srv, peer_t *p, const Hccld__Membership *m);
/* Fails the job that control connection p served, if any: 1 if there was one. */
int rjobs_link_gone(server_t *srv, peer_t *p);
void rjobs_session_gone(server_t *srv, session_t *s);
void rjobs_stop(server_t *srv);

/* whitelist.c */
int whitelist_load(server_t *srv, const char *path);
int whitelist_allows(const server_t *srv, const char *ip);

/* admin.c */
void admin_handle(server_t *srv, session_t *s, const Hccld__Msg *m);

/* service.c: systemd watchdog, and the QoS policy from the config file (at start, SIGHUP). */
void service_watchdog_start(server_t *srv);
void service_watchdog_stop(server_t *srv);
int service_load_policy(server_t *srv, qos_policy_t *p);
void service_reload(server_t *srv);

/* qos_admin.c: a client's class (rules, then what it asked if they allow it); every client
 * classified again after the policy changed; hccld-ctl qos. */
int qos_session_class(server_t *srv, session_t *s);
void qos_reclassify(server_t *srv);
/* Hands the classes' priorities and caps to the data path (start, reload, qos set). */
void qos_apply(server_t *srv);
void qos_admin_handle(server_t *srv, session_t *s, uint64_t req_id, const Hccld__QosReq *q);
/* The classes, their figures and the default class into r (cls and clsp: QOS_MAX_CLASSES). */
void qos_list_fill(server_t *srv, Hccld__QosResp *r, Hccld__QosClass *cls, Hccld__QosClass **clsp);

#endif
