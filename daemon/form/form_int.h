/* What the files of the formation layer share (form.h is its interface). */
#ifndef HCCLD_FORM_FORM_INT_H
#define HCCLD_FORM_FORM_INT_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "form/form.h"

typedef struct job job_t;
typedef struct rjob rjob_t;
typedef struct split split_t;
typedef struct rejoin rejoin_t;

struct form {
    form_env_t env;
    const form_ops_t *ops;
    void *ctx;
    job_t *jobs;     /* jobs whose root is this daemon, filling up */
    rjob_t *rjobs;   /* jobs whose root is another daemon */
    split_t *splits; /* HcclCommSplit calls waiting for the other ranks */
    form_comm_t *comms;
    rejoin_t *rejoins; /* comms being registered again after a restart (rejoin.c) */
    uint64_t rejoined; /* comms registered again so far */
    /* Pieces the ranks of cooperative comms since freed ran among themselves. */
    uint64_t coop_retired;
    /* Lane ops of every comm so far, gone ones included (form_lane_fold). */
    uint64_t lane_ops;
    /* The durations of the ops that ranks ran among themselves, cooperative and lane ops, folded
     * from the control blocks and the ranks' lane slots (form_ranks_lat). */
    uint64_t ranks_lat[12], ranks_lat_sum_us;
    uint32_t next_comm_id;
};

/* A rank's level-1 settings, as it asked (engine_level1_t holds pointers into one). */
typedef struct form_level1 {
    char algo[ENGINE_ALGO_MAX];
    char algorithm[ENGINE_ALGORITHM_MAX];
    int by_config, deterministic;
} form_level1_t;

/* Op retry between daemons as a rank asked for it (HCCL_OP_RETRY_*, hcclRetry*), or as the root
 * decided it for a comm. */
typedef struct form_retry {
    int l0, l1;
    uint32_t hold_ms, max_cnt, interval_ms;
} form_retry_t;

/* A rank that asked to join a communicator. */
typedef struct join {
    const form_client_t *c; /* a rank of this node, or */
    void *link;             /* the control link to a remote rank's daemon; both NULL: none */
    uint64_t req_id;
    uint32_t l0_mode;   /* what the rank asked for */
    form_level1_t want; /* its level-1 settings (checked) */
    char notice[256];   /* a warning its init answer carries ("" none) */
    int log_ops;        /* it runs at HCCL_DEBUG=INFO: log each op's algorithm choice */
    form_retry_t retry; /* its op retry settings */
    int qos_class;      /* a local rank's class for this comm (hcclQos, or its client's) */
    int has_parent;     /* a split's child: the parent's job id follows */
    uint8_t parent[SHARE_JOB_BYTES];
    lane_offer_t lane; /* a local rank's listener, a remote rank's address; LANE_OFFER_NONE */
    /* A remote rank: its daemon's addresses, and what it said of the parent's links. */
    char node[FORM_ADDR_MAX], data[FORM_ADDR_MAX], rdma[FORM_ADDR_MAX];
    share_note_t note;
} join_t;

/* level1.c: takes a request's level-1 fields into *w and checks them: 0, or -EINVAL with the
 * reason in err (logged). notice gets "" or the warning for the rank (logged). */
int form_level1_take(form_level1_t *w, const char *algo, const char *algorithm, int by_config,
                     int deterministic, char *err, size_t cap, char *notice, size_t ncap);
/* The engine's view of w (pointers into it). */
engine_level1_t form_level1_view(const form_level1_t *w);

/* retry.c: a request's op retry settings (the defaults where it set none); how long a failed
 * data connection of a comm with r may take to come back, in ms (0: no retry). */
void form_retry_take(form_retry_t *r, const Hccld__CommInitReq *req);
void form_retry_take_split(form_retry_t *r, const Hccld__CommSplitReq *req);
uint64_t form_retry_hold_ms(const form_retry_t *r);
/* The root's decision into m, and back out of one (an older root's: no retry). */
void form_retry_put(const form_retry_t *r, Hccld__Membership *m);
void form_retry_get(form_retry_t *r, const Hccld__Membership *m);

/* qos.c: the class a local rank's comm asks for with hcclQos (level 0..7, a larger one more
 * favoured; HCCL's), granted as HCCL_QOS_CLASS is, never above the class the rules give the
 * client; without one, the client's class. */
int form_qos_class(const form_t *f, const form_client_t *c, int level_set, uint32_t level);

/* answer.c: the answers to a rank's init or split */
int form_send(form_t *f, const form_client_t *c, uint64_t req_id, Hccld__CommInitResp *r,
              const int *fds, int nfds);
void form_answer_result(form_t *f, const form_client_t *c, uint64_t req_id, HcclResult result,
                        const char *why, uint32_t nranks, uint32_t rank);
/* What a comm's lanes need for an init answer (lanes.h): every rank's listener address, the
 * comm's direct_max (0: no lanes) and the job key. */
typedef struct lanes_info {
    const char *const *addrs;
    uint64_t direct_max;
    const uint8_t *key;
} lanes_info_t;
/* The answer to a rank of a comm that spans daemons; chunk: the piece size the root decided;
 * lane: the rank's listener, handed over when ln gives the comm lanes. */
void form_answer_multinode(form_t *f, const form_client_t *c, uint64_t req_id,
                           const form_comm_t *fc, uint32_t rank, uint64_t chunk, const char *notice,
                           lane_offer_t *lane, const lanes_info_t *ln);

/* comm.c: this daemon's communicators */
/* A record for nranks ranks on nnodes daemons, in state FORMING; NULL if out of memory. */
form_comm_t *form_comm_add(form_t *f, uint32_t nranks, uint32_t nnodes, const char *job_hex);
/* The same under a given id (a comm registered again after a restart). */
form_comm_t *form_comm_add_id(form_t *f, uint32_t id, uint32_t nranks, uint32_t nnodes,
                              const char *job_hex);
form_comm_t *form_comm_find(form_t *f, uint32_t id);
/* Moves c by event e (comm_state.h); a transition the table lacks is logged and ignored.
 * Returns c's state after. */
comm_state_t form_comm_step(form_comm_t *c, comm_event_t e);
/* Takes a comm that failed to form out again (answers are the caller's). */
void form_comm_drop(form_t *f, form_comm_t *c);
/* The least favoured class (highest priority number) of the local ranks of joins[n]; the
 * default class without any. */
int form_least_class(const form_t *f, const join_t *joins, uint32_t n);
/* Forms a comm of n ranks of this node (joins[r] in comm rank order, all local) and answers
 * each; hex names it in logs and status. 0, or a negative errno after answering with an
 * error. */
int form_comm_local(form_t *f, uint32_t n, const join_t *joins, const char *hex);
/* Creates the engine half of a comm spanning daemons from its membership (rank_node: each
 * rank's node; this daemon's ranks, those with sids set, must be exactly one node's).
 * HCCL_SUCCESS, or the HcclResult of the failure with *why set. */
typedef struct multinode_opts {
    const form_level1_t *want; /* a local rank's level-1 settings, or NULL */
    int log_ops;               /* a local rank asked for each op's algorithm choice in the log */
    int qos_class;             /* index into the policy's classes, as the root decided */
    const share_plan_t *plan;  /* a split's child: the connections it shares, or NULL */
    const char *const *rdma_nodes; /* RDMA data address per node ("" none), or NULL */
    const char *const *nodes;      /* each node's daemon address (advertised), or NULL */
    uint32_t connect_timeout_s;    /* the job's HCCL_CONNECT_TIMEOUT, for its data connections */
    const form_retry_t *retry;     /* op retry, as the root decided; NULL: none */
    int returning; /* taken back after a restart of this daemon: it dials every other node */
    const uint64_t *p2p_next; /* then how far its ranks' send/recv got (span_spec_t.p2p_next) */
    uint64_t coll_below;      /* and their collectives (span_spec_t.coll_below) */
} multinode_opts_t;
HcclResult form_comm_multinode(form_t *f, form_comm_t *c, const char *const *data_nodes,
                               const uint32_t *rank_node, uint32_t nnodes, const uint8_t *job_id,
                               const uint8_t *key, const multinode_opts_t *o, const char **why);
void form_comms_client_gone(form_t *f, const form_client_t *c);
void form_comms_stop(form_t *f);

/* record.c: what the ranks of a comm across daemons keep for a restart of this daemon. */
/* Makes c's record (c->record) from what formed it: 0, or -1 (out of memory). */
int form_record_make(form_comm_t *c, const char *const *data_nodes, const uint32_t *rank_node,
                     uint32_t nnodes, uint32_t me, const uint8_t *job_id, const uint8_t *key,
                     const multinode_opts_t *o, const char *qos_name);
/* A record a rank handed back, unpacked and checked for nranks ranks: NULL with *why set. Free
 * it with hccld__span_record__free_unpacked. */
Hccld__SpanRecord *form_record_read(const uint8_t *data, size_t len, uint32_t nranks,
                                    const char **why);
/* Forms comm c (its id, sids and nlocal set) again from record sr, with this daemon back
 * after a restart. HCCL_SUCCESS, or the failure with *why set. */
HcclResult form_record_comm(form_t *f, form_comm_t *c, const Hccld__SpanRecord *sr,
                            const uint64_t *p2p_next, uint64_t coll_below, const char **why);

/* rejoin.c: comms registered again after a daemon restart. */
/* The time a comm's ranks wait for a restarted daemon (ms): the least of joins[n]'s when every
 * one has op retry on at L0 or L1, else 0 (a restart ends the comm, as it always did). */
uint32_t form_restart_hold_ms(const join_t *joins, uint32_t n);
void form_rejoins_client_gone(form_t *f, const form_client_t *c);
/* Whether comm id is being registered again. */
int form_rejoin_pending(const form_t *f, uint32_t id);
uint64_t form_rejoins_deadline(const form_t *f);
void form_rejoins_expire(form_t *f, uint64_t now);
void form_rejoins_stop(form_t *f);

/* job.c (this daemon is the root), rjob.c (another daemon is), split.c */
void form_jobs_client_gone(form_t *f, const form_client_t *c);
void form_jobs_stop(form_t *f);
int form_jobs_key_for(const form_t *f, const uint8_t *job_id, uint8_t *key);
void form_remote_join(form_t *f, void *link, const char *addr, const uint8_t *job_id,
                      const Hccld__JoinReq *req, uint64_t now);
/* Forgets the remote ranks that joined over link: 1 if a job still needed it. */
int form_jobs_link_gone(form_t *f, void *link);
uint64_t form_jobs_deadline(const form_t *f);
void form_jobs_expire(form_t *f, uint64_t now);

/* The class the root daemon decided, as this daemon knows it (its default if unknown here). */
int form_membership_class(const form_t *f, const Hccld__Membership *m);
void form_rjob_join(form_t *f, const form_client_t *c, uint64_t req_id,
                    const Hccld__CommInitReq *req, uint64_t now);
int form_rjobs_key_for(const form_t *f, const uint8_t *job_id, uint8_t *key);
void form_rjobs_membership(form_t *f, void *link, const Hccld__Membership *m);
void form_rjobs_link_ready(form_t *f, void *link, HcclResult result, uint64_t now);
/* Fails the job that link served, if any: 1 if there was one. */
int form_rjobs_link_gone(form_t *f, void *link);
void form_rjobs_client_gone(form_t *f, const form_client_t *c);
void form_rjobs_stop(form_t *f);
uint64_t form_rjobs_deadline(const form_t *f);
void form_rjobs_expire(form_t *f, uint64_t now);

void form_splits_client_gone(form_t *f, const form_client_t *c);
void form_splits_stop(form_t *f);
uint64_t form_splits_deadline(const form_t *f);
void form_splits_expire(form_t *f, uint64_t now);

/* share.c: the server's side of sharing a parent's connections */
/* What this daemon says for one joining rank of session sid naming parent (NULL: none): its
 * parent and the data addresses that parent is connected to. 0, or -1 if out of memory (w
 * then says nothing). */
int share_word(form_t *f, const uint8_t *parent, uint64_t sid, share_word_t *w);
/* The parent comm spanning daemons with job id parent whose ranks here include every nonzero
 * sid of sids[n], or NULL. */
form_comm_t *share_parent_find(form_t *f, const uint8_t *parent, const uint64_t *sids, uint32_t n);
/* For comm c (this daemon is node me): share[i] for each node i (c->nnodes bytes), the parent
 * comm's id and whether every pair shares. 0, or -1 when the plan names pairs that this daemon
 * cannot serve (its parent is gone): it must then fail the comm. */
int share_spec(form_t *f, const form_comm_t *c, const share_plan_t *plan, uint32_t me,
               uint8_t *share, uint32_t *parent_comm_p, int *inherit_p);

#define FORM_DEFAULT_TIMEOUT_S 120
#define FORM_NEVER UINT64_MAX

#endif
