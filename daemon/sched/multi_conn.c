/*
 * Data connections of communicators that span daemons: node j connects to every node i < j
 * and announces its index; node i accepts on the engine's listener, learns the job from the
 * handshake and j from the announcement. A comm runs collectives once all its connections
 * are ready.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "sched/engine_int.h"

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

static eng_comm_t *comm_by_job(engine_t *eng, const uint8_t *job_id)
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
    eng_comm_t *c = comm_by_job(a->eng, job_id);
    const uint8_t *key = c != NULL ? c->multi->key : expected_key(a->eng, job_id);

    if (key == NULL)
        return -ENOENT;
    memcpy(a->job_id, job_id, AUTH_JOB_BYTES);
    memcpy(key_out, key, AUTH_KEY_BYTES);
    a->known = 1;
    return 0;
}

int engine_listen(engine_t *eng, const char *ip, char *addr_out, size_t cap)
{
    int rc;

    pthread_mutex_lock(&eng->lock);
    rc = tp_tcp.listen(ip, &eng->tpl, addr_out, cap);
    pthread_mutex_unlock(&eng->lock);
    if (rc != 0)
        ERR("NET", "listening for data connections on %s failed (%d)", ip, rc);
    return rc;
}

/* Marks a data connection with its comm's class (DSCP on TCP). */
static void multi_mark(const eng_multi_t *mu, tp_conn_t *conn)
{
    if (mu->qos_class >= 0 && mu->qos_class < mu->qos->ncls &&
        mu->qos->cls[mu->qos_class].dscp >= 0)
        tp_tcp.set_dscp(conn, mu->qos->cls[mu->qos_class].dscp);
}

/* Takes new connections and hands those whose handshake finished to their comm. */
void multi_accept(engine_t *eng)
{
    eng_accept_t *a;
    tp_conn_t *conn;

    expects_prune(eng);
    while (eng->tpl != NULL && (a = calloc(1, sizeof(*a))) != NULL) {
        a->eng = eng;
        if (tp_tcp.accept(eng->tpl, lookup, a, &conn) != 0) {
            free(a);
            break;
        }
        a->conn = conn;
        a->since_ns = now_ns();
        a->next = eng->accepting;
        eng->accepting = a;
    }
    for (eng_accept_t **pp = &eng->accepting; (a = *pp) != NULL;) {
        int st = tp_tcp.conn_state(a->conn);
        eng_comm_t *c = st == 1 ? comm_by_job(eng, a->job_id) : NULL;
        uint32_t peer = tp_tcp.conn_peer_node(a->conn);
        /* Authenticated for a job whose comm is not created here yet: hold it a while. */
        if (st == 0 || (st == 1 && c == NULL && now_ns() - a->since_ns < EXPECT_NS &&
                        expected_key(eng, a->job_id) != NULL)) {
            pp = &a->next;
            continue;
        }
        if (c != NULL && peer < c->multi->nnodes && peer > c->multi->me &&
            c->multi->conns[peer] == NULL) {
            c->multi->conns[peer] = a->conn;
            multi_mark(c->multi, a->conn);
            c->multi->nready++;
        } else {
            if (st == 1)
                WARN("NET", "data connection from node %u for no waiting comm; closed", peer);
            tp_tcp.close(a->conn);
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
        if (mu->conns[i] == NULL || (mu->ready_mask & (1ull << (i % 64))))
            continue;
        int st = tp_tcp.conn_state(mu->conns[i]);
        if (st == 1) {
            mu->ready_mask |= 1ull << (i % 64);
            mu->nready++;
            n++;
        } else if (st < 0) {
            comm_break(eng, c, "a data connection to another daemon failed");
            return 1;
        }
    }
    return n;
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
        tp_tcp.close(a->conn);
        free(a);
    }
    if (eng->tpl != NULL)
        tp_tcp.listen_close(eng->tpl);
    eng->tpl = NULL;
}

int multi_busy(engine_t *eng)
{
    if (eng->accepting != NULL)
        return 1;
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        if (c->multi != NULL && !c->broken &&
            (c->multi->busy || c->multi->flights != NULL || !c->multi->probed ||
             c->multi->nready < c->multi->nnodes - 1))
            return 1;
    return 0;
}

int multi_poll_fds(engine_t *eng, struct pollfd *pfd, int max)
{
    int n = 0;

    if (eng->tpl != NULL && n < max)
        pfd[n++] = (struct pollfd){.fd = tp_tcp.listen_fd(eng->tpl), .events = POLLIN};
    for (eng_accept_t *a = eng->accepting; a != NULL && n < max; a = a->next)
        n += tp_tcp.poll_fds(a->conn, pfd + n, max - n);
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
        for (uint32_t i = 0; i < mu->nnodes && n < max; i++)
            if (mu->conns[i] != NULL && tp_tcp.conn_state(mu->conns[i]) == 0)
                n += tp_tcp.poll_fds(mu->conns[i], pfd + n, max - n);
    }
    return n;
}

void multi_free(eng_comm_t *c)
{
    eng_multi_t *mu = c->multi;

    if (mu->busy)
        l1_free(mu->run);
    sched_free(&mu->sched);
    multi_p2p_fail(NULL, c, HCCL_E_REMOTE);
    multi_probe_free(mu);
    free(mu->out);
    free(mu->in);
    for (uint32_t i = 0; mu->conns != NULL && i < mu->nnodes; i++)
        if (mu->conns[i] != NULL)
            tp_tcp.close(mu->conns[i]);
    free(mu->conns);
    free(mu->addrs);
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
    mu->L = sp->local;
    mu->log_ops = sp->log_ops;
    mu->qos_class = sp->qos_class;
    for (int k = 0; k < DESC_KIND_MAX; k++)
        mu->forced[k] = sp->level1 != NULL ? sp->level1[k] : -1;
    for (int k = 0; k < DESC_KIND_MAX; k++)
        for (int b = 0; b < 64; b++)
            mu->picks[k][b].algo = -1;
    /* Until links are measured at init: TCP-like defaults (25 us, 10 Gbit/s, 5 us per
     * message, one NIC per node). */
    mu->lc = (link_cost_t){.alpha_us = 25,
                           .beta_us_per_byte = 1.0 / 1250,
                           .gamma_us_per_byte = 1.0 / 10000,
                           .overhead_us = 5,
                           .shared_nic = 1};
    memcpy(mu->job_id, sp->job_id, AUTH_JOB_BYTES);
    memcpy(mu->key, sp->key, AUTH_KEY_BYTES);
    mu->conns = calloc(sp->nnodes, sizeof(*mu->conns));
    mu->addrs = calloc(sp->nnodes, sizeof(*mu->addrs));
    if (mu->conns == NULL || mu->addrs == NULL) {
        free(mu->conns);
        free(mu->addrs);
        free(mu);
        return NULL;
    }
    for (uint32_t i = 0; i < sp->nnodes; i++)
        snprintf(mu->addrs[i], sizeof(mu->addrs[i]), "%s", sp->addrs[i]);
    return mu;
}

int engine_comm_create_multi(engine_t *eng, const engine_multi_spec_t *sp)
{
    int rc = engine_comm_create(eng, sp->comm_id, sp->local, sp->members);
    eng_multi_t *mu;

    if (rc != 0)
        return rc;
    if ((mu = multi_new(sp)) == NULL)
        return -ENOMEM;
    mu->qos = &eng->qos;
    pthread_mutex_lock(&eng->lock);
    eng_comm_t *c = comm_find(eng, sp->comm_id);
    c->multi = mu;
    c->nglobal = sp->nnodes * sp->local;
    c->rank0 = sp->me * sp->local;
    for (uint32_t i = 0; i < sp->me; i++) {
        if (tp_tcp.connect(mu->addrs[i], mu->job_id, mu->key, sp->me, &mu->conns[i]) != 0) {
            comm_break(eng, c, "cannot open a data connection to another daemon");
            break;
        }
        multi_mark(mu, mu->conns[i]);
    }
    pthread_mutex_unlock(&eng->lock);
    engine_kick(eng);
    return 0;
}
