/*
 * Resumable TCP connections (daemon/transport/tcp_resume.c): messages in flight both ways, of
 * several sizes, some received before their receive is posted, while the connection's sockets
 * are reset under them (ss -K: needs root, as the suite's other resets). With retry, every message
 * arrives once and intact and both sides count one resume; the connecting side dials the listener
 * again and the accepting side takes the new socket (the husk it came on is closed). Without retry,
 * or past the hold time, the requests fail as before.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_fixture.h"
#include "test_list.h"
#include "transport/tcp_conn.h"

#define NMSG 12
#define HUSKS 8

/* Message i's size: small ones and ones larger than the socket buffers. */
static size_t msg_len(int i)
{
    return i % 3 == 0 ? (size_t)(3u << 20) + (size_t)i : (size_t)(1000 * i + 1);
}

/* Resets both sockets of the pair under the transport, as a middlebox's RST does: the kernel
 * destroys them (ss -K, as root), and each side's next call fails with a reset. */
static void cut(pair_t *p)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    char cmd[160];

    ck_assert_int_eq(getsockname(tcp_conn_of(p->c)->fd, (struct sockaddr *)&sin, &len), 0);
    snprintf(cmd, sizeof(cmd),
             "timeout 10 ss -K -H -t -n src 127.0.0.1 and dst 127.0.0.1 and "
             "'( sport = :%u or dport = :%u )' >/dev/null 2>&1",
             ntohs(sin.sin_port), ntohs(sin.sin_port));
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

/* A receive of a tag nothing sends, posted on each side as the daemons keep one for notices:
 * testing it advances a connection that has nothing else to do, so each side sees its socket
 * fail (and the side that dialled dials again) even when all its own transfers are done. */
static uint8_t watch_buf[2][8];
static tp_req_t *watch[2];

static void watch_start(pair_t *p)
{
    ck_assert_int_eq(tp_irecv(p->c, watch_buf[0], 8, NULL, 999, &watch[0]), 0);
    ck_assert_int_eq(tp_irecv(p->a, watch_buf[1], 8, NULL, 999, &watch[1]), 0);
}

static void watch_stop(void)
{
    for (int i = 0; i < 2; i++)
        if (watch[i] != NULL && !tp_done(watch[i]))
            tp_cancel(watch[i]);
    watch[0] = watch[1] = NULL;
}

/* Tests every request and takes what the listener accepts (a resumed connection's new
 * socket) until all are done or ms passed: 0 or -ETIMEDOUT. */
static tp_conn_t *husk[HUSKS]; /* new sockets in their handshake, across drive_all calls */

static void husks_close(void)
{
    for (int h = 0; h < HUSKS; h++)
        if (husk[h] != NULL)
            tp_close(husk[h]);
    memset(husk, 0, sizeof(husk));
}

static int drive_all(pair_t *p, tp_req_t **r, int n, int *status, long long ms)
{
    long long end = now_ms() + ms;
    int left = n;

    for (int i = 0; i < n; i++)
        status[i] = 1;
    while (left > 0 && now_ms() < end) {
        for (int h = 0; h < HUSKS; h++) {
            if (husk[h] == NULL) {
                if (tp_accept(p->l, pair_lookup, (void *)&the_job, &husk[h]) != 0)
                    husk[h] = NULL;
                break;
            }
            int st = tp_conn_state(husk[h]);
            if (st != 0) {
                ck_assert_msg(st == -EALREADY, "a new socket ended with %d", st);
                tp_close(husk[h]);
                husk[h] = NULL;
            }
        }
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
    }
    return left == 0 ? 0 : -ETIMEDOUT;
}

typedef struct traffic {
    uint8_t *out_c[NMSG], *out_a[NMSG], *in_a[NMSG], *in_c[NMSG];
    tp_req_t *r[4 * NMSG];
    int status[4 * NMSG];
} traffic_t;

/* Drives both sides until each has its connection back (at most 5 s). */
static void both_back(pair_t *p, traffic_t *t)
{
    for (long long end = now_ms() + 5000; now_ms() < end;) {
        drive_all(p, t->r, 4 * NMSG, t->status, 5);
        if (tcp_conn_of(p->c)->state == TCP_CONN_READY &&
            tcp_conn_of(p->a)->state == TCP_CONN_READY)
            break;
    }
}

/* Sends NMSG messages each way, the first half of the receives posted now (the rest arrive
 * unexpected and wait, see post_rest). */
static void start(pair_t *p, traffic_t *t)
{
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

static void check_and_free(traffic_t *t)
{
    for (int i = 0; i < 4 * NMSG; i++)
        ck_assert_msg(t->status[i] == 0, "request %d ended with %d", i, t->status[i]);
    for (int i = 0; i < NMSG; i++) {
        ck_assert_msg(memcmp(t->in_a[i], t->out_c[i], msg_len(i)) == 0, "message %d to a", i);
        ck_assert_msg(memcmp(t->in_c[i], t->out_a[i], msg_len(i)) == 0, "message %d to c", i);
        free(t->out_c[i]);
        free(t->out_a[i]);
        free(t->in_a[i]);
        free(t->in_c[i]);
    }
}

static void set_retry(pair_t *p, uint64_t hold_ms)
{
    tp_retry_t r = {.enabled = 1, .hold_ms = hold_ms};

    ck_assert_int_eq(tp_set_retry(p->c, &r), 0);
    ck_assert_int_eq(tp_set_retry(p->a, &r), 0);
}

static uint32_t resumes(tp_conn_t *c)
{
    tp_retry_stats_t st;

    tp_retry_stats(c, &st);
    ck_assert_int_eq(st.suspended, 0);
    return st.resumes;
}

/* The sockets fail twice while messages cross both ways: all arrive, once, intact. */
START_TEST(test_resume_delivers_everything_once)
{
    traffic_t t;
    pair_t p;

    use_tcp();
    pair_ready(&p);
    set_retry(&p, 5000);
    watch_start(&p);
    start(&p, &t);
    drive_all(&p, t.r, 2 * NMSG, t.status, 5); /* some are in flight, some done */
    cut(&p);
    post_rest(&p, &t);
    both_back(&p, &t);
    cut(&p);
    ck_assert_int_eq(drive_all(&p, t.r, 4 * NMSG, t.status, 8000), 0);
    both_back(&p, &t);
    check_and_free(&t);
    ck_assert_uint_eq(resumes(p.c), 2);
    ck_assert_uint_eq(resumes(p.a), 2);
    watch_stop();
    husks_close();
    pair_close(&p);
}
END_TEST

/* A send larger than the replay ring is not copied: it keeps its user's buffer, completes only
 * once acknowledged (its side asks for the ACK), and goes again from its start after a cut in
 * the middle of it. */
START_TEST(test_resume_send_larger_than_ring)
{
    enum { BIG = (20u << 20) + 5 };
    uint8_t *out = pattern(BIG, 7), *in = calloc(1, BIG);
    tp_req_t *r[2];
    int status[2];
    pair_t p;

    use_tcp();
    pair_ready(&p);
    set_retry(&p, 5000);
    watch_start(&p);
    ck_assert_int_eq(tp_isend(p.c, out, BIG, NULL, 5, &r[0]), 0);
    ck_assert_int_eq(tp_irecv(p.a, in, BIG, NULL, 5, &r[1]), 0);
    drive_all(&p, r, 2, status, 3); /* part of it on the wire */
    cut(&p);
    ck_assert_int_eq(drive_all(&p, r, 2, status, 8000), 0);
    ck_assert_int_eq(status[0], 0);
    ck_assert_int_eq(status[1], 0);
    ck_assert_int_eq(memcmp(in, out, BIG), 0);
    ck_assert_uint_eq(resumes(p.c), 1);
    watch_stop();
    husks_close();
    pair_close(&p);
    free(out);
    free(in);
}
END_TEST

/* Without retry the same cut fails the requests in flight, with the link's error. */
START_TEST(test_no_retry_fails_at_once)
{
    traffic_t t;
    pair_t p;

    use_tcp();
    pair_ready(&p);
    start(&p, &t);
    cut(&p);
    post_rest(&p, &t);
    ck_assert_int_eq(drive_all(&p, t.r, 4 * NMSG, t.status, 2000), 0);
    husks_close();
    int failed = 0;
    for (int i = 0; i < 4 * NMSG; i++)
        failed += t.status[i] != 0;
    ck_assert_int_gt(failed, 0);
    for (int i = 0; i < NMSG; i++) {
        free(t.out_c[i]);
        free(t.out_a[i]);
        free(t.in_a[i]);
        free(t.in_c[i]);
    }
    pair_close(&p);
}
END_TEST

/* A connection that cannot come back (no one listens any more) fails once the hold time has
 * passed, with the error that suspended it, and not before. */
START_TEST(test_hold_time_ends_it)
{
    uint8_t in[64], out[64] = {1};
    tp_req_t *r[2];
    int status[2];
    pair_t p;

    use_tcp();
    pair_ready(&p);
    set_retry(&p, 300);
    tp_listen_close(p.l);
    p.l = NULL;
    ck_assert_int_eq(tp_irecv(p.c, in, sizeof(in), NULL, 3, &r[0]), 0);
    ck_assert_int_eq(tp_irecv(p.a, in, sizeof(in), NULL, 4, &r[1]), 0);
    cut(&p);
    long long t0 = now_ms();
    for (int i = 0; i < 2; i++) {
        int done = 0;
        status[i] = 1;
        while (!done && now_ms() - t0 < 3000) {
            status[i] = tp_test(r[i], &done);
            if (!done)
                usleep(1000);
        }
        ck_assert_msg(done, "request %d still waits after 3 s", i);
        ck_assert_msg(tp_peer_gone(status[i]), "request %d ended with %d", i, status[i]);
    }
    ck_assert_int_ge(now_ms() - t0, 290);
    /* The connection is failed for good: a new request says so. */
    ck_assert_int_ne(tp_isend(p.c, out, sizeof(out), NULL, 3, &r[0]), 0);
    pair_close(&p);
}
END_TEST

/* A HELLO that claims to resume a connection this side never had is refused. */
START_TEST(test_resume_of_unknown_refused)
{
    tp_conn_t *c, *a = NULL;
    pair_t p;

    use_tcp();
    pair_ready(&p);
    tcp_conn_t *fake;
    char addr[TP_ADDR_MAX];
    ck_assert_int_eq(tp_tcp.connect(tcp_conn_of(p.c)->rs.addr, the_job.id, the_job.key, 1, &c), 0);
    snprintf(addr, sizeof(addr), "%s", tcp_conn_of(p.c)->rs.addr);
    fake = tcp_conn_of(c);
    fake->hs.flags = TCP_HS_F_RESUME; /* a name it never gave */
    long long end = now_ms() + 3000;
    int cs = 0, as = 0;
    while ((cs == 0 || as == 0) && now_ms() < end) {
        if (a == NULL && tp_accept(p.l, pair_lookup, (void *)&the_job, &a) != 0)
            a = NULL;
        if (cs == 0)
            cs = tp_conn_state(c);
        if (a != NULL && as == 0)
            as = tp_conn_state(a);
        usleep(500);
    }
    ck_assert_int_eq(as, -ENOENT);
    tp_close(a);
    tp_close(c);
    pair_close(&p);
}
END_TEST

/* Waits up to ms for r: its result, or 1 if it still waits. */
static int wait_one(tp_req_t *r, long long ms)
{
    long long end = now_ms() + ms;
    int done = 0, rc = 1;

    while (!done && now_ms() < end) {
        rc = tp_test(r, &done);
        if (!done) {
            rc = 1;
            usleep(1000);
        }
    }
    return rc;
}

/* A resumable pair whose accepting side waits for a message (tag 3) into in[64]. */
static void pair_waiting(pair_t *p, uint8_t *in, tp_req_t **r)
{
    use_tcp();
    pair_ready(p);
    set_retry(p, 5000);
    ck_assert_int_eq(tp_irecv(p->a, in, 64, NULL, 3, r), 0);
}

/* A side that closes on purpose says BYE first: the other takes the end for an end (its
 * receive fails at once, nothing suspends), as without retry. */
START_TEST(test_close_says_bye)
{
    uint8_t in[64];
    tp_retry_stats_t st;
    tp_req_t *r;
    pair_t p;

    pair_waiting(&p, in, &r);
    tp_close(p.c);
    p.c = NULL;
    ck_assert_int_eq(wait_one(r, 3000), -ECONNRESET);
    tp_retry_stats(p.a, &st);
    ck_assert_int_eq(st.ended, 1);
    ck_assert_int_eq(st.suspended, 0);
    pair_close(&p);
}
END_TEST

/* An end without BYE is what the kernel sends for a daemon that crashed (SIGKILL) with nothing
 * unread: the connection suspends and waits for its peer, as after a reset. */
START_TEST(test_end_without_bye_suspends)
{
    uint8_t in[64];
    tp_retry_stats_t st;
    tp_req_t *r;
    pair_t p;

    pair_waiting(&p, in, &r);
    ck_assert_int_eq(shutdown(tcp_conn_of(p.c)->fd, SHUT_WR), 0);
    ck_assert_int_eq(wait_one(r, 300), 1);
    tp_retry_stats(p.a, &st);
    ck_assert_int_eq(st.suspended, 1);
    ck_assert_int_eq(st.ended, 0);
    tp_cancel(r);
    pair_close(&p);
}
END_TEST

Suite *tcp_resume_suite(void)
{
    Suite *s = suite_create("tcp_resume");
    TCase *tc = tcase_create("loopback");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_resume_delivers_everything_once);
    tcase_add_test(tc, test_resume_send_larger_than_ring);
    tcase_add_test(tc, test_no_retry_fails_at_once);
    tcase_add_test(tc, test_hold_time_ends_it);
    tcase_add_test(tc, test_resume_of_unknown_refused);
    tcase_add_test(tc, test_close_says_bye);
    tcase_add_test(tc, test_end_without_bye_suspends);
    suite_add_tcase(s, tc);
    return s;
}
