/*
 * Measuring the links of a comm that spans daemons, once its data connections are up and
 * before its first collective: node 0 and node 1 exchange PROBE_PINGS small messages (latency:
 * half the median round trip) and PROBE_BULKS times a PROBE_BULK_BYTES message answered by a
 * small one (bandwidth, from the median); node 0 also times a reduction (gamma) and
 * PROBE_FANS fan-outs (a small message to every other node at once and their answers: what
 * each message beyond the first adds to the median timed fan-out is the per-message
 * overhead, which grows where daemons share processors or a link). The fan-out's answers name
 * each node's host, by its kernel's boot id, and its cores, so node 0 also knows how many
 * daemons of the comm share a host's cores: the cost model's host_load. Node 0 blends the
 * figures with its recent measurements of the same daemons (probe_hist.h: one probe on a busy
 * host scatters) and sends them to every node, so that all nodes feed the same numbers to the
 * cost model and pick the same algorithm for every op (they must: their schedules have to
 * match). Probe messages carry the comm's probe tags (tag.h). A child of a split whose
 * connections are all its parent's takes the parent's figures instead (link.c): they
 * describe the same links.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "reduce.h"
#include "span/probe_hist.h"
#include "span/span_int.h"
#include "span/tag.h"

#define PROBE_PINGS 7
#define PROBE_BULKS 3
/* The first fan-out is not timed: it waits for every node to be in the probe (a node answers
 * once all of its own connections are up, which may be after node 0's). */
#define PROBE_FANS 6
#define PROBE_BULK_BYTES (1u << 20)
_Static_assert(PROBE_PINGS <= PROBE_MEDIAN_MAX && PROBE_FANS <= PROBE_MEDIAN_MAX,
               "probe_median() takes at most PROBE_MEDIAN_MAX values");
#define PROBE_REDUCE_BYTES (256u << 10)

enum probe_phase { PH_PING, PH_BULK, PH_FAN, PH_RESULT };

struct span_probe {
    int phase;
    uint32_t k;        /* exchange of the phase in progress (ping, bulk, fan-out) */
    int answering;     /* node 1: its answer to the message just received is going out */
    tp_req_t *rs, *rr; /* the send and the receive in progress, NULL when done */
    uint64_t t0;       /* when the exchange in progress started */
    double rtt_us[PROBE_PINGS], bulk_us[PROBE_BULKS], fan_us[PROBE_FANS];
    /* alpha_us, beta_us_per_byte, gamma_us_per_byte, overhead_us, host_load */
    double figures[5];
    uint64_t host;   /* this node's host (engine_set_host; 0: unknown) */
    uint64_t *hosts; /* node 0: every node's, by node */
    uint8_t small_out[8], small_in[8];
    uint8_t *bulk;
    uint32_t sent; /* node 0: results handed to the transport */
    int fan_posted;
    uint32_t earlier; /* node 0: earlier measurements of these daemons blended in (probe_hist.h) */
    tp_req_t **result_reqs; /* node 0: one per other node (the fan-out's pings, the figures) */
    tp_req_t **fan_reqs;    /* node 0: the fan-out's answers */
};

/* Tests a request in place: 1 done (or none), 0 pending, <0 failed. */
static int req_done(tp_req_t **r)
{
    int done = 0, rc;

    if (*r == NULL)
        return 1;
    rc = tp_test(*r, &done);
    if (done)
        *r = NULL;
    return rc < 0 ? rc : done;
}

static void req_cancel(tp_req_t **r)
{
    if (*r != NULL)
        tp_cancel(*r);
    *r = NULL;
}

static int both_done(struct span_probe *p)
{
    int a = req_done(&p->rs), b = req_done(&p->rr);

    return a < 0 ? a : b < 0 ? b : a && b;
}

/* How many exchanges each phase has (each side counts them alike). */
static uint32_t phase_count(int phase)
{
    return phase == PH_PING ? PROBE_PINGS : phase == PH_BULK ? PROBE_BULKS : PROBE_FANS;
}

/* The most daemons of the comm per core on any one host (hosts unknown, 0, count as their
 * own). */
static double host_load(const uint64_t *hosts, uint32_t n)
{
    double most = 0;

    for (uint32_t i = 0; i < n; i++) {
        uint32_t same = 0;
        for (uint32_t j = 0; j < n; j++)
            same += j == i || (hosts[i] >> 16 != 0 && hosts[j] >> 16 == hosts[i] >> 16);
        double load = (double)same / (double)((hosts[i] & 0xffff) ? hosts[i] & 0xffff : 1);
        most = load > most ? load : most;
    }
    return most;
}

/* Node 0 turns its timings into the figures. */
static void probe_compute(struct span_probe *p)
{
    double rtt = probe_median(p->rtt_us, PROBE_PINGS),
           bulk_us = probe_median(p->bulk_us, PROBE_BULKS);
    float *v = (float *)p->bulk;
    const void *src[2] = {v, v + PROBE_REDUCE_BYTES / 4};
    uint64_t t0;

    p->figures[0] = rtt / 2;
    p->figures[1] = probe_beta(bulk_us, p->rtt_us, PROBE_PINGS, PROBE_BULK_BYTES);
    memset(p->bulk, 0, 2 * PROBE_REDUCE_BYTES);
    t0 = now_ns();
    reduce_n(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, v, src, 2, PROBE_REDUCE_BYTES / 4);
    p->figures[2] = (double)(now_ns() - t0) / 1000.0 / PROBE_REDUCE_BYTES;
}

static int post_pair(tp_conn_t *c, struct span_probe *p, const void *out, size_t out_len,
                     uint64_t out_tag, void *in, size_t in_len, uint64_t in_tag)
{
    int rc = 0;

    p->t0 = now_ns();
    if (out != NULL)
        rc = tp_isend(c, out, out_len, NULL, out_tag, &p->rs);
    if (rc == 0 && in != NULL)
        rc = tp_irecv(c, in, in_len, NULL, in_tag, &p->rr);
    return rc;
}

/* Node 0: a small message to every other node at once, then all their answers, PROBE_FANS
 * times. 1 done, 0 pending, <0 failed. */
static int fan_out(span_comm_t *mu, struct span_probe *p)
{
    uint32_t n = mu->nnodes;
    int rc;

    while (p->k < PROBE_FANS) {
        if (!p->fan_posted) {
            p->t0 = now_ns();
            for (uint32_t j = 1; j < n; j++) {
                if ((rc = tp_isend(mu->conns[j], p->small_out, 8, NULL, tag_probe(mu->tag, 0x300),
                                   &p->result_reqs[j - 1])) != 0 ||
                    (rc = tp_irecv(mu->conns[j], &p->hosts[j], sizeof(p->hosts[j]), NULL,
                                   tag_probe(mu->tag, 0x301), &p->fan_reqs[j - 1])) != 0)
                    return rc;
            }
            p->fan_posted = 1;
        }
        for (uint32_t j = 0; j + 1 < n; j++)
            if ((rc = req_done(&p->result_reqs[j])) <= 0 || (rc = req_done(&p->fan_reqs[j])) <= 0)
                return rc;
        p->fan_us[p->k++] = (double)(now_ns() - p->t0) / 1000.0;
        p->fan_posted = 0;
    }
    /* 2(n-1) messages where a ping-pong has 2: the rest is what each one costs. */
    double fan = probe_median(p->fan_us + 1, PROBE_FANS - 1), rtt = 2 * p->figures[0];
    p->figures[3] = n > 2 && fan > rtt ? (fan - rtt) / (2.0 * (n - 2)) : mu->lc.overhead_us;
    p->hosts[0] = p->host;
    p->figures[4] = host_load(p->hosts, n);
    p->earlier = probe_hist_blend(&mu->env->probe_hist,
                                  probe_hist_key(mu->node_addrs[0].tcp, n, sizeof(tp_cm_addrs_t)),
                                  now_ns(), p->figures);
    p->phase = PH_RESULT;
    return 1;
}

/* Node 0: ping-pongs, the bulk exchange, the fan-out, then the figures to everyone. */
static int step_node0(span_comm_t *mu, struct span_probe *p)
{
    tp_conn_t *c1 = mu->conns[1];
    int rc;

    for (;;) {
        if (p->rs == NULL && p->rr == NULL) {
            /* Start the next exchange. */
            if (p->phase == PH_PING)
                rc = post_pair(c1, p, p->small_out, 8, tag_probe(mu->tag, p->k), p->small_in, 8,
                               tag_probe(mu->tag, 0x80 | p->k));
            else if (p->phase == PH_BULK)
                rc = post_pair(c1, p, p->bulk, PROBE_BULK_BYTES, tag_probe(mu->tag, 0x100),
                               p->small_in, 8, tag_probe(mu->tag, 0x101));
            else
                break;
            if (rc != 0)
                return rc;
        }
        if ((rc = both_done(p)) <= 0)
            return rc;
        double us = (double)(now_ns() - p->t0) / 1000.0;
        if (p->phase == PH_PING)
            p->rtt_us[p->k] = us;
        else
            p->bulk_us[p->k] = us;
        if (++p->k == phase_count(p->phase)) {
            if (p->phase == PH_BULK)
                probe_compute(p);
            p->phase++;
            p->k = 0;
        }
    }
    if (p->phase == PH_FAN && (rc = fan_out(mu, p)) <= 0)
        return rc;
    /* The figures go to every other node; done when all are sent. */
    for (; p->sent < mu->nnodes - 1; p->sent++) {
        rc = tp_isend(mu->conns[p->sent + 1], p->figures, sizeof(p->figures), NULL,
                      tag_probe(mu->tag, 0x200), &p->result_reqs[p->sent]);
        if (rc != 0)
            return rc;
    }
    for (uint32_t j = 0; j < mu->nnodes - 1; j++)
        if ((rc = req_done(&p->result_reqs[j])) <= 0)
            return rc;
    return 1;
}

/* Node 1 answers the pings and the bulk message; every other node only waits for figures. */
static int step_other(span_comm_t *mu, struct span_probe *p)
{
    tp_conn_t *c0 = mu->conns[0];
    int rc;

    if (mu->me != 1 && p->phase < PH_FAN)
        p->phase = PH_FAN;
    for (;;) {
        if (p->rs == NULL && p->rr == NULL) {
            if (p->answering) {
                /* The answer is out: next ping, or the bulk message, or the figures. */
                p->answering = 0;
                if (++p->k == phase_count(p->phase)) {
                    p->phase++;
                    p->k = 0;
                }
                continue;
            }
            if (p->phase == PH_PING)
                rc = post_pair(c0, p, NULL, 0, 0, p->small_in, 8, tag_probe(mu->tag, p->k));
            else if (p->phase == PH_BULK)
                rc = post_pair(c0, p, NULL, 0, 0, p->bulk, PROBE_BULK_BYTES,
                               tag_probe(mu->tag, 0x100));
            else if (p->phase == PH_FAN)
                rc = post_pair(c0, p, NULL, 0, 0, p->small_in, 8, tag_probe(mu->tag, 0x300));
            else
                rc = post_pair(c0, p, NULL, 0, 0, p->figures, sizeof(p->figures),
                               tag_probe(mu->tag, 0x200));
            if (rc != 0)
                return rc;
        }
        if ((rc = both_done(p)) <= 0)
            return rc;
        if (p->answering)
            continue;
        if (p->phase == PH_RESULT)
            return 1;
        /* A ping, the bulk message or the fan-out's message came in: answer it. */
        uint64_t tag = p->phase == PH_PING   ? tag_probe(mu->tag, 0x80 | p->k)
                       : p->phase == PH_BULK ? tag_probe(mu->tag, 0x101)
                                             : tag_probe(mu->tag, 0x301);
        /* The fan-out's answer says where this node runs. */
        const void *answer = p->phase == PH_FAN ? (const void *)&p->host : p->small_out;
        if ((rc = tp_isend(c0, answer, 8, NULL, tag, &p->rs)) != 0)
            return rc;
        p->answering = 1;
    }
}

static void probe_free(span_comm_t *mu)
{
    struct span_probe *p = mu->probe;

    if (p == NULL)
        return;
    /* Stopped midway (the comm broke or went): its connections may be shared and stay. */
    req_cancel(&p->rs);
    req_cancel(&p->rr);
    for (uint32_t j = 0; j < mu->nnodes; j++) {
        if (p->result_reqs != NULL)
            req_cancel(&p->result_reqs[j]);
        if (p->fan_reqs != NULL)
            req_cancel(&p->fan_reqs[j]);
    }
    free(p->bulk);
    free(p->result_reqs);
    free(p->fan_reqs);
    free(p->hosts);
    free(p);
    mu->probe = NULL;
}

int span_probe_progress(span_comm_t *mu)
{
    struct span_probe *p = mu->probe;
    int rc;

    if (mu->probed || mu->nready < mu->nnodes - 1)
        return 0;
    if (mu->nnodes < 2) {
        mu->probed = 1;
        return 1;
    }
    if (p == NULL) {
        p = mu->probe = calloc(1, sizeof(*p));
        if (p != NULL) {
            p->bulk = malloc(mu->me <= 1 ? PROBE_BULK_BYTES : 8);
            p->result_reqs = calloc(mu->nnodes, sizeof(*p->result_reqs));
            p->fan_reqs = calloc(mu->nnodes, sizeof(*p->fan_reqs));
            p->hosts = calloc(mu->nnodes, sizeof(*p->hosts));
            p->host = mu->env->host;
        }
        if (p == NULL || p->bulk == NULL || p->result_reqs == NULL || p->fan_reqs == NULL ||
            p->hosts == NULL) {
            return span_break(mu, HCCL_E_REMOTE, "no memory to measure the links");
        }
    }
    /* A ping or pong that arrives while its side still works on the previous one is kept by
     * the transport until asked for; tags keep them apart. */
    rc = mu->me == 0 ? step_node0(mu, p) : step_other(mu, p);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        probe_free(mu);
        return span_break(mu, HCCL_E_REMOTE, "measuring the links to another daemon failed");
    }
    /* Raw doubles: the daemons of one comm share a byte order (x86-64, aarch64 LE). */
    mu->lc.alpha_us = p->figures[0];
    mu->lc.beta_us_per_byte = p->figures[1];
    mu->lc.gamma_us_per_byte = p->figures[2];
    mu->lc.overhead_us = p->figures[3];
    mu->lc.host_load = p->figures[4];
    INFO("COLL",
         "comm %u: links measured by node 0: latency %.1f us, %.2f GB/s, reduce %.2f GB/s, "
         "%.1f us per extra message, %.2f daemons per core%s",
         mu->id, mu->lc.alpha_us, 1e-3 / mu->lc.beta_us_per_byte, 1e-3 / mu->lc.gamma_us_per_byte,
         mu->lc.overhead_us, mu->lc.host_load,
         mu->me == 0 && p->earlier > 0 ? " (medians with earlier measurements of these daemons)"
                                       : "");
    mu->probed = 1;
    probe_free(mu);
    if (mu->returning < mu->nnodes && mu->returning != mu->me && mu->respan_ns != 0) {
        WARN("NET", "comm %u: node %u (%s) is back after %.2f s: its ops go on", mu->id,
             mu->returning, mu->node_addrs[mu->returning].tcp,
             (double)(now_ns() - mu->respan_ns) / 1e9);
        mu->respan_ns = 0;
    }
    return 1;
}

void span_probe_free(span_comm_t *mu)
{
    probe_free(mu);
}

int span_probe_poll_fds(const span_comm_t *mu, struct pollfd *pfd, int max)
{
    int n = 0;

    if (mu->probed || mu->nready < mu->nnodes - 1)
        return 0;
    for (uint32_t i = 0; i < mu->nnodes && i < 2 && n < max; i++)
        if (mu->conns[i] != NULL)
            n += tp_poll_fds(mu->conns[i], pfd + n, max - n);
    if (mu->me == 0)
        for (uint32_t i = 2; i < mu->nnodes && n < max; i++)
            n += tp_poll_fds(mu->conns[i], pfd + n, max - n);
    return n;
}
