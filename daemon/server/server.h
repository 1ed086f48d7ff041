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

#include "form/form.h"
#include "frame.h"
#include "sched/engine.h"
#include "sched/qos_conf.h"
#include "server/peer.h"
#include "shm.h"
#include "uds.h"

#define SERVER_MAX_CLIENTS 1024
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
    const char *log_file;       /* --log-file: reopened on SIGHUP (NULL: stderr as it was) */
    const char *metrics_listen; /* "IP:PORT" of the Prometheus endpoint, or NULL */
} server_config_t;

typedef struct peer peer_t;
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
    form_t *form;          /* jobs, splits and communicators (form/form.h) */
    uv_timer_t form_timer; /* when formation next wants its deadlines checked */
    uv_tcp_t tcp_listener;
    int tcp_listening;
    char advertised[PEER_ADDR_MAX]; /* "IP:PORT" peers reach us at; empty when not listening */
    char data_addr[PEER_ADDR_MAX];  /* "IP:PORT" of the engine's data listener */
    char rdma_addr[PEER_ADDR_MAX];  /* its RDMA listener's, "" without an RDMA device */
    peer_t *peers;
    char **whitelist; /* HCCL_WHITELIST_FILE's host_ip, or NULL: anyone */
    size_t nwhitelist;
    uint64_t next_sid;
    uint64_t started_ms;
    int stopping;
    uv_timer_t drain_timer; /* a stop waits for the comms across daemons to come to rest */
    uint64_t drain_t0, drain_until;
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
    uint64_t clients_rejoined;        /* came back with their segment after a restart */
} server_t;

enum session_kind { SESSION_CLIENT, SESSION_ADMIN };
enum session_state { SESSION_HELLO_WAIT, SESSION_READY, SESSION_CLOSING };

struct session {
    server_t *srv;
    uv_pipe_t pipe;
    uv_timer_t hello_timer;
    frame_dec_t *dec;
    enum session_kind kind;
    enum session_state state;
    form_client_t fc; /* sid, pid, uid, job name, class, arena: what formation sees */
    gid_t gid;
    char qos_asked[QOS_NAME_MAX]; /* its HCCL_QOS_CLASS, or empty */
    int memfd;                    /* control segment: header and rings */
    void *seg;
    void *arena;
    shm_layout_t layout;
    int in_engine;
    int closes_pending;
    /* Descriptors that came with the client's messages (its pipe is an IPC pipe: a rejoining
     * client hands back its memfds), until a message takes them; the rest are closed. */
    int fds[UDS_MAX_FDS];
    int nfds;
    session_t *next;
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
void session_close(session_t *s);
/* Answers a Hello (or anything the client would take as its answer) with a failed Welcome. */
void session_refuse(session_t *s, uint64_t req_id, int result, const char *why);
/* A client's Hello or Rejoin on the admin socket: refused, naming the client socket; closes. */
void session_wrong_socket(session_t *s, uint64_t req_id);
/* The oldest descriptor that came with the client's messages, now the caller's; or -1. */
int session_take_fd(session_t *s);

/* formation.c: the server's side of form/form.h (its effects, its timer, the requests) */
int formation_start(server_t *srv);
void formation_stop(server_t *srv);
/* A client's request about jobs and comms: 0, or -EPROTO if m is none of them. */
int formation_request(session_t *s, const Hccld__Msg *m);
void formation_session_gone(session_t *s);
/* The key of a job this daemon knows (as root or member); 0 or -ENOENT. */
int formation_key_for(server_t *srv, const uint8_t *job_id, uint8_t *key);
/* An incoming control connection that proved a job's key now serves formation. */
void formation_adopt(peer_t *p);

/* whitelist.c */
int whitelist_load(server_t *srv, const char *path);
int whitelist_allows(const server_t *srv, const char *ip);

/* admin.c */
void admin_handle(server_t *srv, session_t *s, const Hccld__Msg *m);

/* lane_count.c: the lane ops the ranks here reported, into formation's figures. */
void lane_count_fold(server_t *srv);

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
