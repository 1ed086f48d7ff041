/* The resumable-connection cases every transport with retry passes (resume.h). */
#include "resume.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NMSG 12
#define HUSKS 8

/* Message i's size: small ones, and ones larger than the transport's buffers. */
static size_t msg_len(int i)
{
    return i % 3 == 0 ? fx->big + (size_t)i : (size_t)(1000 * i + 1);
}

void resume_set_retry(pair_t *p, uint64_t hold_ms)
{
    tp_retry_t r = {.enabled = 1, .hold_ms = hold_ms};

    ck_assert_int_eq(tp_set_retry(p->c, &r), 0);
    ck_assert_int_eq(tp_set_retry(p->a, &r), 0);
}

uint32_t resume_count(tp_conn_t *c)
{
    tp_retry_stats_t st;

    tp_retry_stats(c, &st);
    ck_assert_int_eq(st.suspended, 0);
    return st.resumes;
}

int resume_suspended(tp_conn_t *c)
{
    tp_retry_stats_t st;

    tp_retry_stats(c, &st);
    return st.suspended;
}

/* A receive of a tag nothing sends, pending on each side as the daemons keep one for notices:
 * testing it advances a connection that has nothing else to do, so each side sees its link
 * fail (and the side that dialled dials again) even when all its own transfers are done. */
static uint8_t watch_buf[2][8];
static tp_req_t *watch[2];
static tp_conn_t *husk[HUSKS]; /* new links in their handshake, across resume_drive calls */

static void watch_start(pair_t *p)
{
    ck_assert_int_eq(tp_irecv(p->c, watch_buf[0], 8, NULL, 999, &watch[0]), 0);
    ck_assert_int_eq(tp_irecv(p->a, watch_buf[1], 8, NULL, 999, &watch[1]), 0);
}

void resume_end(void)
{
    for (int i = 0; i < 2; i++)
        if (watch[i] != NULL && !tp_done(watch[i]))
            tp_cancel(watch[i]);
    watch[0] = watch[1] = NULL;
    for (int h = 0; h < HUSKS; h++)
        if (husk[h] != NULL)
            tp_close(husk[h]);
    memset(husk, 0, sizeof(husk));
}

static void husks_step(pair_t *p)
{
    for (int h = 0; h < HUSKS && p->l != NULL; h++) {
        if (husk[h] == NULL) {
            if (tp_accept(p->l, pair_lookup, (void *)&the_job, &husk[h]) != 0)
                husk[h] = NULL;
            break;
        }
        int st = tp_conn_state(husk[h]);
        if (st != 0) {
            ck_assert_msg(st == -EALREADY, "a new link ended with %d", st);
            tp_close(husk[h]);
            husk[h] = NULL;
        }
    }
}

int resume_drive(pair_t *p, tp_req_t **r, int n, int *status, long long ms)
{
    long long end = now_ms() + ms;
    int left = 0;

    for (int i = 0; i < n; i++)
        left += status[i] == 1;
    do {
        husks_step(p);
        for (int i = 0; i < n; i++) {
            int done = 0, rc;
            if (status[i] != 1)
                continue;
            rc = tp_test(r[i], &done);
            if (done)
                status[i] = rc, left--;
        }
        for (int w = 0; w < 2; w++) {
            int done = 0;
            if (watch[w] != NULL && (tp_test(watch[w], &done), done))
                watch[w] = NULL;
        }
        if (left > 0)
            usleep(500);
    } while (left > 0 && now_ms() < end);
    return left == 0 ? 0 : -ETIMEDOUT;
}

typedef struct traffic {
    uint8_t *out_c[NMSG], *out_a[NMSG], *in_a[NMSG], *in_c[NMSG];
    tp_req_t *r[4 * NMSG];
    int status[4 * NMSG];
} traffic_t;

/* Drives both sides until each has its link back (at most 10 s). */
static void both_back(pair_t *p, traffic_t *t)
{
    for (long long end = now_ms() + (10000); now_ms() < end;) {
        resume_drive(p, t->r, 4 * NMSG, t->status, 5);
        if (!resume_suspended(p->c) && !resume_suspended(p->a))
            break;
    }
}

/* NMSG messages each way, the first half of the receives posted now (the rest arrive
 * unexpected and wait, see post_rest). */
static void start(pair_t *p, traffic_t *t)
{
    for (int i = 0; i < 4 * NMSG; i++)
        t->status[i] = 1;
    for (int i = 0; i < NMSG; i++) {
        t->out_c[i] = pattern(msg_len(i), (unsigned)i);
        t->out_a[i] = pattern(msg_len(i), (unsigned)(100 + i));
        t->in_a[i] = calloc(1, msg_len(i));
        t->in_c[i] = calloc(1, msg_len(i));
        ck_assert_int_eq(tp_isend(p->c, t->out_c[i], msg_len(i), NULL, 1 + i % 2, &t->r[i]), 0);
        ck_assert_int_eq(tp_isend(p->a, t->out_a[i], msg_len(i), NULL, 7, &t->r[NMSG + i]), 0);
    }
    for (int i = 0; i < NMSG / 2; i++) {
        ck_assert_int_eq(
            tp_irecv(p->a, t->in_a[i], msg_len(i), NULL, 1 + i % 2, &t->r[2 * NMSG + i]), 0);
        ck_assert_int_eq(tp_irecv(p->c, t->in_c[i], msg_len(i), NULL, 7, &t->r[3 * NMSG + i]), 0);
    }
}

static void post_rest(pair_t *p, traffic_t *t)
{
    for (int i = NMSG / 2; i < NMSG; i++) {
        ck_assert_int_eq(
            tp_irecv(p->a, t->in_a[i], msg_len(i), NULL, 1 + i % 2, &t->r[2 * NMSG + i]), 0);
        ck_assert_int_eq(tp_irecv(p->c, t->in_c[i], msg_len(i), NULL, 7, &t->r[3 * NMSG + i]), 0);
    }
}

static void traffic_free(traffic_t *t)
{
    for (int i = 0; i < NMSG; i++) {
        free(t->out_c[i]);
        free(t->out_a[i]);
        free(t->in_a[i]);
        free(t->in_c[i]);
    }
}

static void check_and_free(traffic_t *t)
{
    for (int i = 0; i < 4 * NMSG; i++)
        ck_assert_msg(t->status[i] == 0, "request %d ended with %d", i, t->status[i]);
    for (int i = 0; i < NMSG; i++) {
        ck_assert_msg(memcmp(t->in_a[i], t->out_c[i], msg_len(i)) == 0, "message %d to a", i);
        ck_assert_msg(memcmp(t->in_c[i], t->out_a[i], msg_len(i)) == 0, "message %d to c", i);
    }
    traffic_free(t);
}

void resume_twice(pair_t *p, resume_cut_fn cut)
{
    traffic_t t;

    resume_set_retry(p, 5000);
    watch_start(p);
    start(p, &t);
    resume_drive(p, t.r, 2 * NMSG, t.status, 5); /* some are in flight, some done */
    cut(p);
    post_rest(p, &t);
    both_back(p, &t);
    cut(p);
    ck_assert_int_eq(resume_drive(p, t.r, 4 * NMSG, t.status, fx->deadline_ms), 0);
    both_back(p, &t);
    check_and_free(&t);
    ck_assert_uint_eq(resume_count(p->c), 2);
    ck_assert_uint_eq(resume_count(p->a), 2);
    resume_end();
}

void resume_mid_send(pair_t *p, resume_cut_fn cut, size_t big)
{
    uint8_t *out = pattern(big, 7), *in = calloc(1, big);
    tp_req_t *r[2];
    int status[2] = {1, 1};

    resume_set_retry(p, 5000);
    watch_start(p);
    ck_assert_int_eq(tp_isend(p->c, out, big, NULL, 5, &r[0]), 0);
    ck_assert_int_eq(tp_irecv(p->a, in, big, NULL, 5, &r[1]), 0);
    resume_drive(p, r, 2, status, 3); /* part of it on the wire */
    ck_assert_msg(status[1] == 1, "the message is in already: no fault in its middle");
    cut(p);
    ck_assert_int_eq(resume_drive(p, r, 2, status, fx->deadline_ms), 0);
    ck_assert_int_eq(status[0], 0);
    ck_assert_int_eq(status[1], 0);
    ck_assert_int_eq(memcmp(in, out, big), 0);
    ck_assert_uint_eq(resume_count(p->c), 1);
    resume_end();
    free(out);
    free(in);
}

void resume_without_retry(pair_t *p, resume_cut_fn cut)
{
    traffic_t t;
    int failed = 0;

    start(p, &t);
    cut(p);
    post_rest(p, &t);
    ck_assert_int_eq(resume_drive(p, t.r, 4 * NMSG, t.status, fx->deadline_ms), 0);
    resume_end();
    for (int i = 0; i < 4 * NMSG; i++)
        failed += t.status[i] != 0;
    ck_assert_int_gt(failed, 0);
    traffic_free(&t);
}

void resume_hold_ends(pair_t *p, resume_cut_fn cut)
{
    uint8_t in[64], out[64] = {1};
    tp_req_t *r[2];
    int status[2] = {1, 1};
    long long t0;

    resume_set_retry(p, 300);
    tp_listen_close(p->l);
    p->l = NULL;
    ck_assert_int_eq(tp_irecv(p->c, in, sizeof(in), NULL, 3, &r[0]), 0);
    ck_assert_int_eq(tp_irecv(p->a, in, sizeof(in), NULL, 4, &r[1]), 0);
    cut(p);
    t0 = now_ms();
    ck_assert_msg(resume_drive(p, r, 2, status, 5000) == 0, "a request still waits after 5 s");
    for (int i = 0; i < 2; i++)
        ck_assert_msg(tp_peer_gone(status[i]), "request %d ended with %d", i, status[i]);
    ck_assert_int_ge(now_ms() - t0, 290);
    /* The connection is failed for good: a new request says so. */
    ck_assert_int_ne(tp_isend(p->c, out, sizeof(out), NULL, 3, &r[0]), 0);
}

void resume_close_says_bye(pair_t *p)
{
    uint8_t in[64];
    tp_retry_stats_t st;
    tp_req_t *r;
    int status = 1;

    resume_set_retry(p, 5000);
    ck_assert_int_eq(tp_irecv(p->a, in, 64, NULL, 3, &r), 0);
    tp_close(p->c);
    p->c = NULL;
    ck_assert_int_eq(resume_drive(p, &r, 1, &status, 3000), 0);
    ck_assert_int_eq(status, -ECONNRESET);
    tp_retry_stats(p->a, &st);
    ck_assert_int_eq(st.ended, 1);
    ck_assert_int_eq(st.suspended, 0);
}

void resume_unknown_refused(pair_t *p, void (*mark)(tp_conn_t *c))
{
    tp_conn_t *c, *a = NULL;
    int cs = 0, as = 0;

    ck_assert_int_eq(pair_dial(p->addr, the_job.id, the_job.key, &c), 0);
    mark(c);
    /* RDMA rejects the request: its side fails at once. TCP refuses once the key is proven,
     * after the connecting side's last handshake record: the accepted side fails, and the
     * connecting one learns it at its next read. */
    for (long long end = now_ms() + fx->deadline_ms; cs >= 0 && as == 0 && now_ms() < end;
         usleep(500)) {
        if (a == NULL && tp_accept(p->l, pair_lookup, (void *)&the_job, &a) != 0)
            a = NULL;
        cs = tp_conn_state(c);
        if (a != NULL)
            as = tp_conn_state(a);
    }
    ck_assert_msg(cs == -ENOENT || as == -ENOENT, "connecting side %d, accepted side %d", cs, as);
    ck_assert_int_ne(as, 1);
    tp_close(a);
    tp_close(c);
}
