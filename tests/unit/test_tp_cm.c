/*
 * The connection manager (transport/tp_cm.h) over 127.0.0.1, two managers in one process: A
 * listens and accepts, B connects as node 1 of 2 would. Every wait has a deadline and drives
 * both sides from this thread, so a bug shows as a failure, never as a hang.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../transport/pair.h"
#include "net_addr.h"
#include "test_list.h"
#include "transport/rdma.h"
#include "transport/tp_cm.h"
#include "transport/tp_stripe.h"

#define DEADLINE_MS 5000
/* How long a connection is watched to stay held (or refused) once its peer settled. */
#define HOLD_MS 150
#define MAX_FDS 64

static const uint8_t job_j[AUTH_JOB_BYTES] = "tp-cm-job-J....";
static const uint8_t key_j[AUTH_KEY_BYTES] = "tp-cm-key-J....";
static const uint8_t job_x[AUTH_JOB_BYTES] = "tp-cm-job-X....";

/* The accepting manager and one connecting side, as the tests drive them. */
typedef struct side {
    tp_cm_t *cm;
    tp_cm_addrs_t addrs; /* A's, from tp_cm_listen */
    tp_conn_t *c;        /* B's connection */
    int c_state;
    tp_conn_t *got; /* what tp_cm_take handed out */
    uint8_t job[AUTH_JOB_BYTES];
    uint32_t node;
    int ready; /* the sum of tp_cm_progress's results */
} side_t;

static void side_listen(side_t *s)
{
    memset(s, 0, sizeof(*s));
    s->cm = tp_cm_new();
    ck_assert_ptr_nonnull(s->cm);
    /* TCP only: a test host may or may not have an RDMA device on loopback. */
    ck_assert_int_eq(tp_cm_set_mode(s->cm, "tcp"), 0);
    ck_assert_int_eq(tp_cm_listen(s->cm, "127.0.0.1", &s->addrs), 0);
    ck_assert_str_eq(s->addrs.rdma, "");
    ck_assert_ptr_nonnull(strstr(s->addrs.tcp, "127.0.0.1:"));
}

/* B connects for job as node 1 of 2 to node 0 (A), over TCP. */
static void side_connect(side_t *s, const uint8_t *job, const uint8_t *key)
{
    tp_cm_t *b = tp_cm_new();
    tp_cm_addrs_t me = {.tcp = "127.0.0.1:1"};

    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(tp_cm_set_mode(b, "tcp"), 0);
    ck_assert_int_eq(tp_cm_connect(b, &me, 1, &s->addrs, 0, 2, job, key, &s->c), 0);
    tp_cm_free(b); /* what it connected is the caller's */
    s->c_state = 0;
}

/* One pass: A progresses and hands out, B's handshake advances, then both sleep in poll()
 * (5 ms at most) on what they say, and A learns what poll() said of its listener. */
static void side_step(side_t *s)
{
    struct pollfd pfd[MAX_FDS];
    int na, n;

    s->ready += tp_cm_progress(s->cm);
    if (s->got == NULL)
        s->got = tp_cm_take(s->cm, s->job, &s->node);
    if (s->c != NULL && s->c_state == 0)
        s->c_state = tp_conn_state(s->c);
    na = tp_cm_poll_fds(s->cm, pfd, MAX_FDS);
    n = na;
    if (s->c != NULL && s->c_state >= 0)
        n += tp_poll_fds(s->c, pfd + n, MAX_FDS - n);
    poll(pfd, (nfds_t)n, 5);
    tp_cm_polled(s->cm, pfd, na);
}

/* Drives until A handed the connection out and B is ready, or B failed and A holds nothing,
 * or the deadline. */
static void side_settle(side_t *s)
{
    long long end = now_ms() + DEADLINE_MS;

    while (now_ms() < end) {
        side_step(s);
        if (s->got != NULL && s->c_state == 1)
            return;
        if (s->c_state < 0 && !tp_cm_accepting(s->cm))
            return;
    }
}

/* Drives for ms whatever happens. */
static void side_drive(side_t *s, long long ms)
{
    long long end = now_ms() + ms;

    while (now_ms() < end)
        side_step(s);
}

static void side_close_conns(side_t *s)
{
    tp_close(s->c);
    tp_close(s->got);
    s->c = s->got = NULL;
    s->c_state = 0;
    s->ready = 0;
}

/* A delivered B's connection for job_j, announced as node 1. */
static void assert_delivered(const side_t *s)
{
    ck_assert_int_eq(s->c_state, 1);
    ck_assert_ptr_nonnull(s->got);
    ck_assert_int_eq(tp_conn_state(s->got), 1);
    ck_assert_mem_eq(s->job, job_j, AUTH_JOB_BYTES);
    ck_assert_uint_eq(s->node, 1);
    ck_assert_int_eq(s->ready, 1);
    ck_assert_int_eq(tp_cm_accepting(s->cm), 0);
}

/* A refused B's connection: nothing handed out, nothing held, B's side failed. */
static void assert_refused(const side_t *s)
{
    ck_assert_ptr_null(s->got);
    ck_assert_int_eq(s->ready, 0);
    ck_assert_int_eq(tp_cm_accepting(s->cm), 0);
    ck_assert_int_lt(s->c_state, 0);
}

/* len bytes each way at once over the pair (x, y), which arrive intact. */
static void exchange(tp_conn_t *x, tp_conn_t *y, size_t len)
{
    uint8_t *out_x = pattern(len, 1), *out_y = pattern(len, 2);
    uint8_t *in_x = malloc(len + 1), *in_y = malloc(len + 1);
    tp_req_t *r[4];
    int done[4] = {0}, left = 4;
    long long end = now_ms() + DEADLINE_MS;

    ck_assert_int_eq(tp_isend(x, out_x, len, NULL, 7, &r[0]), 0);
    ck_assert_int_eq(tp_irecv(y, in_y, len, NULL, 7, &r[1]), 0);
    ck_assert_int_eq(tp_isend(y, out_y, len, NULL, 8, &r[2]), 0);
    ck_assert_int_eq(tp_irecv(x, in_x, len, NULL, 8, &r[3]), 0);
    while (left > 0 && now_ms() < end) {
        struct pollfd pfd[MAX_FDS];
        int n = tp_poll_fds(x, pfd, MAX_FDS);

        for (int i = 0; i < 4; i++)
            if (!done[i]) {
                ck_assert_int_eq(tp_test(r[i], &done[i]), 0);
                left -= done[i];
            }
        n += tp_poll_fds(y, pfd + n, MAX_FDS - n);
        if (left > 0)
            poll(pfd, (nfds_t)n, 5);
    }
    ck_assert_int_eq(left, 0);
    ck_assert_mem_eq(in_y, out_x, len);
    ck_assert_mem_eq(in_x, out_y, len);
    free(out_x);
    free(out_y);
    free(in_x);
    free(in_y);
}

/* A claimed job: the connection is handed out with its job and node, and carries data. */
START_TEST(test_claimed_delivered)
{
    side_t s;

    side_listen(&s);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    side_connect(&s, job_j, key_j);
    side_settle(&s);
    assert_delivered(&s);
    ck_assert_ptr_null(tp_cm_take(s.cm, s.job, &s.node));
    exchange(s.got, s.c, 100);
    side_close_conns(&s);
    tp_cm_free(s.cm);
}
END_TEST

/* A job neither claimed nor expected: the handshake fails on both sides, nothing is kept. */
START_TEST(test_unknown_job_refused)
{
    side_t s;

    side_listen(&s);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    side_connect(&s, job_x, key_j);
    side_settle(&s);
    side_drive(&s, HOLD_MS);
    assert_refused(&s);
    side_close_conns(&s);
    tp_cm_free(s.cm);
}
END_TEST

/* An expected job: its connection is held, the manager still accepting, until the claim. */
START_TEST(test_expected_then_claimed)
{
    side_t s;
    long long end = now_ms() + DEADLINE_MS;

    side_listen(&s);
    ck_assert_int_eq(tp_cm_job_expect(s.cm, job_j, key_j), 0);
    side_connect(&s, job_j, key_j);
    while (s.c_state == 0 && now_ms() < end)
        side_step(&s);
    ck_assert_int_eq(s.c_state, 1);
    side_drive(&s, HOLD_MS);
    ck_assert_ptr_null(s.got);
    ck_assert_int_eq(s.ready, 0);
    ck_assert_int_eq(tp_cm_accepting(s.cm), 1);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    side_settle(&s);
    assert_delivered(&s);
    exchange(s.got, s.c, 64);
    side_close_conns(&s);
    tp_cm_free(s.cm);
}
END_TEST

START_TEST(test_choose)
{
    tp_cm_t *cm = tp_cm_new();
    tp_cm_addrs_t both_a = {.tcp = "10.0.0.1:5000", .rdma = "10.0.1.1:5001"};
    tp_cm_addrs_t both_b = {.tcp = "10.0.0.2:5000", .rdma = "[fe80::2]:5001"};
    tp_cm_addrs_t tcp_only = {.tcp = "10.0.0.3:5000"};
    tp_conn_t *c = NULL;

    ck_assert_ptr_nonnull(cm);
    ck_assert_int_eq(tp_cm_mode(cm), TP_CM_AUTO);
    ck_assert_ptr_eq(tp_cm_choose(cm, &both_a, &both_b), &tp_rdma);
    ck_assert_ptr_eq(tp_cm_choose(cm, &both_a, &tcp_only), &tp_tcp);
    ck_assert_ptr_eq(tp_cm_choose(cm, &tcp_only, &both_b), &tp_tcp);
    ck_assert_int_eq(tp_cm_set_mode(cm, "TCP"), 0);
    ck_assert_int_eq(tp_cm_mode(cm), TP_CM_TCP);
    ck_assert_ptr_eq(tp_cm_choose(cm, &both_a, &both_b), &tp_tcp);
    ck_assert_int_eq(tp_cm_set_mode(cm, "foo"), -EINVAL);
    ck_assert_int_eq(tp_cm_mode(cm), TP_CM_TCP); /* unchanged */
    ck_assert_int_eq(tp_cm_set_mode(cm, "roce"), 0);
    ck_assert_int_eq(tp_cm_mode(cm), TP_CM_RDMA);
    ck_assert_ptr_eq(tp_cm_choose(cm, &both_a, &both_b), &tp_rdma);
    ck_assert_ptr_null(tp_cm_choose(cm, &both_a, &tcp_only));
    ck_assert_ptr_null(tp_cm_choose(cm, &tcp_only, &both_b));
    ck_assert_int_eq(tp_cm_connect(cm, &both_a, 1, &tcp_only, 0, 2, job_j, key_j, &c), -ENODEV);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(tp_cm_set_mode(cm, "Rdma"), 0);
    ck_assert_int_eq(tp_cm_mode(cm), TP_CM_RDMA);
    ck_assert_int_eq(tp_cm_set_mode(cm, NULL), 0);
    ck_assert_int_eq(tp_cm_mode(cm), TP_CM_AUTO);
    ck_assert_int_eq(tp_cm_set_mode(cm, "tcp"), 0);
    ck_assert_int_eq(tp_cm_set_mode(cm, ""), 0);
    ck_assert_int_eq(tp_cm_mode(cm), TP_CM_AUTO);
    tp_cm_free(cm);
}
END_TEST

/* The listener comes first: a listening socket on the port tp_cm_listen gave. */
START_TEST(test_poll_fds_listener_first)
{
    struct pollfd pfd[MAX_FDS];
    struct sockaddr_storage ss, want;
    socklen_t len = sizeof(ss);
    int listening = 0, lfd;
    socklen_t ilen = sizeof(listening);
    side_t s;

    side_listen(&s);
    ck_assert_int_eq(tp_cm_poll_fds(s.cm, pfd, MAX_FDS), 1);
    ck_assert_int_eq(pfd[0].events, POLLIN);
    ck_assert_int_eq(getsockopt(pfd[0].fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ilen), 0);
    ck_assert_int_eq(listening, 1);
    ck_assert_int_eq(getsockname(pfd[0].fd, (struct sockaddr *)&ss, &len), 0);
    ck_assert_int_eq(net_addr_parse(s.addrs.tcp, &want, NULL), 0);
    ck_assert_int_eq(((struct sockaddr_in *)&ss)->sin_port,
                     ((struct sockaddr_in *)&want)->sin_port);
    /* While a connection is accepted, its fds follow the listener's. */
    lfd = pfd[0].fd;
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    side_connect(&s, job_j, key_j);
    ck_assert_int_eq(poll(pfd, 1, DEADLINE_MS), 1);
    tp_cm_polled(s.cm, pfd, 1);
    tp_cm_progress(s.cm);
    ck_assert_int_eq(tp_cm_accepting(s.cm), 1);
    ck_assert_int_ge(tp_cm_poll_fds(s.cm, pfd, MAX_FDS), 2);
    ck_assert_int_eq(pfd[0].fd, lfd);
    ck_assert_int_eq(pfd[0].events, POLLIN);
    ck_assert_int_ne(pfd[1].fd, lfd);
    ck_assert_int_eq(tp_cm_poll_fds(s.cm, pfd, 1), 1); /* max is kept */
    side_settle(&s);
    assert_delivered(&s);
    side_close_conns(&s);
    tp_cm_free(s.cm);
}
END_TEST

/*
 * A listener poll() found readable is accepted from at the next progress, not 20 ms later.
 * The negative half holds only if this thread ran without a pause: it is checked when so.
 */
START_TEST(test_polled_accepts_at_once)
{
    struct pollfd pfd[MAX_FDS];
    long long t0, end = now_ms() + DEADLINE_MS;
    side_t s;

    side_listen(&s);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    t0 = now_ms();
    tp_cm_progress(s.cm); /* accepts now, and next in 20 ms unless poll() says so */
    side_connect(&s, job_j, key_j);
    ck_assert_int_eq(tp_cm_poll_fds(s.cm, pfd, MAX_FDS), 1);
    ck_assert_int_eq(poll(pfd, 1, DEADLINE_MS), 1);
    tp_cm_progress(s.cm);
    if (now_ms() - t0 < 10)
        ck_assert_int_eq(tp_cm_accepting(s.cm), 0);
    tp_cm_polled(s.cm, pfd, 1);
    tp_cm_progress(s.cm);
    ck_assert_int_eq(tp_cm_accepting(s.cm), 1);
    while (now_ms() < end && (s.got == NULL || s.c_state != 1))
        side_step(&s);
    assert_delivered(&s);
    side_close_conns(&s);
    tp_cm_free(s.cm);
}
END_TEST

/* Claims are counted: the last release forgets the job, and its next connection is refused. */
START_TEST(test_release_counts)
{
    side_t s;

    side_listen(&s);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    tp_cm_job_release(s.cm, job_x); /* unknown: nothing */
    tp_cm_job_release(s.cm, job_j);
    side_connect(&s, job_j, key_j);
    side_settle(&s);
    assert_delivered(&s);
    side_close_conns(&s);
    tp_cm_job_release(s.cm, job_j);
    side_connect(&s, job_j, key_j);
    side_settle(&s);
    side_drive(&s, HOLD_MS);
    assert_refused(&s);
    side_close_conns(&s);
    /* Once forgotten, a job expected and claimed anew is served again. */
    ck_assert_int_eq(tp_cm_job_expect(s.cm, job_j, key_j), 0);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    side_connect(&s, job_j, key_j);
    side_settle(&s);
    assert_delivered(&s);
    side_close_conns(&s);
    tp_cm_free(s.cm);
}
END_TEST

/* A wrong key for a claimed job fails the handshake: nothing handed out or kept. */
START_TEST(test_wrong_key_refused)
{
    static const uint8_t bad_key[AUTH_KEY_BYTES] = "tp-cm-key-bad..";
    side_t s;

    side_listen(&s);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    side_connect(&s, job_j, bad_key);
    side_settle(&s);
    side_drive(&s, HOLD_MS);
    assert_refused(&s);
    side_close_conns(&s);
    tp_cm_free(s.cm);
}
END_TEST

/*
 * HCCLD_TCP_NSOCKS=3: B opens 3 sockets, A gathers them into one connection for node 1, and
 * a message split over the stripes arrives intact. The settings are read once per process;
 * Check's default fork gives this test its own.
 */
START_TEST(test_striped_gathered)
{
    struct pollfd pfd[MAX_FDS];
    uint32_t threshold;
    unsigned n;
    side_t s;

    setenv("HCCLD_TCP_NSOCKS", "3", 1);
    setenv("HCCL_MULTI_QP_THRESHOLD", "1", 1);
    n = tp_stripe_count(TP_KIND_TCP, &threshold);
    unsetenv("HCCLD_TCP_NSOCKS");
    unsetenv("HCCL_MULTI_QP_THRESHOLD");
    ck_assert_msg(n == 3, "HCCLD_TCP_NSOCKS was read before this test (CK_FORK=no?)");
    side_listen(&s);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    side_connect(&s, job_j, key_j);
    side_settle(&s);
    assert_delivered(&s);
    ck_assert_int_eq(tp_poll_fds(s.got, pfd, MAX_FDS), 3);
    ck_assert_int_eq(tp_poll_fds(s.c, pfd, MAX_FDS), 3);
    exchange(s.got, s.c, 8 * threshold + 5);
    side_close_conns(&s);
    tp_cm_free(s.cm);
}
END_TEST

/* Freeing the manager closes what it holds: one connection waiting for a claim, one ready
 * but not taken (ASan's leak check sees the rest). */
START_TEST(test_free_closes_held)
{
    static const uint8_t job_e[AUTH_JOB_BYTES] = "tp-cm-job-E....";
    side_t s, e;
    long long end = now_ms() + DEADLINE_MS;

    side_listen(&s);
    ck_assert_int_eq(tp_cm_job_claim(s.cm, job_j, key_j), 0);
    ck_assert_int_eq(tp_cm_job_expect(s.cm, job_e, key_j), 0);
    side_connect(&s, job_j, key_j);
    e = s;
    side_connect(&e, job_e, key_j);
    while (now_ms() < end && (s.ready == 0 || e.c_state == 0 || s.c_state == 0)) {
        s.ready += tp_cm_progress(s.cm);
        if (s.c_state == 0)
            s.c_state = tp_conn_state(s.c);
        if (e.c_state == 0)
            e.c_state = tp_conn_state(e.c);
        poll(NULL, 0, 1);
    }
    ck_assert_int_eq(s.ready, 1);
    ck_assert_int_eq(s.c_state, 1);
    ck_assert_int_eq(e.c_state, 1);
    ck_assert_int_eq(tp_cm_accepting(s.cm), 1);
    tp_cm_free(s.cm);
    tp_close(s.c);
    tp_close(e.c);
}
END_TEST

Suite *tp_cm_suite(void)
{
    Suite *s = suite_create("tp_cm");
    TCase *tc = tcase_create("loopback");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_claimed_delivered);
    tcase_add_test(tc, test_unknown_job_refused);
    tcase_add_test(tc, test_expected_then_claimed);
    tcase_add_test(tc, test_choose);
    tcase_add_test(tc, test_poll_fds_listener_first);
    tcase_add_test(tc, test_polled_accepts_at_once);
    tcase_add_test(tc, test_release_counts);
    tcase_add_test(tc, test_wrong_key_refused);
    tcase_add_test(tc, test_striped_gathered);
    tcase_add_test(tc, test_free_closes_held);
    suite_add_tcase(s, tc);
    return s;
}
