/*
 * Data connections of communicators that span daemons: node j connects to every node i < j
 * and announces its index; node i accepts on the engine's listener, learns the job from the
 * handshake and j from the announcement. A comm runs collectives once all its connections
 * are ready.
 *
 * A child of HcclCommSplit takes its parent's connection instead wherever the root daemon
 * says both ends hold one (engine_multi_spec_t.share): no handshake, no second socket. Such
 * a connection is an eng_link counted by its users, so parent and child may go in any order;
 * tags keep their messages apart (multi_tag.h). The parent's connection already proved the
 * parent's key, from which the child's is derived: whoever may use one may use the other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "sched/engine_int.h"
#include "sched/multi_tag.h"
#include "transport/rdma.h"
#include "transport/tp_stripe.h"

_Static_assert(ENGINE_ADDR_MAX == TP_ADDR_MAX, "data addresses have one size");

typedef struct eng_accept {
    engine_t *eng;
    tp_conn_t *conn;
    uint8_t job_id[AUTH_JOB_BYTES];
    int known;
    uint64_t since_ns;
    struct eng_accept *next;
} eng_accept_t;

/* A job whose comm is about to be created here. */
typedef struct eng_expect {
    uint8_t job_id[AUTH_JOB_BYTES], key[AUTH_KEY_BYTES];
    uint64_t since_ns;
    struct eng_expect *next;
} eng_expect_t;

#define EXPECT_NS (60ull * 1000000000ull)

int engine_job_expect(engine_t *eng, const uint8_t *job_id, const uint8_t *key)
{
    eng_expect_t *e = calloc(1, sizeof(*e));

    if (e == NULL)
        return -ENOMEM;
    memcpy(e->job_id, job_id, AUTH_JOB_BYTES);
    memcpy(e->key, key, AUTH_KEY_BYTES);
    e->since_ns = now_ns();
    pthread_mutex_lock(&eng->lock);
    e->next = eng->expects;
    eng->expects = e;
    pthread_mutex_unlock(&eng->lock);
    return 0;
}

/* Forgets expectations that came true or went stale. */
static void expects_prune(engine_t *eng)
{
    uint64_t now = now_ns();

    for (eng_expect_t **pp = &eng->expects; *pp != NULL;) {
        eng_expect_t *e = *pp;
        if (now - e->since_ns > EXPECT_NS) {
            *pp = e->next;
            free(e);
        } else {
            pp = &e->next;
        }
    }
}

static const uint8_t *expected_key(engine_t *eng, const uint8_t *job_id)
{
    for (eng_expect_t *e = eng->expects; e != NULL; e = e->next)
        if (memcmp(e->job_id, job_id, AUTH_JOB_BYTES) == 0)
            return e->key;
    return NULL;
}

static eng_comm_t *eng_comm_by_job(engine_t *eng, const uint8_t *job_id)
{
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        if (c->multi != NULL && memcmp(c->multi->job_id, job_id, AUTH_JOB_BYTES) == 0)
            return c;
    return NULL;
}

/* The handshake asks for the key of the job the connecting daemon names. */
static int lookup(void *ctx, const uint8_t job_id[AUTH_JOB_BYTES], uint8_t key_out[AUTH_KEY_BYTES])
{
    eng_accept_t *a = ctx;
    eng_comm_t *c = eng_comm_by_job(a->eng, job_id);
    const uint8_t *key = c != NULL ? c->multi->key : expected_key(a->eng, job_id);

    if (key == NULL)
        return -ENOENT;
    memcpy(a->job_id, job_id, AUTH_JOB_BYTES);
    memcpy(key_out, key, AUTH_KEY_BYTES);
    a->known = 1;
    return 0;
}

/* HCCL_TRANSPORT: auto (RDMA wherever both nodes have a device), tcp or rdma. */
static int transport_mode(void)
{
    const char *s = getenv("HCCL_TRANSPORT");

    if (s == NULL || *s == '\0' || strcasecmp(s, "auto") == 0)
        return ENGINE_TP_AUTO;
    if (strcasecmp(s, "tcp") == 0)
        return ENGINE_TP_TCP;
    if (strcasecmp(s, "rdma") == 0 || strcasecmp(s, "roce") == 0)
        return ENGINE_TP_RDMA;
    return -EINVAL;
}

int engine_listen(engine_t *eng, const char *ip, char *addr_out, char *rdma_out)
{
    int mode = transport_mode(), rc;

    rdma_out[0] = '\0';
    if (mode < 0) {
        ERR("NET", "HCCL_TRANSPORT=%s: want tcp, rdma or auto", getenv("HCCL_TRANSPORT"));
        return mode;
    }
    pthread_mutex_lock(&eng->lock);
    eng->transport = mode;
    rc = tp_tcp.listen(ip, &eng->tpl, addr_out, ENGINE_ADDR_MAX);
    if (rc == 0 && mode != ENGINE_TP_TCP &&
        tp_rdma.listen(ip, &eng->tpl_rdma, rdma_out, ENGINE_ADDR_MAX) != 0) {
        eng->tpl_rdma = NULL;
        rdma_out[0] = '\0';
        if (mode == ENGINE_TP_RDMA)
            rc = -ENODEV;
    }
    pthread_mutex_unlock(&eng->lock);
    if (rc == -ENODEV)
        ERR("NET", "HCCL_TRANSPORT=rdma, but no RDMA device carries %s", ip);
    else if (rc != 0)
        ERR("NET", "listening for data connections on %s failed (%d)", ip, rc);
    else
        INFO("NET", "data connections: tcp %s, rdma %s", addr_out,
             rdma_out[0] != '\0' ? rdma_out : "none (no RDMA device for this address)");
    return rc;
}

/* Marks a data connection with its comm's class (DSCP on TCP). Only a comm's own connections:
 * one it shares keeps its parent's marking. A split's children are the same tenant's job and
 * class alike; re-marking would change the class of the parent's traffic under it. */
static void multi_mark(const eng_multi_t *mu, tp_conn_t *conn)
{
    if (mu->qos_class >= 0 && mu->qos_class < mu->qos->ncls &&
        mu->qos->cls[mu->qos_class].dscp >= 0)
        tp_set_dscp(conn, mu->qos->cls[mu->qos_class].dscp);
}

/* A connection of one comm so far; counted among the daemon's open ones. NULL (and the
 * connection closed) if out of memory. */
static eng_link_t *link_new(engine_t *eng, tp_conn_t *conn)
{
    eng_link_t *l = calloc(1, sizeof(*l));

    if (l == NULL) {
        tp_close(conn);
        return NULL;
    }
    l->conn = conn;
    l->refs = 1;
    eng->st.data_conns++;
    return l;
}

/* One comm less uses l; the last one closes it. */
static void link_put(engine_t *eng, eng_link_t *l)
{
    if (l == NULL || --l->refs > 0)
        return;
    tp_close(l->conn);
    free(l);
    eng->st.data_conns--;
}

/* How long a shared connection drops the late messages of a comm that is gone. */
#define FORGET_NS (30 * 1000000000ull)

/* How often the listener is tried without poll() having said so (a busy engine may not
 * sleep for a long time; a connection then waits at most this long). */
#define ACCEPT_EVERY_NS 20000000ull

/* A stripe (k of n) of a connection from node peer finished its handshake (tp_stripe.h): it
 * joins the striped connection gathering that node's stripes for its job, a new entry right
 * after a if this is the first. a itself is done with (its caller frees it). */
static void stripe_gather(engine_t *eng, eng_accept_t *a, uint32_t peer, unsigned k, unsigned n)
{
    eng_accept_t *b;

    for (b = eng->accepting; b != NULL; b = b->next)
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
        *b = (eng_accept_t){.eng = eng, .conn = s, .known = 1, .since_ns = a->since_ns};
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

/* Takes new connections and hands those whose handshake finished to their comm. */
void multi_accept(engine_t *eng)
{
    eng_accept_t *a;
    tp_conn_t *conn;
    uint64_t now = now_ns();
    int try = eng->tpl != NULL && (eng->accept_due || now >= eng->next_accept_ns);
    tp_listener_t *ls[2] = {eng->tpl, eng->tpl_rdma};

    if (try) {
        eng->accept_due = 0;
        eng->next_accept_ns = now + ACCEPT_EVERY_NS;
        expects_prune(eng);
    }
    for (int k = 0; try && k < 2; k++)
        while (ls[k] != NULL && (a = calloc(1, sizeof(*a))) != NULL) {
            a->eng = eng;
            if (tp_accept(ls[k], lookup, a, &conn) != 0) {
                free(a);
                break;
            }
            a->conn = conn;
            a->since_ns = now_ns();
            a->next = eng->accepting;
            eng->accepting = a;
        }
    for (eng_accept_t **pp = &eng->accepting; (a = *pp) != NULL;) {
        int st = tp_conn_state(a->conn);
        eng_comm_t *c = st == 1 ? eng_comm_by_job(eng, a->job_id) : NULL;
        unsigned k, n;
        uint32_t peer = tp_stripe_parse(tp_conn_peer_node(a->conn), &k, &n);
        if (st == 1 && n > 1) {
            stripe_gather(eng, a, peer, k, n);
            *pp = a->next;
            free(a);
            continue;
        }
        /* Authenticated for a job whose comm is not created here yet: hold it a while. */
        if (st == 0 || (st == 1 && c == NULL && now_ns() - a->since_ns < EXPECT_NS &&
                        expected_key(eng, a->job_id) != NULL)) {
            pp = &a->next;
            continue;
        }
        if (c != NULL && peer < c->multi->nnodes && peer > c->multi->me &&
            c->multi->links[peer] == NULL) {
            if ((c->multi->links[peer] = link_new(eng, a->conn)) == NULL) {
                eng_comm_break(eng, c, "no memory for a data connection");
            } else {
                c->multi->conns[peer] = a->conn;
                multi_mark(c->multi, a->conn);
                c->multi->nready++;
            }
        } else {
            if (st == 1)
                WARN("NET", "data connection from node %u for no waiting comm; closed", peer);
            tp_close(a->conn);
        }
        *pp = a->next;
        free(a);
    }
}

/* Advances our outgoing connections; counts the ones that became ready. */
int multi_conns_progress(engine_t *eng, eng_comm_t *c)
{
    eng_multi_t *mu = c->multi;
    int n = 0;

    for (uint32_t i = 0; i < mu->me && mu->nready < mu->nnodes - 1; i++) {
        if (mu->conns[i] == NULL || mu->conn_ready[i])
            continue;
        int st = tp_conn_state(mu->conns[i]);
        if (st == 1) {
            mu->conn_ready[i] = 1;
            mu->nready++;
            n++;
        } else if (st < 0) {
            eng_comm_break(eng, c, "a data connection to another daemon failed");
            return 1;
        }
    }
    return n;
}

int multi_ready_timeout(engine_t *eng, eng_comm_t *c)
{
    eng_multi_t *mu = c->multi;
    char why[256];
    uint32_t ready = 0;
    int at;

    if (mu->probed || now_ns() < mu->ready_by_ns)
        return 0;
    at = snprintf(why, sizeof(why), "HCCL_CONNECT_TIMEOUT: no data connection yet with node");
    for (uint32_t i = 0; i < mu->nnodes; i++) {
        int up = i == mu->me || (i < mu->me ? mu->conn_ready[i] : mu->links[i] != NULL);
        ready += up && i != mu->me;
        if (!up && at < (int)sizeof(why) - 40)
            at += snprintf(why + at, sizeof(why) - (size_t)at, " %u (%s)", i, mu->addrs[i]);
    }
    if (ready == mu->nnodes - 1)
        snprintf(why + at, sizeof(why) - (size_t)at,
                 " (all connected; their measurement did not end)");
    eng_comm_break_status(eng, c, HCCL_E_TIMEOUT, why);
    return 1;
}

void multi_listen_close(engine_t *eng)
{
    while (eng->expects != NULL) {
        eng_expect_t *e = eng->expects;
        eng->expects = e->next;
        free(e);
    }
    while (eng->accepting != NULL) {
        eng_accept_t *a = eng->accepting;
        eng->accepting = a->next;
        tp_close(a->conn);
        free(a);
    }
    tp_listen_close(eng->tpl);
    tp_listen_close(eng->tpl_rdma);
    eng->tpl = eng->tpl_rdma = NULL;
}

int multi_busy(engine_t *eng)
{
    if (eng->accepting != NULL)
        return 1;
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        if (c->multi != NULL &&
            (c->broken ? multi_abort_pending(c->multi)
                       : c->multi->busy || c->multi->flights != NULL || !c->multi->probed ||
                             c->multi->nready < c->multi->nnodes - 1))
            return 1;
    return 0;
}

int multi_poll_fds(engine_t *eng, struct pollfd *pfd, int max)
{
    int n = 0;

    /* The listeners first (TCP, then RDMA's if any): engine_sleep() looks there for
     * accept_due. */
    if (eng->tpl != NULL && n < max)
        pfd[n++] = (struct pollfd){.fd = tp_listen_fd(eng->tpl), .events = POLLIN};
    if (eng->tpl_rdma != NULL && n < max)
        pfd[n++] = (struct pollfd){.fd = tp_listen_fd(eng->tpl_rdma), .events = POLLIN};
    for (eng_accept_t *a = eng->accepting; a != NULL && n < max; a = a->next)
        n += tp_poll_fds(a->conn, pfd + n, max - n);
    for (eng_comm_t *c = eng->comms; c != NULL && n < max; c = c->next) {
        eng_multi_t *mu = c->multi;
        if (mu == NULL || c->broken)
            continue;
        n += multi_p2p_poll_fds(mu, pfd + n, max - n);
        n += multi_probe_poll_fds(mu, pfd + n, max - n);
        if (mu->busy) {
            n += l1_poll_fds(mu->run, pfd + n, max - n);
            continue;
        }
        /* Idle, it still listens for the other nodes' notices (multi_abort.c). */
        for (uint32_t i = 0; i < mu->nnodes && n < max; i++)
            if (mu->conns[i] != NULL && (mu->abort != NULL || tp_conn_state(mu->conns[i]) == 0))
                n += tp_poll_fds(mu->conns[i], pfd + n, max - n);
    }
    return n;
}

void multi_free(eng_comm_t *c)
{
    eng_multi_t *mu = c->multi;

    if (mu->busy)
        l1_free(mu->run);
    sched_free(&mu->sched);
    free(mu->fresh);
    multi_p2p_fail(NULL, c, HCCL_E_REMOTE);
    multi_probe_free(mu);
    multi_abort_free(mu);
    free(mu->out);
    free(mu->in);
    free(mu->scratch);
    for (uint32_t i = 0; mu->links != NULL && i < mu->nnodes; i++) {
        /* A connection that others keep: what the peers still send this comm goes. */
        if (mu->links[i] != NULL && mu->links[i]->refs > 1)
            tp_forget(mu->links[i]->conn, (uint64_t)TAG_COMM_MASK << 32, (uint64_t)mu->tag << 32,
                      FORGET_NS);
        link_put(mu->eng, mu->links[i]);
    }
    free(mu->links);
    free(mu->conn_ready);
    free(mu->conns);
    free(mu->addrs);
    free(mu->rdma_addrs);
    multi_place_free(&mu->pl);
    free(mu);
    c->multi = NULL;
}

static eng_multi_t *multi_new(const engine_multi_spec_t *sp)
{
    eng_multi_t *mu = calloc(1, sizeof(*mu));

    if (mu == NULL)
        return NULL;
    mu->nnodes = sp->nnodes;
    mu->me = sp->me;
    mu->log_ops = sp->log_ops;
    mu->qos_class = sp->qos_class;
    mu->ready_by_ns =
        now_ns() + (uint64_t)(sp->connect_timeout_s ? sp->connect_timeout_s : 120) * 1000000000ull;
    mu->deterministic = sp->deterministic;
    for (int k = 0; k < DESC_KIND_MAX; k++) {
        mu->forced[k] = sp->level1 != NULL ? sp->level1[k] : -1;
        mu->forced_src[k] = sp->level1_src != NULL ? sp->level1_src[k] : ALGO_SRC_HCCL_ALGO;
    }
    for (int k = 0; k < DESC_KIND_MAX; k++)
        for (int b = 0; b < 64; b++)
            mu->picks[k][b].algo = -1;
    mu->lc = algo_cost_fixed(); /* until links are measured at init */
    memcpy(mu->job_id, sp->job_id, AUTH_JOB_BYTES);
    memcpy(mu->key, sp->key, AUTH_KEY_BYTES);
    mu->tag = tag_comm(sp->job_id);
    mu->conns = calloc(sp->nnodes, sizeof(*mu->conns));
    mu->links = calloc(sp->nnodes, sizeof(*mu->links));
    mu->conn_ready = calloc(sp->nnodes, 1);
    mu->addrs = calloc(sp->nnodes, sizeof(*mu->addrs));
    mu->rdma_addrs = calloc(sp->nnodes, sizeof(*mu->rdma_addrs));
    if (mu->conns == NULL || mu->links == NULL || mu->conn_ready == NULL || mu->addrs == NULL ||
        mu->rdma_addrs == NULL ||
        multi_place_init(&mu->pl, sp->rank_node, sp->nglobal, sp->nnodes) != 0) {
        free(mu->conns);
        free(mu->links);
        free(mu->conn_ready);
        free(mu->addrs);
        free(mu->rdma_addrs);
        free(mu);
        return NULL;
    }
    for (uint32_t i = 0; i < sp->nnodes; i++) {
        snprintf(mu->addrs[i], sizeof(mu->addrs[i]), "%s", sp->addrs[i]);
        if (sp->rdma_addrs != NULL && sp->rdma_addrs[i] != NULL)
            snprintf(mu->rdma_addrs[i], sizeof(mu->rdma_addrs[i]), "%s", sp->rdma_addrs[i]);
    }
    return mu;
}

/* Whether a comm other than self on link l already uses these tag bits (multi_tag.h). */
static int tag_taken(engine_t *eng, const eng_comm_t *self, const eng_link_t *l, uint32_t tag)
{
    for (const eng_comm_t *c = eng->comms; c != NULL; c = c->next) {
        if (c == self || c->multi == NULL || c->multi->tag != tag)
            continue;
        for (uint32_t i = 0; i < c->multi->nnodes; i++)
            if (c->multi->links[i] == l)
                return 1;
    }
    return 0;
}

/* Takes the parent's connection to node i (the node at the same data address): ready, so it
 * counts at once, and measured with the parent. */
static int link_share(engine_t *eng, eng_comm_t *c, const eng_multi_t *pm, uint32_t i)
{
    eng_multi_t *mu = c->multi;

    for (uint32_t p = 0; p < pm->nnodes; p++) {
        eng_link_t *l = pm->links[p];
        if (p == pm->me || l == NULL || strcmp(pm->addrs[p], mu->addrs[i]) != 0)
            continue;
        if (tag_taken(eng, c, l, mu->tag)) {
            ERR("NET", "comm %u: its tag bits %#x are taken on the connection to node %u", c->id,
                mu->tag, i);
            return -EBUSY;
        }
        l->refs++;
        mu->links[i] = l;
        mu->conns[i] = l->conn;
        mu->nready++;
        mu->conn_ready[i] = 1;
        mu->nshared++;
        return 0;
    }
    ERR("NET", "comm %u: the parent has no connection to node %u (%s) to share", c->id, i,
        mu->addrs[i]);
    return -ENOENT;
}

/* A child's connections that its parent already has; the parent's link figures when that is
 * all of them (the same links: measuring them again would only cost time). */
static int links_inherit(engine_t *eng, eng_comm_t *c, const engine_multi_spec_t *sp)
{
    eng_multi_t *mu = c->multi;
    eng_comm_t *pc = sp->parent_comm_id != 0 ? eng_comm_find(eng, sp->parent_comm_id) : NULL;
    int rc;

    if (sp->share == NULL)
        return 0;
    for (uint32_t i = 0; i < mu->nnodes; i++) {
        if (i == mu->me || !sp->share[i])
            continue;
        if (pc == NULL || pc->multi == NULL) {
            ERR("NET", "comm %u: its parent comm %u is gone; no connection to share", c->id,
                sp->parent_comm_id);
            return -ENOENT;
        }
        if ((rc = link_share(eng, c, pc->multi, i)) != 0)
            return rc;
    }
    if (sp->inherit_links && mu->nshared == mu->nnodes - 1 && pc != NULL && pc->multi->probed) {
        mu->lc = pc->multi->lc;
        mu->probed = 1;
    }
    if (mu->nshared > 0)
        INFO("NET", "comm %u: %u of %u data connections shared with parent comm %u%s", c->id,
             mu->nshared, mu->nnodes - 1, sp->parent_comm_id,
             mu->probed ? ", and its link figures" : "");
    return 0;
}

/* Whether the pair (me, i) talks RDMA: both have a device (an RDMA data address) and
 * HCCL_TRANSPORT allows it. Both ends decide alike: each knows every node's addresses. */
static int pair_rdma(const engine_t *eng, const eng_multi_t *mu, uint32_t i)
{
    return eng->transport != ENGINE_TP_TCP && mu->rdma_addrs[mu->me][0] != '\0' &&
           mu->rdma_addrs[i][0] != '\0';
}

/* Opens one connection to lower node i over the pair's transport, announcing `announce` (our
 * index, or a stripe of it). RDMA connects from this node's own RDMA address: the route to a
 * local address (two daemons on one host) would otherwise stay inside the device that owns it. */
static int link_connect_one(engine_t *eng, eng_multi_t *mu, uint32_t i, uint32_t announce,
                            tp_conn_t **conn)
{
    char src[TP_ADDR_MAX], *colon;

    if (!pair_rdma(eng, mu, i))
        return tp_tcp.connect(mu->addrs[i], mu->job_id, mu->key, announce, conn);
    snprintf(src, sizeof(src), "%s", mu->rdma_addrs[mu->me]);
    if ((colon = strrchr(src, ':')) != NULL)
        *colon = '\0';
    if (src[0] == '[' && colon != NULL && colon[-1] == ']') {
        colon[-1] = '\0';
        memmove(src, src + 1, strlen(src));
    }
    return tp_rdma_connect_from(src, mu->rdma_addrs[i], mu->job_id, mu->key, announce, conn);
}

/* Opens the data connection to lower node i: striped over HCCL_RDMA_QPS_PER_CONNECTION QPs
 * or HCCLD_TCP_NSOCKS sockets where those ask for more than one (tp_stripe.h). */
static int link_connect(engine_t *eng, eng_multi_t *mu, uint32_t i, tp_conn_t **conn)
{
    tp_conn_t *subs[TP_STRIPE_MAX];
    uint32_t threshold;
    int rdma = pair_rdma(eng, mu, i);
    unsigned n = tp_stripe_count(rdma ? TP_KIND_RDMA : TP_KIND_TCP, &threshold);

    if (mu->nnodes > TP_STRIPE_NODE_MAX)
        n = 1;
    if (rdma)
        INFO("NET", "data connection to node %u: rdma %s (from %s)", i, mu->rdma_addrs[i],
             mu->rdma_addrs[mu->me]);
    if (n <= 1)
        return link_connect_one(eng, mu, i, mu->me, conn);
    INFO("NET", "data connection to node %u: %u stripes, at least %u B of a message each", i, n,
         threshold);
    for (unsigned k = 0; k < n; k++)
        if (link_connect_one(eng, mu, i, tp_stripe_announce(mu->me, k, n), &subs[k]) != 0) {
            while (k > 0)
                tp_close(subs[--k]);
            return -ECONNREFUSED;
        }
    return tp_stripe_wrap(subs, n, threshold, conn);
}

/* Connects to every lower node the child does not share a connection with. With
 * HCCL_TRANSPORT=rdma, a pair without RDMA on both ends is an error, not a quiet TCP. */
static int links_connect(engine_t *eng, eng_multi_t *mu)
{
    tp_conn_t *conn;

    for (uint32_t i = 0; i < mu->nnodes; i++)
        if (i != mu->me && eng->transport == ENGINE_TP_RDMA && !pair_rdma(eng, mu, i)) {
            ERR("NET", "HCCL_TRANSPORT=rdma, but node %u (%s) has no RDMA data address", i,
                mu->addrs[i]);
            return -ENODEV;
        }
    for (uint32_t i = 0; i < mu->me; i++) {
        if (mu->links[i] != NULL)
            continue;
        if (link_connect(eng, mu, i, &conn) != 0 || (mu->links[i] = link_new(eng, conn)) == NULL)
            return -ECONNREFUSED;
        mu->conns[i] = conn;
        multi_mark(mu, conn);
    }
    return 0;
}

/* The members are node me's ranks, in rank order. */
static int place_members(eng_comm_t *c, const engine_multi_spec_t *sp)
{
    uint32_t *global = malloc(sp->local * sizeof(*global)), n = 0;
    int rc;

    if (global == NULL)
        return -ENOMEM;
    for (uint32_t g = 0; g < sp->nglobal && n < sp->local; g++)
        if (sp->rank_node[g] == sp->me)
            global[n++] = g;
    rc = n == sp->local ? eng_comm_set_ranks(c, sp->nglobal, global) : -EINVAL;
    free(global);
    return rc;
}

int engine_comm_create_multi(engine_t *eng, const engine_multi_spec_t *sp)
{
    int rc = engine_comm_create(eng, sp->comm_id, sp->local, sp->members);
    eng_multi_t *mu;

    if (rc != 0)
        return rc;
    if ((mu = multi_new(sp)) == NULL) {
        eng_comm_unmake(eng, sp->comm_id);
        return -ENOMEM;
    }
    mu->qos = &eng->qos;
    mu->eng = eng;
    pthread_mutex_lock(&eng->lock);
    eng_comm_t *c = eng_comm_find(eng, sp->comm_id);
    c->multi = mu;
    if ((rc = place_members(c, sp)) != 0)
        eng_comm_break(eng, c, "its ranks' placement does not add up");
    else if ((rc = links_inherit(eng, c, sp)) != 0)
        eng_comm_break(eng, c, "cannot share its parent's data connections");
    else if (links_connect(eng, mu) != 0)
        eng_comm_break(eng, c, "cannot open a data connection to another daemon");
    pthread_mutex_unlock(&eng->lock);
    engine_kick(eng);
    return rc;
}

uint32_t engine_comm_links(engine_t *eng, uint32_t comm_id, char (*addrs)[ENGINE_ADDR_MAX],
                           uint32_t max)
{
    uint32_t n = 0;

    pthread_mutex_lock(&eng->lock);
    eng_comm_t *c = eng_comm_find(eng, comm_id);
    eng_multi_t *mu = c != NULL ? c->multi : NULL;
    /* Only a comm whose links are all up and measured: what a child takes from it then is
     * the same on every daemon (the split's allgather ran over it). */
    if (mu != NULL && !c->broken && mu->probed && mu->nready == mu->nnodes - 1)
        for (uint32_t i = 0; i < mu->nnodes && n < max; i++)
            if (i != mu->me && mu->conns[i] != NULL && tp_conn_state(mu->conns[i]) == 1)
                snprintf(addrs[n++], ENGINE_ADDR_MAX, "%s", mu->addrs[i]);
    pthread_mutex_unlock(&eng->lock);
    return n;
}
