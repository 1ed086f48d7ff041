/* Engine internals shared by engine.c (thread, sessions, intake), match.c (communicators) and
 * spanned.c (communicators that span daemons, through span/span.h). */
#ifndef HCCLD_SCHED_ENGINE_INT_H
#define HCCLD_SCHED_ENGINE_INT_H

#include <pthread.h>

#include "exec/exec.h"
#include "ring.h"
#include "sched/engine.h"
#include "sched/qos_sched.h"
#include "span/span.h"

typedef struct eng_session eng_session_t;
typedef struct eng_comm eng_comm_t;

/* A FIFO of descriptors waiting for their peers, with when each was taken in. */
typedef struct dq {
    desc_t *v;
    uint64_t *t_in; /* now_ns() at intake */
    uint32_t head, n, cap;
} dq_t;

/* How the op a comm runs spends its time, reported in each rank's completion (cqe_t). */
typedef struct op_prof {
    uint64_t t_start; /* when it started executing; 0: never did */
    uint64_t l0_ns, l1_ns, qos_wait_ns;
    int algo;    /* level 1, or -1 */
    uint8_t src; /* enum algo_src: what chose algo */
} op_prof_t;

typedef struct eng_member {
    eng_session_t *s; /* NULL once the rank left */
    dq_t coll;        /* collectives, in sequence order */
    dq_t p2p;         /* sends and receives, in post order */
} eng_member_t;

struct eng_comm {
    uint32_t id;
    uint32_t nranks;
    uint32_t left;            /* ranks that left */
    int broken;               /* a rank died or misbehaved: every op fails, with broken_status */
    HcclResult broken_status; /* the first break's: HCCL_E_REMOTE, HCCL_E_PARA (ranks posted
                               * different collectives) or HCCL_E_TIMEOUT */
    /* A rank left: collectives from this sequence on (pieces it took no part in) fail,
     * transfers among the others go on. UINT64_MAX: every rank is here. */
    uint64_t coll_limit;
    uint64_t next_seq;
    /* When the ranks' next collectives were first seen to disagree (0: they agree). The
     * verdict waits MISMATCH_GRACE_NS: ranks whose lanes broke at a rank's death fall back to
     * the daemon at different ops, and the death, once heard, is the error they get. */
    uint64_t mismatch_ns;
    uint64_t ops_done;
    uint32_t nglobal;       /* ranks in the whole comm (nranks are this node's) */
    uint32_t *global_of;    /* [nranks]: global rank of each local member, in rank order */
    uint32_t *local_of;     /* [nglobal]: local member of each global rank, or UINT32_MAX */
    span_comm_t *span;      /* spans daemons (the layer below), or NULL */
    const span_ops_t *sops; /* its table: span_ops (tests: a fake) */
    int qos_class;          /* of a comm that spans daemons, or -1 */
    eng_member_t *m;
    l0_rank_t *l0r;           /* scratch for exec */
    op_prof_t prof;           /* of the collective under way */
    uint32_t culprit;         /* global rank that died or left, for the log and notices; or -1 */
    char why[ENGINE_WHY_MAX]; /* the first break's reason */
    /* Re-registered after a daemon restart (engine_resume_t); 0 and NULL otherwise. */
    uint64_t done_below, maybe_started;
    uint64_t *p2p_done;
    eng_comm_t *next;
};

struct eng_session {
    uint64_t sid;
    uint8_t *base;
    uint8_t *arena;
    shm_layout_t l;
    shm_hdr_t *hdr;
    ring_t sq, cq;
    uint32_t outstanding; /* descriptors taken and not yet completed */
    int dead;             /* broke the ring protocol: ignored from now on */
    int wake;             /* completions posted since the last wake-up check */
    uint64_t submitted, completed;
    eng_session_t *next;
};

struct engine {
    pthread_mutex_t lock;
    pthread_t thread;
    int stop;
    int halted; /* engine_halt(): nothing touches the clients' segments any more */
    int doorbell;
    uint64_t spin_ns; /* HCCLD_ENGINE_SPIN_US */
    exec_t *exec;
    eng_session_t *sessions;
    eng_comm_t *comms;
    engine_stats_t st;
    /* Comms that span daemons: their connection manager and what they share (span.h). */
    span_env_t *senv;
    uint64_t beat_ns; /* atomic: the engine loop's last turn */
    qos_sched_t qos;  /* classes: priority and cap of what goes to peer daemons */
};

/* Where a comm is in its life, worked out from its fields (eng_comm_state()). */
typedef enum eng_comm_state {
    ENG_COMM_CONNECTING, /* spans daemons: its data connections are not all up */
    ENG_COMM_PROBING,    /* connected; its links are being measured, and nothing starts before */
    ENG_COMM_READY,      /* runs its ops */
    ENG_COMM_BROKEN,     /* a rank died or misbehaved: every op fails; only its notice goes out */
} eng_comm_state_t;

static inline eng_comm_state_t eng_comm_state(const eng_comm_t *c)
{
    if (c->broken)
        return ENG_COMM_BROKEN;
    if (c->span == NULL)
        return ENG_COMM_READY;
    switch (c->sops->state(c->span)) {
    case SPAN_CONNECTING: return ENG_COMM_CONNECTING;
    case SPAN_PROBING: return ENG_COMM_PROBING;
    default: return ENG_COMM_READY;
    }
}

/* Local member of global rank g, or UINT32_MAX when another node holds it. */
static inline uint32_t eng_comm_local(const eng_comm_t *c, uint32_t g)
{
    return g < c->nglobal ? c->local_of[g] : UINT32_MAX;
}

/* match.c */
/* Sets which global ranks (global[l], ascending, l < c->nranks) are this node's members, out of
 * nglobal: 0 or -ENOMEM. engine_comm_create makes them ranks 0..nranks-1. */
int eng_comm_set_ranks(eng_comm_t *c, uint32_t nglobal, const uint32_t *global);
void eng_comm_route(engine_t *eng, eng_session_t *s, const desc_t *d);
int eng_comm_progress(engine_t *eng, eng_comm_t *c);
/* Runs the collectives every local rank posted and matches the transfers among them. */
int eng_comm_local_progress(engine_t *eng, eng_comm_t *c);
/* Matches the transfers among c's local ranks. */
int eng_comm_local_p2p(engine_t *eng, eng_comm_t *c);
void eng_comm_break(engine_t *eng, eng_comm_t *c, const char *why);
/* The same, failing what is queued with status (later ops fail with HCCL_E_REMOTE); the other
 * nodes hear of it, and fail theirs with HCCL_E_PARA too if status is HCCL_E_PARA (ranks that
 * posted different collectives). */
void eng_comm_break_status(engine_t *eng, eng_comm_t *c, HcclResult status, const char *why);
/* Global rank `rank` left (here, or on another node that says so); it took part in the
 * collective pieces below `limit` (UINT64_MAX: work it out here). */
void eng_comm_rank_left(engine_t *eng, eng_comm_t *c, uint32_t rank, uint64_t limit);
void eng_comm_free(eng_comm_t *c);
eng_comm_t *eng_comm_find(engine_t *eng, uint32_t id);
/* Unlinks and frees comm id, which engine_comm_create registered but whose setup then failed
 * before any rank could use it. Takes eng->lock. */
void eng_comm_unmake(engine_t *eng, uint32_t id);

desc_t *coll_ready(engine_t *eng, eng_comm_t *c);
void coll_finish(engine_t *eng, eng_comm_t *c, HcclResult status);
desc_t *dq_at(dq_t *q, uint32_t i);
uint64_t dq_t_in(const dq_t *q, uint32_t i);
/* Puts d first (a transfer taken back from the wire); -1 without memory. */
int dq_push_front(dq_t *q, const desc_t *d, uint64_t t_in);
/* Removes entry i, keeping the order of the others. */
void dq_remove(dq_t *q, uint32_t i);

/* spanned.c: comms that span daemons, driven through their table (span.h). */
int eng_span_progress(engine_t *eng, eng_comm_t *c);
/* The queued transfers of c whose peer is on another node, put on the wire. */
int eng_span_post_p2p(engine_t *eng, eng_comm_t *c);
/* Whether some comm waits on the network (then the engine polls instead of sleeping). */
int eng_span_waiting(engine_t *eng);
/* The sockets whose activity lets a comm spanning daemons progress: the listeners first. */
int eng_span_poll_fds(engine_t *eng, struct pollfd *pfd, int max, int *ncm_p);
/* Acts on the events c's span comm reported, oldest first; returns how many. */
int eng_span_drain(engine_t *eng, eng_comm_t *c);

/* engine.c */
void engine_kick(engine_t *eng);
void eng_session_complete(engine_t *eng, eng_session_t *s, uint64_t tag, HcclResult status);
/* The same with the timing fields of e filled (e->tag and e->status as above). */
void eng_session_post(engine_t *eng, eng_session_t *s, const cqe_t *e);
/* The completion of a descriptor taken in at t_in, for an op profiled in p (NULL: none). */
void prof_cqe(cqe_t *e, const op_prof_t *p, uint64_t t_in);

#endif
