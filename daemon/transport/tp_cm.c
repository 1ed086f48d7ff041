/* The connection manager (tp_cm.h): listeners, accept, the jobs they serve, stripes, and the
 * choice of transport per pair of nodes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma.h"
#include "transport/tp_cm.h"
#include "transport/tp_stripe.h"

/* How long a job is expected, and a connection for it held, before its comm exists here. */
#define EXPECT_NS (60ull * 1000000000ull)
/* How often the listeners are tried without poll() having said so (a busy engine may not
 * sleep for a long time; a connection then waits at most this long). */
#define ACCEPT_EVERY_NS 20000000ull

typedef struct cm_job {
    uint8_t job_id[AUTH_JOB_BYTES], key[AUTH_KEY_BYTES];
    uint32_t claims;
    uint64_t since_ns;
    struct cm_job *next;
} cm_job_t;

/* A connection being accepted: in its handshake, gathering stripes, waiting for its job's
 * claim, or ready to be taken. */
typedef struct cm_conn {
    tp_cm_t *cm;
    tp_conn_t *conn;
    uint8_t job_id[AUTH_JOB_BYTES];
    int known; /* the handshake named a job we know */
    uint64_t since_ns;
    struct cm_conn *next;
} cm_conn_t;

#define CM_LISTENERS (2 + TP_CM_ALSO_MAX)

struct tp_cm {
    int mode;
    /* TCP, RDMA (or NULL), then TCP on the data addresses this daemon had before a restart
     * (tp_cm_listen_also), whose names its ranks' comms still carry */
    tp_listener_t *ls[2 + TP_CM_ALSO_MAX];
    char also[TP_CM_ALSO_MAX][TP_ADDR_MAX];
    char tcp_addr[TP_ADDR_MAX]; /* where ls[0] listens */
    int accept_due;
    uint64_t next_accept_ns;
    cm_job_t *jobs;
    cm_conn_t *accepting;
    cm_conn_t *ready, **ready_tail;
};

tp_cm_t *tp_cm_new(void)
{
    tp_cm_t *cm = calloc(1, sizeof(*cm));

    if (cm != NULL)
        cm->ready_tail = &cm->ready;
    return cm;
}

static void conns_close(cm_conn_t *a)
{
    while (a != NULL) {
        cm_conn_t *n = a->next;
        tp_close(a->conn);
        free(a);
        a = n;
    }
}

void tp_cm_free(tp_cm_t *cm)
{
    if (cm == NULL)
        return;
    while (cm->jobs != NULL) {
        cm_job_t *j = cm->jobs;
        cm->jobs = j->next;
        free(j);
    }
    conns_close(cm->accepting);
    conns_close(cm->ready);
    for (int k = 0; k < CM_LISTENERS; k++)
        tp_listen_close(cm->ls[k]);
    free(cm);
}

int tp_cm_set_mode(tp_cm_t *cm, const char *s)
{
    if (s == NULL || *s == '\0' || strcasecmp(s, "auto") == 0)
        cm->mode = TP_CM_AUTO;
    else if (strcasecmp(s, "tcp") == 0)
        cm->mode = TP_CM_TCP;
    else if (strcasecmp(s, "rdma") == 0 || strcasecmp(s, "roce") == 0)
        cm->mode = TP_CM_RDMA;
    else {
        ERR("NET", "HCCL_TRANSPORT=%s: want tcp, rdma or auto", s);
        return -EINVAL;
    }
    return 0;
}

int tp_cm_mode(const tp_cm_t *cm)
{
    return cm->mode;
}

int tp_cm_listen(tp_cm_t *cm, const char *ip, tp_cm_addrs_t *out)
{
    int rc = tp_tcp.listen(ip, &cm->ls[0], out->tcp, sizeof(out->tcp));

    if (rc == 0)
        snprintf(cm->tcp_addr, sizeof(cm->tcp_addr), "%s", out->tcp);
    out->rdma[0] = '\0';
    if (rc == 0 && cm->mode != TP_CM_TCP &&
        tp_rdma.listen(ip, &cm->ls[1], out->rdma, sizeof(out->rdma)) != 0) {
        cm->ls[1] = NULL;
        out->rdma[0] = '\0';
        if (cm->mode == TP_CM_RDMA)
            rc = -ENODEV;
    }
    if (rc == -ENODEV)
        ERR("NET", "HCCL_TRANSPORT=rdma, but no RDMA device carries %s", ip);
    else if (rc != 0)
        ERR("NET", "listening for data connections on %s failed (%d)", ip, rc);
    else
        INFO("NET", "data connections: tcp %s, rdma %s", out->tcp,
             out->rdma[0] != '\0' ? out->rdma : "none (no RDMA device for this address)");
    return rc;
}

int tp_cm_listen_also(tp_cm_t *cm, const char *addr)
{
    char bound[TP_ADDR_MAX];
    int k, rc;

    if (cm->ls[0] == NULL)
        return -ENOTCONN;
    if (strcmp(cm->tcp_addr, addr) == 0)
        return 0;
    for (k = 0; k < TP_CM_ALSO_MAX && cm->ls[2 + k] != NULL; k++)
        if (strcmp(cm->also[k], addr) == 0)
            return 0;
    if (k == TP_CM_ALSO_MAX)
        return -ENOSPC;
    if ((rc = tp_tcp_listen_at(addr, &cm->ls[2 + k], bound, sizeof(bound))) != 0) {
        WARN("NET",
             "cannot listen on %s again, this daemon's data address before its restart (%d): a "
             "later restart of another daemon of its comms cannot reach it",
             addr, rc);
        cm->ls[2 + k] = NULL;
        return rc;
    }
    snprintf(cm->also[k], sizeof(cm->also[k]), "%s", addr);
    INFO("NET", "data connections also on %s, this daemon's address before its restart", addr);
    return 0;
}

static cm_job_t *job_find(const tp_cm_t *cm, const uint8_t *job_id)
{
    for (cm_job_t *j = cm->jobs; j != NULL; j = j->next)
        if (memcmp(j->job_id, job_id, AUTH_JOB_BYTES) == 0)
            return j;
    return NULL;
}

static cm_job_t *job_get(tp_cm_t *cm, const uint8_t *job_id, const uint8_t *key)
{
    cm_job_t *j = job_find(cm, job_id);

    if (j == NULL) {
        if ((j = calloc(1, sizeof(*j))) == NULL)
            return NULL;
        memcpy(j->job_id, job_id, AUTH_JOB_BYTES);
        j->next = cm->jobs;
        cm->jobs = j;
    }
    memcpy(j->key, key, AUTH_KEY_BYTES);
    j->since_ns = now_ns();
    return j;
}

int tp_cm_job_expect(tp_cm_t *cm, const uint8_t job_id[AUTH_JOB_BYTES],
                     const uint8_t key[AUTH_KEY_BYTES])
{
    return job_get(cm, job_id, key) != NULL ? 0 : -ENOMEM;
}

int tp_cm_job_claim(tp_cm_t *cm, const uint8_t job_id[AUTH_JOB_BYTES],
                    const uint8_t key[AUTH_KEY_BYTES])
{
    cm_job_t *j = job_get(cm, job_id, key);

    if (j == NULL)
        return -ENOMEM;
    j->claims++;
    return 0;
}

void tp_cm_job_release(tp_cm_t *cm, const uint8_t job_id[AUTH_JOB_BYTES])
{
    for (cm_job_t **pp = &cm->jobs; *pp != NULL; pp = &(*pp)->next) {
        cm_job_t *j = *pp;
        if (memcmp(j->job_id, job_id, AUTH_JOB_BYTES) != 0)
            continue;
        if (j->claims > 0 && --j->claims == 0) {
            *pp = j->next;
            free(j);
        }
        return;
    }
}

/* Forgets expectations that went stale. */
static void jobs_prune(tp_cm_t *cm)
{
    uint64_t now = now_ns();

    for (cm_job_t **pp = &cm->jobs; *pp != NULL;) {
        cm_job_t *j = *pp;
        if (j->claims == 0 && now - j->since_ns > EXPECT_NS) {
            *pp = j->next;
            free(j);
        } else {
            pp = &j->next;
        }
    }
}

/* The handshake asks for the key of the job the connecting daemon names. */
static int lookup(void *ctx, const uint8_t job_id[AUTH_JOB_BYTES], uint8_t key_out[AUTH_KEY_BYTES])
{
    cm_conn_t *a = ctx;
    const cm_job_t *j = job_find(a->cm, job_id);

    if (j == NULL)
        return -ENOENT;
    memcpy(a->job_id, job_id, AUTH_JOB_BYTES);
    memcpy(key_out, j->key, AUTH_KEY_BYTES);
    a->known = 1;
    return 0;
}

/* A stripe (k of n) of a connection from node peer finished its handshake (tp_stripe.h): it
 * joins the striped connection gathering that node's stripes for its job, a new entry right
 * after a if this is the first. a itself is done with (its caller frees it). */
static void stripe_gather(tp_cm_t *cm, cm_conn_t *a, uint32_t peer, unsigned k, unsigned n)
{
    cm_conn_t *b;

    for (b = cm->accepting; b != NULL; b = b->next)
        if (b != a && tp_stripe_gathering(b->conn) == peer &&
            memcmp(b->job_id, a->job_id, AUTH_JOB_BYTES) == 0)
            break;
    if (b == NULL) {
        tp_conn_t *s = peer != TP_NODE_UNKNOWN ? tp_stripe_new(n, peer) : NULL;
        if (s == NULL || (b = calloc(1, sizeof(*b))) == NULL) {
            WARN("NET", "striped data connection from node %u: no memory; closed", peer);
            tp_close(s);
            tp_close(a->conn);
            return;
        }
        *b = (cm_conn_t){.cm = cm, .conn = s, .known = 1, .since_ns = a->since_ns};
        memcpy(b->job_id, a->job_id, AUTH_JOB_BYTES);
        b->next = a->next;
        a->next = b;
    }
    if (tp_stripe_add(b->conn, k, n, a->conn) != 0)
        WARN("NET",
             "data connection from node %u announces stripe %u of %u, which does not fit "
             "the others; closed",
             peer, k, n);
}

static void accept_new(tp_cm_t *cm)
{
    cm_conn_t *a;
    tp_conn_t *conn;

    for (int k = 0; k < CM_LISTENERS; k++)
        while (cm->ls[k] != NULL && (a = calloc(1, sizeof(*a))) != NULL) {
            a->cm = cm;
            if (tp_accept(cm->ls[k], lookup, a, &conn) != 0) {
                free(a);
                break;
            }
            a->conn = conn;
            a->since_ns = now_ns();
            a->next = cm->accepting;
            cm->accepting = a;
        }
}

int tp_cm_progress(tp_cm_t *cm)
{
    uint64_t now = now_ns();
    cm_conn_t *a;
    int n = 0;

    if (cm->ls[0] != NULL && (cm->accept_due || now >= cm->next_accept_ns)) {
        cm->accept_due = 0;
        cm->next_accept_ns = now + ACCEPT_EVERY_NS;
        jobs_prune(cm);
        accept_new(cm);
    }
    for (cm_conn_t **pp = &cm->accepting; (a = *pp) != NULL;) {
        int st = tp_conn_state(a->conn);
        const cm_job_t *j = st == 1 ? job_find(cm, a->job_id) : NULL;
        unsigned k, ns;
        uint32_t peer = tp_stripe_parse(tp_conn_peer_node(a->conn), &k, &ns);
        if (st == 1 && ns > 1) {
            stripe_gather(cm, a, peer, k, ns);
            *pp = a->next;
            free(a);
            continue;
        }
        /* Authenticated for a job whose comm is not created here yet: hold it a while. */
        if (st == 0 ||
            (st == 1 && j != NULL && j->claims == 0 && now_ns() - a->since_ns < EXPECT_NS)) {
            pp = &a->next;
            continue;
        }
        *pp = a->next;
        if (st == 1 && j != NULL && j->claims > 0) {
            a->next = NULL;
            *cm->ready_tail = a;
            cm->ready_tail = &a->next;
            n++;
            continue;
        }
        if (st == 1)
            WARN("NET", "data connection from node %u for no waiting comm; closed", peer);
        tp_close(a->conn);
        free(a);
    }
    return n;
}

tp_conn_t *tp_cm_take(tp_cm_t *cm, uint8_t job_id_out[AUTH_JOB_BYTES], uint32_t *node_out)
{
    cm_conn_t *a = cm->ready;
    unsigned k, n;

    if (a == NULL)
        return NULL;
    if ((cm->ready = a->next) == NULL)
        cm->ready_tail = &cm->ready;
    tp_conn_t *conn = a->conn;
    memcpy(job_id_out, a->job_id, AUTH_JOB_BYTES);
    *node_out = tp_stripe_parse(tp_conn_peer_node(conn), &k, &n);
    free(a);
    return conn;
}

int tp_cm_accepting(const tp_cm_t *cm)
{
    return cm->accepting != NULL || cm->ready != NULL;
}

int tp_cm_poll_fds(const tp_cm_t *cm, struct pollfd *pfd, int max)
{
    int n = 0;

    for (int k = 0; k < CM_LISTENERS; k++)
        if (cm->ls[k] != NULL && n < max)
            pfd[n++] = (struct pollfd){.fd = tp_listen_fd(cm->ls[k]), .events = POLLIN};
    for (const cm_conn_t *a = cm->accepting; a != NULL && n < max; a = a->next)
        n += tp_poll_fds(a->conn, pfd + n, max - n);
    return n;
}

void tp_cm_polled(tp_cm_t *cm, const struct pollfd *pfd, int n)
{
    int nl = 0;

    for (int k = 0; k < CM_LISTENERS; k++)
        nl += cm->ls[k] != NULL;

    for (int i = 0; i < nl && i < n; i++)
        if (pfd[i].revents != 0)
            cm->accept_due = 1;
}

/* The transports, in the order they are preferred, each with "can this pair connect". */
static int rdma_can(const tp_cm_t *cm, const tp_cm_addrs_t *me, const tp_cm_addrs_t *peer)
{
    return cm->mode != TP_CM_TCP && me->rdma[0] != '\0' && peer->rdma[0] != '\0';
}

/* RDMA connects from this node's own RDMA address: the route to a local address (two daemons
 * on one host) would otherwise stay inside the device that owns it. */
static int rdma_connect(const tp_cm_addrs_t *me, const tp_cm_addrs_t *peer, const uint8_t *job,
                        const uint8_t *key, uint32_t announce, tp_conn_t **c_p)
{
    char src[TP_ADDR_MAX], *colon;

    snprintf(src, sizeof(src), "%s", me->rdma);
    if ((colon = strrchr(src, ':')) != NULL)
        *colon = '\0';
    if (src[0] == '[' && colon != NULL && colon[-1] == ']') {
        colon[-1] = '\0';
        memmove(src, src + 1, strlen(src));
    }
    return tp_rdma_connect_from(src, peer->rdma, job, key, announce, c_p);
}

static int tcp_can(const tp_cm_t *cm, const tp_cm_addrs_t *me, const tp_cm_addrs_t *peer)
{
    (void)me;
    (void)peer;
    return cm->mode != TP_CM_RDMA;
}

static int tcp_connect(const tp_cm_addrs_t *me, const tp_cm_addrs_t *peer, const uint8_t *job,
                       const uint8_t *key, uint32_t announce, tp_conn_t **c_p)
{
    (void)me;
    return tp_tcp.connect(peer->tcp, job, key, announce, c_p);
}

static const struct cm_transport {
    const transport_ops_t *ops;
    int (*can_connect)(const tp_cm_t *cm, const tp_cm_addrs_t *me, const tp_cm_addrs_t *peer);
    int (*connect)(const tp_cm_addrs_t *me, const tp_cm_addrs_t *peer, const uint8_t *job,
                   const uint8_t *key, uint32_t announce, tp_conn_t **c_p);
} cm_transports[] = {
    {&tp_rdma, rdma_can, rdma_connect},
    {&tp_tcp, tcp_can, tcp_connect},
};

static const struct cm_transport *choose(const tp_cm_t *cm, const tp_cm_addrs_t *me,
                                         const tp_cm_addrs_t *peer)
{
    for (size_t i = 0; i < sizeof(cm_transports) / sizeof(cm_transports[0]); i++)
        if (cm_transports[i].can_connect(cm, me, peer))
            return &cm_transports[i];
    return NULL;
}

const transport_ops_t *tp_cm_choose(const tp_cm_t *cm, const tp_cm_addrs_t *me,
                                    const tp_cm_addrs_t *peer)
{
    const struct cm_transport *t = choose(cm, me, peer);

    return t != NULL ? t->ops : NULL;
}

int tp_cm_connect(tp_cm_t *cm, const tp_cm_addrs_t *me, uint32_t my_node, const tp_cm_addrs_t *peer,
                  uint32_t peer_node, uint32_t nnodes, const uint8_t job_id[AUTH_JOB_BYTES],
                  const uint8_t key[AUTH_KEY_BYTES], tp_conn_t **c_p)
{
    const struct cm_transport *t = choose(cm, me, peer);
    tp_conn_t *subs[TP_STRIPE_MAX];
    uint32_t threshold;

    if (t == NULL)
        return -ENODEV;
    unsigned n = tp_stripe_count(t->ops->kind, &threshold);
    if (nnodes > TP_STRIPE_NODE_MAX)
        n = 1;
    if (t->ops->kind == TP_KIND_RDMA)
        INFO("NET", "data connection to node %u: rdma %s (from %s)", peer_node, peer->rdma,
             me->rdma);
    if (n <= 1)
        return t->connect(me, peer, job_id, key, my_node, c_p) != 0 ? -ECONNREFUSED : 0;
    INFO("NET", "data connection to node %u: %u stripes, at least %u B of a message each",
         peer_node, n, threshold);
    for (unsigned k = 0; k < n; k++)
        if (t->connect(me, peer, job_id, key, tp_stripe_announce(my_node, k, n), &subs[k]) != 0) {
            while (k > 0)
                tp_close(subs[--k]);
            return -ECONNREFUSED;
        }
    return tp_stripe_wrap(subs, n, threshold, c_p);
}
