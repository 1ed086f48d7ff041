#include "exec/l1.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "log.h"
#include "reduce.h"

struct l1_run {
    l1_args_t a;
    size_t es;
    uint32_t round;       /* the round in progress */
    int posted;           /* its transfers are posted */
    tp_req_t **reqs;      /* by step index within the round; NULL once done */
    uint64_t *scratch_at; /* RECV_REDUCE: element offset of its data in a.scratch */
    uint32_t max_round_steps;
    const transport_ops_t *failed; /* the transport of the transfer that failed */
    tp_req_t *check_tx, *check_rx; /* the operation check (l1_args_t.check); NULL once done */
    int check_posted;
};

/* OUT[off..] as step i reads it: the input for a read that `fresh` marks with `bit`. */
static const uint8_t *out_read(const l1_run_t *r, uint32_t i, uint8_t bit, uint64_t off)
{
    if (r->a.src != NULL && (r->a.fresh[i] & bit))
        return r->a.src + off * r->es;
    return r->a.out + off * r->es;
}

/* Where step i (a send, copy or reduce) reads its source from. */
static const uint8_t *step_src(const l1_run_t *r, uint32_t i, uint64_t off)
{
    const step_t *s = &r->a.sched->steps[i];

    if (s->buf == SCHED_BUF_IN)
        return r->a.in + off * r->es;
    return out_read(r, i, SCHED_FRESH_SRC, off);
}

/* Local steps touch no range that another step of the round writes: run them at once. */
static void run_local(l1_run_t *r, uint32_t i)
{
    const step_t *s = &r->a.sched->steps[i];
    uint8_t *dst = r->a.out + s->off * r->es;
    const void *srcs[2] = {out_read(r, i, SCHED_FRESH_DST, s->off), step_src(r, i, s->src_off)};

    if (s->op == STEP_COPY)
        memmove(dst, srcs[1], s->len * r->es);
    else
        reduce_n(r->a.dtype, r->a.redop, dst, srcs, 2, s->len);
}

static int post_round(l1_run_t *r)
{
    const sched_t *sc = r->a.sched;
    uint32_t first = sc->round_start[r->round], n = sc->round_start[r->round + 1] - first;
    uint64_t scratch = 0;
    int rc = 0;

    for (uint32_t i = 0; i < n && rc == 0; i++) {
        const step_t *s = &sc->steps[first + i];
        tp_conn_t *c = s->peer < UINT32_MAX ? r->a.conns[s->peer] : NULL;
        r->reqs[i] = NULL;
        switch (s->op) {
        case STEP_SEND:
            rc = tp_isend(c, step_src(r, first + i, s->off), s->len * r->es, NULL, r->a.tag,
                          &r->reqs[i]);
            break;
        case STEP_RECV:
            rc =
                tp_irecv(c, r->a.out + s->off * r->es, s->len * r->es, NULL, r->a.tag, &r->reqs[i]);
            break;
        case STEP_RECV_REDUCE:
            r->scratch_at[i] = scratch;
            rc = tp_irecv(c, r->a.scratch + scratch * r->es, s->len * r->es, NULL, r->a.tag,
                          &r->reqs[i]);
            scratch += s->len;
            break;
        default: run_local(r, first + i); break;
        }
        if (rc != 0)
            r->failed = c->ops;
    }
    if (rc != 0)
        ERR("COLL", "node %u round %u: posting a transfer failed (%d)", r->a.me, r->round, rc);
    return rc;
}

/* Tests every pending transfer of the round: 1 when all are done. */
static int test_round(l1_run_t *r)
{
    const sched_t *sc = r->a.sched;
    uint32_t first = sc->round_start[r->round], n = sc->round_start[r->round + 1] - first;
    int all = 1;

    for (uint32_t i = 0; i < n; i++) {
        int done = 0, rc;
        if (r->reqs[i] == NULL)
            continue;
        const transport_ops_t *ops = r->reqs[i]->conn->ops; /* done frees the request */
        rc = tp_test(r->reqs[i], &done);
        if (done)
            r->reqs[i] = NULL;
        if (rc != 0) {
            r->failed = ops;
            ERR("COLL", "node %u round %u: a transfer with node %u failed (%d)", r->a.me, r->round,
                sc->steps[first + i].peer, rc);
            return rc;
        }
        all &= done;
    }
    return all;
}

/* Posts the operation check: to the next node, from the previous one, ahead of any data of
 * the run on those connections (so the check is the first message of the tag either way). */
static int post_check(l1_run_t *r)
{
    uint32_t n = r->a.nnodes, next, prev;
    int rc;

    r->check_posted = 1;
    if (r->a.check_len == 0 || n < 2)
        return 0;
    next = (r->a.me + 1) % n;
    prev = (r->a.me + n - 1) % n;
    if ((rc = tp_isend(r->a.conns[next], r->a.check, r->a.check_len, NULL, r->a.check_tag,
                       &r->check_tx)) != 0) {
        r->failed = r->a.conns[next]->ops;
        return rc;
    }
    if ((rc = tp_irecv(r->a.conns[prev], r->a.check_in, r->a.check_len, NULL, r->a.check_tag,
                       &r->check_rx)) != 0)
        r->failed = r->a.conns[prev]->ops;
    return rc;
}

/* Whether the round in progress has a transfer with node `peer` (its tests then advance
 * that connection). */
static int round_touches(const l1_run_t *r, uint32_t peer)
{
    const sched_t *sc = r->a.sched;

    if (r->round >= sc->nrounds)
        return 0;
    for (uint32_t i = sc->round_start[r->round]; i < sc->round_start[r->round + 1]; i++)
        if (sc->steps[i].op <= STEP_RECV_REDUCE && sc->steps[i].peer == peer)
            return 1;
    return 0;
}

/* Tests the check's transfers: 1 when both are done and the previous node agrees, 0 while
 * pending, -EBADE when it does not agree, another negative errno when a transfer failed. The
 * receive is only tested before it is done when `force` or when the round in progress does
 * not talk to the previous node: otherwise the round's own tests advance its connection, and
 * a test of its own every pass would be one more syscall each. */
static int test_check(l1_run_t *r, int force)
{
    uint32_t n = r->a.nnodes;

    force = force || (r->check_rx != NULL && !round_touches(r, (r->a.me + n - 1) % n));
    tp_req_t **q[2] = {&r->check_tx, &r->check_rx};
    int rc, done, err = 0;

    /* The send first: a node that finds a mismatch still tells the next one its own view. */
    for (int i = 0; i < 2; i++) {
        if (*q[i] == NULL || (i == 1 && !force && !tp_done(*q[i])))
            continue;
        const transport_ops_t *ops = (*q[i])->conn->ops;
        rc = tp_test(*q[i], &done);
        if (rc != 0 || done)
            *q[i] = NULL;
        if (rc != 0) {
            r->failed = ops;
            err = err ? err : rc;
        } else if (done && i == 1 && memcmp(r->a.check, r->a.check_in, r->a.check_len) != 0)
            return -EBADE;
    }
    if (err != 0)
        return err;
    return r->check_rx == NULL && r->check_tx == NULL;
}

/* Most reductions folded into one pass over their destination. */
#define L1_FOLD_MAX 16

/* Applies the round's reductions in step order. Consecutive ones into the same range (a
 * fullmesh reduce-scatter has n - 1) go in one pass, dst = ((dst + a) + b) + ..., which gives
 * the same result as one pass each while reading and writing dst once. */
static void finish_round(l1_run_t *r)
{
    const sched_t *sc = r->a.sched;
    uint32_t first = sc->round_start[r->round], n = sc->round_start[r->round + 1] - first;

    for (uint32_t i = 0; i < n;) {
        const step_t *s = &sc->steps[first + i];
        const void *src[L1_FOLD_MAX + 1];
        uint32_t m = 1;
        uint8_t *dst = r->a.out + s->off * r->es;

        if (s->op != STEP_RECV_REDUCE) {
            i++;
            continue;
        }
        src[0] = out_read(r, first + i, SCHED_FRESH_DST, s->off);
        do {
            src[m++] = r->a.scratch + r->scratch_at[i] * r->es;
            i++;
        } while (i < n && m <= L1_FOLD_MAX && sc->steps[first + i].op == STEP_RECV_REDUCE &&
                 sc->steps[first + i].off == s->off && sc->steps[first + i].len == s->len);
        reduce_n(r->a.dtype, r->a.redop, dst, src, m, s->len);
    }
}

/* Bytes the round's sends put on the wire. */
static uint64_t round_send_bytes(const l1_run_t *r)
{
    const sched_t *sc = r->a.sched;
    uint64_t b = 0;

    for (uint32_t i = sc->round_start[r->round]; i < sc->round_start[r->round + 1]; i++)
        if (sc->steps[i].op == STEP_SEND)
            b += sc->steps[i].len * r->es;
    return b;
}

static int run_rounds(l1_run_t *r)
{
    while (r->round < r->a.sched->nrounds) {
        int rc;
        if (!r->posted && r->a.admit != NULL && !r->a.admit(r->a.admit_ctx, round_send_bytes(r)))
            return 0;
        if (!r->posted) {
            if ((rc = post_round(r)) != 0)
                return rc;
            r->posted = 1;
        }
        if ((rc = test_round(r)) <= 0)
            return rc;
        finish_round(r);
        r->round++;
        r->posted = 0;
    }
    return 1;
}

int l1_progress(l1_run_t *r)
{
    int check, rc;

    /* The check goes out with the first round's data (one send, one wake-up at the peer). */
    if (!r->check_posted && (rc = post_check(r)) != 0)
        return rc;
    rc = run_rounds(r);
    /* A failed transfer may have been the other node's different operation (lengths that do
     * not match): its check, which came first on the connection, says so. */
    if ((check = test_check(r, rc != 0)) == -EBADE)
        return check;
    if (rc < 0 || check < 0)
        return rc < 0 ? rc : check;
    return rc == 1 && check == 0 ? 0 : rc;
}

const transport_ops_t *l1_failed_transport(const l1_run_t *r)
{
    return r->failed;
}

static uint32_t add_node(uint32_t *nodes, uint32_t n, uint32_t max, uint32_t node)
{
    for (uint32_t i = 0; i < n; i++)
        if (nodes[i] == node)
            return n;
    if (n < max)
        nodes[n++] = node;
    return n;
}

uint32_t l1_waiting_on(const l1_run_t *r, uint32_t *nodes, uint32_t max, int *unstarted_p)
{
    const sched_t *sc = r->a.sched;
    uint32_t n = 0, nn = r->a.nnodes;

    *unstarted_p = r->check_rx != NULL && !tp_done(r->check_rx);
    if (*unstarted_p)
        n = add_node(nodes, n, max, (r->a.me + nn - 1) % nn);
    if (!r->posted || r->round >= sc->nrounds)
        return n;
    for (uint32_t i = 0; i < sc->round_start[r->round + 1] - sc->round_start[r->round]; i++)
        if (r->reqs[i] != NULL)
            n = add_node(nodes, n, max, sc->steps[sc->round_start[r->round] + i].peer);
    return n;
}

uint32_t l1_round(const l1_run_t *r)
{
    return r->round;
}

int l1_poll_fds(l1_run_t *r, struct pollfd *pfd, int max)
{
    const sched_t *sc = r->a.sched;
    int n = 0;

    if (r->check_rx != NULL && n < max)
        n += tp_poll_fds(r->check_rx->conn, pfd + n, max - n);
    if (r->check_tx != NULL && n < max)
        n += tp_poll_fds(r->check_tx->conn, pfd + n, max - n);
    if (r->round >= sc->nrounds)
        return n;
    for (uint32_t i = sc->round_start[r->round]; i < sc->round_start[r->round + 1]; i++) {
        const step_t *s = &sc->steps[i];
        if (s->op <= STEP_RECV_REDUCE && n < max)
            n += tp_poll_fds(r->a.conns[s->peer], pfd + n, max - n);
    }
    return n;
}

int l1_start(const l1_args_t *a, l1_run_t **r_p)
{
    l1_run_t *r = calloc(1, sizeof(*r));
    uint32_t most = 0;

    if (r == NULL)
        return -ENOMEM;
    r->a = *a;
    r->es = dtype_size(a->dtype);
    for (uint32_t k = 0; k < a->sched->nrounds; k++) {
        uint32_t n = a->sched->round_start[k + 1] - a->sched->round_start[k];
        most = n > most ? n : most;
    }
    r->max_round_steps = most;
    r->reqs = calloc(most + 1, sizeof(*r->reqs));
    r->scratch_at = calloc(most + 1, sizeof(*r->scratch_at));
    if (r->reqs == NULL || r->scratch_at == NULL) {
        l1_free(r);
        return -ENOMEM;
    }
    *r_p = r;
    return 0;
}

void l1_free(l1_run_t *r)
{
    if (r == NULL)
        return;
    /* A run stopped midway leaves transfers on connections that other comms may share and
     * keep open: withdraw them before their buffers go. */
    for (uint32_t i = 0; r->reqs != NULL && i < r->max_round_steps; i++)
        if (r->reqs[i] != NULL)
            tp_cancel(r->reqs[i]);
    if (r->check_tx != NULL)
        tp_cancel(r->check_tx);
    if (r->check_rx != NULL)
        tp_cancel(r->check_rx);
    free(r->reqs);
    free(r->scratch_at);
    free(r);
}
