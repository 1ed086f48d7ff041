/*
 * A connection striped over n connections of one transport (tp_stripe.h).
 *
 * Split: a message of len bytes goes out as parts = len / threshold messages, at least 1 and
 * at most n (HCCL's HCCL_MULTI_QP_THRESHOLD: fewer stripes rather than parts below the
 * threshold), part k on stripe k with the message's own tag, covering bytes
 * [k * len / parts, (k + 1) * len / parts). Both ends split alike: lengths agree (the
 * transport's rule) and the threshold is the connecting side's, sent in a hello on stripe 0
 * before anything else. Each stripe keeps the messages of one tag in order, so the m-th
 * message of a tag on the whole is the m-th of that tag on every stripe it uses.
 *
 * Lengths must still agree, and a disagreement still fail with -EPROTO, which a split alone
 * cannot promise (a receive of len bytes might match part 0 of a longer message exactly). So
 * a message split in parts, and one exactly as long as the header, go behind a header on
 * stripe 0: a magic number and the length, which the receiver compares with its own. Every
 * pair of lengths then disagrees somewhere: in a header's contents, or in the length of the
 * first message on stripe 0, header or data, which the transport compares.
 *
 * A request is done when all its parts are, with the first error any of them had. A peer that
 * closed between messages leaves its stripes readable (what it sent can still be received,
 * the rest fails with -ECONNRESET), as one connection does. Any other error fails the whole
 * connection: every stripe is closed (the peer hears of it on each), and every request not
 * yet reported done completes with that error.
 */
#include "transport/tp_stripe.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "futex.h"
#include "log.h"
#include "transport/tp_le.h"
#include "transport/tp_queue.h"

#define STRIPE_MAX_REQS 256
/* The hello's tag: class 3, comm and low bits all ones, which span/tag.h never makes. */
#define STRIPE_HELLO_TAG UINT64_MAX
#define STRIPE_HELLO_BYTES 8
#define STRIPE_SETUP_NS (30ull * 1000000000ull)
#define STRIPE_HDR_BYTES 24
#define STRIPE_HDR_MAGIC 0x5054534443434831ull /* "1HCCDSTP" */

typedef struct stripe_conn stripe_conn_t;

typedef struct stripe_req {
    tp_req_t base;
    stripe_conn_t *s;
    int status; /* the first error of a part */
    unsigned posted, left;
    size_t len;
    tp_req_t *hdr_req;             /* the header's send or receive; NULL once done */
    tp_req_t *part[TP_STRIPE_MAX]; /* NULL once done (or its stripe closed) */
    uint8_t hdr[STRIPE_HDR_BYTES];
} stripe_req_t;

struct stripe_conn {
    tp_conn_t base;
    transport_ops_t ops; /* the table below, with the stripes' name and kind */
    unsigned n, have;
    tp_conn_t *sub[TP_STRIPE_MAX];
    int active;    /* the connecting side */
    uint32_t node; /* the peer's node (accepting side), else TP_NODE_UNKNOWN */
    uint32_t threshold;
    int state; /* 0 setting up, 1 ready, < 0 failed */
    uint64_t deadline_ns;
    uint8_t hello[STRIPE_HELLO_BYTES];
    tp_req_t *hello_req;
    tp_req_t *free_reqs;
    stripe_req_t reqs[STRIPE_MAX_REQS];
};

static const transport_ops_t stripe_ops;

static stripe_conn_t *stripe_of(tp_conn_t *c)
{
    return (stripe_conn_t *)c;
}

static uint64_t env_qps, env_socks, env_kib;

static void stripe_env_read(void)
{
    if (env_u64("HCCL_RDMA_QPS_PER_CONNECTION", 1, 1, TP_STRIPE_MAX, &env_qps) != 0)
        env_qps = 1;
    if (env_u64("HCCLD_TCP_NSOCKS", 1, 1, TP_STRIPE_MAX, &env_socks) != 0)
        env_socks = 1;
    if (env_u64("HCCL_MULTI_QP_THRESHOLD", 512, 1, 8192, &env_kib) != 0)
        env_kib = 512;
}

unsigned tp_stripe_count(enum tp_kind kind, uint32_t *threshold_p)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, stripe_env_read);
    *threshold_p = (uint32_t)(env_kib << 10);
    return (unsigned)(kind == TP_KIND_RDMA ? env_qps : env_socks);
}

static stripe_conn_t *stripe_alloc(unsigned n)
{
    stripe_conn_t *s;

    if (n < 2 || n > TP_STRIPE_MAX || (s = calloc(1, sizeof(*s))) == NULL)
        return NULL;
    s->ops = stripe_ops;
    s->base.ops = &s->ops;
    s->n = n;
    s->node = TP_NODE_UNKNOWN;
    s->deadline_ns = now_ns() + STRIPE_SETUP_NS;
    for (int i = STRIPE_MAX_REQS - 1; i >= 0; i--)
        tp_free_push(&s->free_reqs, &s->reqs[i].base);
    return s;
}

/* The stripes' name and kind are the connection's: errors map to their transport's. */
static void take_kind(stripe_conn_t *s, const tp_conn_t *sub)
{
    s->ops.name = sub->ops->name;
    s->ops.kind = sub->ops->kind;
}

int tp_stripe_wrap(tp_conn_t **subs, unsigned n, uint32_t threshold, tp_conn_t **c_p)
{
    stripe_conn_t *s = stripe_alloc(n);

    if (s == NULL) {
        for (unsigned k = 0; k < n; k++)
            tp_close(subs[k]);
        return -ENOMEM;
    }
    memcpy(s->sub, subs, n * sizeof(*subs));
    s->have = n;
    s->active = 1;
    s->threshold = threshold > 0 ? threshold : 1;
    take_kind(s, subs[0]);
    *c_p = &s->base;
    return 0;
}

tp_conn_t *tp_stripe_new(unsigned n, uint32_t node)
{
    stripe_conn_t *s = stripe_alloc(n);

    if (s == NULL)
        return NULL;
    s->node = node;
    return &s->base;
}

int tp_stripe_add(tp_conn_t *c, unsigned k, unsigned n, tp_conn_t *sub)
{
    stripe_conn_t *s = stripe_of(c);

    if (c->ops->conn_state != stripe_ops.conn_state || s->active || n != s->n || k >= n ||
        s->sub[k] != NULL || s->state != 0) {
        tp_close(sub);
        return -EINVAL;
    }
    s->sub[k] = sub;
    s->have++;
    take_kind(s, sub);
    return 0;
}

uint32_t tp_stripe_gathering(tp_conn_t *c)
{
    stripe_conn_t *s = stripe_of(c);

    if (c->ops->conn_state != stripe_ops.conn_state || s->active || s->have == s->n)
        return TP_NODE_UNKNOWN;
    return s->node;
}

/* Fails the connection with err: every stripe closed (with the requests on them), every
 * request not yet reported done left to complete with err at its next test. */
static void stripe_fail(stripe_conn_t *s, int err, const char *why)
{
    if (s->state < 0)
        return;
    s->state = err < 0 ? err : -EIO;
    if (why != NULL)
        ERR("NET", "striped connection (%u stripes): %s (%s)", s->n, why, strerror(-s->state));
    for (int i = 0; i < STRIPE_MAX_REQS; i++) {
        memset(s->reqs[i].part, 0, sizeof(s->reqs[i].part));
        s->reqs[i].hdr_req = NULL;
    }
    s->hello_req = NULL;
    for (unsigned k = 0; k < s->n; k++) {
        tp_close(s->sub[k]);
        s->sub[k] = NULL;
    }
}

/* The hello: n and the threshold, little-endian. */
static int hello_post(stripe_conn_t *s)
{
    if (s->active) {
        put_le(s->hello, s->n, 4);
        put_le(s->hello + 4, s->threshold, 4);
        return tp_isend(s->sub[0], s->hello, sizeof(s->hello), NULL, STRIPE_HELLO_TAG,
                        &s->hello_req);
    }
    return tp_irecv(s->sub[0], s->hello, sizeof(s->hello), NULL, STRIPE_HELLO_TAG, &s->hello_req);
}

static int hello_done(stripe_conn_t *s)
{
    uint32_t n = (uint32_t)get_le(s->hello, 4), threshold = (uint32_t)get_le(s->hello + 4, 4);

    if (s->active)
        return 0;
    if (n != s->n || threshold == 0 || threshold > (8192u << 10)) {
        ERR("NET",
            "striped connection from node %u: its hello says %u stripes, threshold %u B "
            "(expected %u stripes)",
            s->node, n, threshold, s->n);
        return -EPROTO;
    }
    s->threshold = threshold;
    return 0;
}

static int setup_progress(stripe_conn_t *s)
{
    int all = 1, rc, done = 0;

    if (s->have < s->n)
        all = 0;
    for (unsigned k = 0; k < s->n && all; k++) {
        rc = tp_conn_state(s->sub[k]);
        if (rc < 0) {
            stripe_fail(s, rc, "a stripe's handshake failed");
            return rc;
        }
        all = rc == 1;
    }
    if (all && s->hello_req == NULL && (rc = hello_post(s)) != 0) {
        stripe_fail(s, rc, "cannot post the hello");
        return rc;
    }
    if (all && (rc = tp_test(s->hello_req, &done)) != 0) {
        s->hello_req = NULL;
        stripe_fail(s, rc, "the hello failed");
        return rc;
    }
    if (done) {
        s->hello_req = NULL;
        if ((rc = hello_done(s)) != 0) {
            stripe_fail(s, rc, NULL);
            return rc;
        }
        s->state = 1;
        return 1;
    }
    if (now_ns() > s->deadline_ns) {
        stripe_fail(s, -ETIMEDOUT,
                    s->have < s->n ? "not every stripe came within 30 s" : "setup timed out");
        return -ETIMEDOUT;
    }
    return 0;
}

static int stripe_conn_state(tp_conn_t *c)
{
    stripe_conn_t *s = stripe_of(c);
    int rc;

    if (s->state < 0)
        return s->state;
    if (s->state == 0)
        return setup_progress(s);
    /* Ready: the stripes still take their own events (a disconnect, CM events). */
    for (unsigned k = 0; k < s->n; k++)
        if ((rc = tp_conn_state(s->sub[k])) < 0) {
            stripe_fail(s, rc, NULL);
            return rc;
        }
    return 1;
}

static uint32_t stripe_peer_node(tp_conn_t *c)
{
    return stripe_of(c)->node;
}

static int stripe_reg_mem(tp_conn_t *c, void *base, size_t len, void **mr_p)
{
    (void)c;
    (void)len;
    *mr_p = base;
    return 0;
}

static void stripe_dereg_mem(tp_conn_t *c, void *mr)
{
    (void)c;
    (void)mr;
}

static void req_release(stripe_req_t *r)
{
    tp_free_push(&r->s->free_reqs, &r->base);
}

/* Withdraws r's header and parts and frees r; a part partly on the wire fails its stripe
 * (and so, at the next test, the connection), as cancel does on one connection. */
static void req_withdraw(stripe_req_t *r)
{
    if (r->hdr_req != NULL)
        tp_cancel(r->hdr_req);
    for (unsigned k = 0; k < r->s->n; k++)
        if (r->part[k] != NULL)
            tp_cancel(r->part[k]);
    req_release(r);
}

static int stripe_post(tp_conn_t *c, int send, void *buf, size_t len, uint64_t tag, tp_req_t **r_p)
{
    stripe_conn_t *s = stripe_of(c);
    stripe_req_t *r;
    size_t parts = len / s->threshold;
    int rc = 0;

    if (s->state != 1)
        return s->state < 0 ? s->state : -ENOTCONN;
    if (s->free_reqs == NULL)
        return -EAGAIN;
    parts = parts < 1 ? 1 : parts > s->n ? s->n : parts;
    r = (stripe_req_t *)tp_free_pop(&s->free_reqs);
    *r = (stripe_req_t){.base = {.conn = c, .tag = tag}, .s = s, .len = len};
    if (parts > 1 || len == STRIPE_HDR_BYTES) {
        put_le(r->hdr, STRIPE_HDR_MAGIC, 8);
        put_le(r->hdr + 8, len, 8);
        rc = send ? tp_isend(s->sub[0], r->hdr, sizeof(r->hdr), NULL, tag, &r->hdr_req)
                  : tp_irecv(s->sub[0], r->hdr, sizeof(r->hdr), NULL, tag, &r->hdr_req);
        r->left += rc == 0;
    }
    for (size_t k = 0; k < parts && rc == 0; k++) {
        size_t lo = len * k / parts, hi = len * (k + 1) / parts;
        uint8_t *p = (uint8_t *)buf + lo;
        rc = send ? tp_isend(s->sub[k], p, hi - lo, NULL, tag, &r->part[k])
                  : tp_irecv(s->sub[k], p, hi - lo, NULL, tag, &r->part[k]);
        r->left += rc == 0;
    }
    r->posted = r->left;
    if (rc != 0) {
        req_withdraw(r);
        return rc;
    }
    *r_p = &r->base;
    return 0;
}

static int stripe_isend(tp_conn_t *c, const void *buf, size_t len, void *mr, uint64_t tag,
                        tp_req_t **r_p)
{
    (void)mr;
    return stripe_post(c, 1, (void *)buf, len, tag, r_p);
}

static int stripe_irecv(tp_conn_t *c, void *buf, size_t len, void *mr, uint64_t tag, tp_req_t **r_p)
{
    (void)mr;
    return stripe_post(c, 0, buf, len, tag, r_p);
}

/* A part on stripe k ended with rc (not 0): the request fails; the connection too, unless
 * the stripe is only at its end (the peer closed it between messages). */
static void part_failed(stripe_req_t *r, unsigned k, int rc)
{
    if (r->status == 0)
        r->status = rc;
    if (rc != -ECONNRESET || tp_conn_state(r->s->sub[k]) != 1)
        stripe_fail(r->s, rc, NULL);
}

static int stripe_test(tp_req_t *base, int *done_p)
{
    stripe_req_t *r = (stripe_req_t *)base;
    stripe_conn_t *s = r->s;
    int rc, done, status;

    *done_p = 0;
    if (r->hdr_req != NULL && s->state == 1) {
        done = 0;
        rc = tp_test(r->hdr_req, &done);
        if (done) {
            r->hdr_req = NULL;
            r->left--;
            if (rc != 0)
                part_failed(r, 0, rc);
            else if (get_le(r->hdr, 8) != STRIPE_HDR_MAGIC || get_le(r->hdr + 8, 8) != r->len) {
                r->status = -EPROTO;
                stripe_fail(s, -EPROTO, "a message's length is not its receive's");
            }
        }
    }
    for (unsigned k = 0; k < s->n && s->state == 1 && r->left > 0; k++) {
        if (r->part[k] == NULL)
            continue;
        done = 0;
        rc = tp_test(r->part[k], &done);
        if (!done)
            continue;
        r->part[k] = NULL;
        r->left--;
        if (rc != 0)
            part_failed(r, k, rc);
    }
    if (s->state == 1 && r->left > 0)
        return 0;
    status = r->status != 0 ? r->status : s->state < 0 ? s->state : 0;
    *done_p = 1;
    req_release(r);
    return status;
}

static int stripe_poll_fds(tp_conn_t *c, struct pollfd *pfd, int max)
{
    stripe_conn_t *s = stripe_of(c);
    int n = 0;

    for (unsigned k = 0; k < s->n && n < max; k++)
        if (s->sub[k] != NULL)
            n += tp_poll_fds(s->sub[k], pfd + n, max - n);
    return n;
}

static int stripe_set_dscp(tp_conn_t *c, int dscp)
{
    stripe_conn_t *s = stripe_of(c);
    int rc = 0, r;

    for (unsigned k = 0; k < s->n; k++)
        if (s->sub[k] != NULL && (r = tp_set_dscp(s->sub[k], dscp)) != 0 && rc == 0)
            rc = r;
    return rc;
}

static void stripe_describe(tp_conn_t *c, char *buf, size_t cap)
{
    stripe_conn_t *s = stripe_of(c);
    char one[TP_DESC_MAX] = "-";

    if (s->sub[0] != NULL)
        tp_describe(s->sub[0], one, sizeof(one));
    snprintf(buf, cap, "%s x%u", one, s->n);
}

static void stripe_link_info(tp_conn_t *c, tp_link_info_t *li)
{
    stripe_conn_t *s = stripe_of(c);

    for (unsigned k = 0; k < s->n; k++)
        if (s->sub[k] != NULL)
            tp_link_info(s->sub[k], li);
}

/* Counts q as done, pending, or failed (a completion not reported yet counts: its bytes
 * moved), without driving its connection. */
static void part_tally(const tp_req_t *q, unsigned *done, unsigned *pending, int *failed)
{
    if (q == NULL)
        return;
    if (!q->done) {
        (*pending)++;
        return;
    }
    (*done)++;
    *failed |= q->status != 0;
}

/* A request some of whose parts are done, and others not, cannot leave the stripes' streams
 * in step (the peer's rest would meet the next message of its tag): the connection fails, as
 * one connection does for a receive partly filled. One with nothing moved yet leaves cleanly. */
static void stripe_cancel(tp_req_t *base)
{
    stripe_req_t *r = (stripe_req_t *)base;
    stripe_conn_t *s = r->s;
    unsigned done = r->posted - r->left, pending = 0;
    int failed = 0, partway;

    part_tally(r->hdr_req, &done, &pending, &failed);
    for (unsigned k = 0; k < s->n; k++)
        part_tally(r->part[k], &done, &pending, &failed);
    partway = s->state == 1 && (failed || (done > 0 && pending > 0));
    req_withdraw(r);
    if (partway)
        stripe_fail(s, -ECONNABORTED, "a request was withdrawn with some of its parts done");
}

static void stripe_forget(tp_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns)
{
    stripe_conn_t *s = stripe_of(c);

    for (unsigned k = 0; k < s->n; k++)
        if (s->sub[k] != NULL)
            tp_forget(s->sub[k], mask, value, ttl_ns);
}

/* Each stripe is a connection of its own: each resumes on its own. */
static int stripe_set_retry(tp_conn_t *c, const tp_retry_t *r)
{
    stripe_conn_t *s = stripe_of(c);
    int rc = 0;

    for (unsigned k = 0; k < s->n && rc == 0; k++)
        if (s->sub[k] != NULL)
            rc = tp_set_retry(s->sub[k], r);
    return rc;
}

static void stripe_retry_stats(tp_conn_t *c, tp_retry_stats_t *st)
{
    stripe_conn_t *s = stripe_of(c);
    tp_retry_stats_t one;

    for (unsigned k = 0; k < s->n; k++)
        if (s->sub[k] != NULL) {
            tp_retry_stats(s->sub[k], &one);
            st->suspended |= one.suspended;
            st->resumes += one.resumes;
            if (one.suspended_ns > st->suspended_ns)
                st->suspended_ns = one.suspended_ns;
        }
}

static void stripe_close(tp_conn_t *c)
{
    stripe_conn_t *s = stripe_of(c);

    for (unsigned k = 0; k < s->n; k++)
        tp_close(s->sub[k]);
    free(s);
}

/* Only the calls on a connection: the stripes were opened and accepted by their transport. */
static const transport_ops_t stripe_ops = {
    .name = "stripe",
    .conn_state = stripe_conn_state,
    .conn_peer_node = stripe_peer_node,
    .reg_mem = stripe_reg_mem,
    .dereg_mem = stripe_dereg_mem,
    .isend = stripe_isend,
    .irecv = stripe_irecv,
    .test = stripe_test,
    .poll_fds = stripe_poll_fds,
    .set_dscp = stripe_set_dscp,
    .describe = stripe_describe,
    .link_info = stripe_link_info,
    .cancel = stripe_cancel,
    .forget = stripe_forget,
    .set_retry = stripe_set_retry,
    .retry_stats = stripe_retry_stats,
    .close = stripe_close,
};
