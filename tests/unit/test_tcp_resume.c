/*
 * Resumable TCP connections (daemon/transport/tcp_resume.c): the cases every resumable
 * transport passes (tests/transport/resume.c), with the pair's sockets reset under the transport
 * (ss -K: needs root, as the suite's other resets), and what only TCP has: a send larger than
 * the replay ring, a refused HELLO, an end without BYE, ACKREQ. The connecting side dials the
 * listener again and the accepting side takes the new socket (the husk it came on is closed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../transport/resume.h"
#include "tcp_fixture.h"
#include "test_list.h"
#include "transport/tcp_conn.h"

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

static void ready(pair_t *p)
{
    use_tcp();
    pair_ready(p);
}

/* The sockets fail twice while messages cross both ways: all arrive, once, intact. */
START_TEST(test_resume_delivers_everything_once)
{
    pair_t p;

    ready(&p);
    resume_twice(&p, cut);
    pair_close(&p);
}
END_TEST

/* A send larger than the replay ring is not copied: it keeps its user's buffer, completes only
 * once acknowledged (its side asks for the ACK), and goes again from its start after a cut in
 * the middle of it. */
START_TEST(test_resume_send_larger_than_ring)
{
    pair_t p;

    ready(&p);
    resume_mid_send(&p, cut, (20u << 20) + 5);
    pair_close(&p);
}
END_TEST

/* Sends that fill the replay ring to its last byte (16 copies of 1 MiB) and go on while the
 * first ones are not acknowledged yet: the next copy starts again at the ring's start. It once
 * went on past the ring's end, over the copies' records and whatever came next (found by
 * bench/retry_cost.sh with RATE: a daemon aborted on a corrupted heap, another livelocked). */
START_TEST(test_ring_wraps_at_its_end)
{
    enum { N = 48 };
    const size_t len = 1u << 20;
    uint8_t *out[N], *in[N];
    tp_req_t *r[2 * N];
    int status[2 * N];
    pair_t p;

    ready(&p);
    resume_set_retry(&p, 5000);
    for (int i = 0; i < N; i++) {
        out[i] = pattern(len, (unsigned)i);
        in[i] = calloc(1, len);
        status[i] = status[N + i] = 1;
        ck_assert_int_eq(tp_isend(p.c, out[i], len, NULL, 3, &r[i]), 0);
        ck_assert_int_eq(tp_irecv(p.a, in[i], len, NULL, 3, &r[N + i]), 0);
    }
    ck_assert_int_eq(resume_drive(&p, r, 2 * N, status, fx->deadline_ms), 0);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(status[i] == 0 && status[N + i] == 0, "message %d: %d, %d", i, status[i],
                      status[N + i]);
        ck_assert_msg(memcmp(in[i], out[i], len) == 0, "message %d", i);
        free(out[i]);
        free(in[i]);
    }
    resume_end();
    pair_close(&p);
}
END_TEST

/* Without retry the same cut fails the requests in flight, with the link's error. */
START_TEST(test_no_retry_fails_at_once)
{
    pair_t p;

    ready(&p);
    resume_without_retry(&p, cut);
    pair_close(&p);
}
END_TEST

/* A connection that cannot come back (no one listens any more) fails once the hold time has
 * passed, with the error that suspended it, and not before. */
START_TEST(test_hold_time_ends_it)
{
    pair_t p;

    ready(&p);
    resume_hold_ends(&p, cut);
    pair_close(&p);
}
END_TEST

/* A HELLO that claims to resume a connection this side never had is refused. */
static void mark_resume(tp_conn_t *c)
{
    tcp_conn_of(c)->hs.flags = TCP_HS_F_RESUME; /* a name it never gave */
}

START_TEST(test_resume_of_unknown_refused)
{
    pair_t p;

    ready(&p);
    resume_unknown_refused(&p, mark_resume);
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
    ready(p);
    resume_set_retry(p, 5000);
    ck_assert_int_eq(tp_irecv(p->a, in, 64, NULL, 3, r), 0);
}

/* A side that closes on purpose says BYE first: the other takes the end for an end. */
START_TEST(test_close_says_bye)
{
    pair_t p;

    ready(&p);
    resume_close_says_bye(&p);
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

/* Writes a control record (ACKREQ, ...) with tag n on c's socket, between its own records. */
static void raw_ctl(tp_conn_t *c, uint32_t kind, uint64_t n)
{
    tcp_hdr_t h = {.flags = TCP_HDR_F_CTL, .tag = n, .len = 0, .crc = kind};
    uint8_t out[TCP_HDR_BYTES];

    ck_assert_ptr_null(tcp_conn_of(c)->sendq.head); /* nothing of its own half written */
    tcp_hdr_encode(&h, out);
    ck_assert_int_eq(write(tcp_conn_of(c)->fd, out, sizeof(out)), (ssize_t)sizeof(out));
}

/* Drives both sides for ms (a receive each that never completes, tested), then how many copies
 * of its sends the connecting side still keeps for replay. */
static uint32_t copies_after(pair_t *p, long long ms)
{
    uint8_t x[8], y[8];
    tp_req_t *rc, *ra;
    int done;

    ck_assert_int_eq(tp_irecv(p->c, x, sizeof(x), NULL, 99, &rc), 0);
    ck_assert_int_eq(tp_irecv(p->a, y, sizeof(y), NULL, 99, &ra), 0);
    for (long long end = now_ms() + ms; now_ms() < end; usleep(1000)) {
        ck_assert_int_eq(tp_test(rc, &done), 0);
        ck_assert_int_eq(tp_test(ra, &done), 0);
    }
    tp_cancel(rc);
    tp_cancel(ra);
    return tcp_conn_of(p->c)->rs.copies;
}

/* Acknowledgements are lazy (every TCP_ACK_MSGS messages or TCP_ACK_BYTES): 3 small sends stay
 * kept for replay. An ACKREQ for 2 makes the peer acknowledge as it reads, up to the 3rd. */
START_TEST(test_ackreq_makes_the_peer_acknowledge)
{
    uint8_t msg[3][16] = {{1}, {2}, {3}};
    tp_req_t *r;
    pair_t p;

    ready(&p);
    resume_set_retry(&p, 5000);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(tp_isend(p.c, msg[i], sizeof(msg[i]), NULL, 7, &r), 0);
        ck_assert_int_eq(wait_one(r, 3000), 0); /* copied once written: done */
    }
    ck_assert_uint_eq(copies_after(&p, 200), 3);
    raw_ctl(p.c, TCP_CTL_ACKREQ, 2);
    ck_assert_uint_eq(copies_after(&p, 200), 0);
    pair_close(&p);
}
END_TEST

/* An ACKREQ for no message is malformed: the peer fails the connection (-EPROTO). */
START_TEST(test_ackreq_of_nothing_fails)
{
    uint8_t in[64];
    tp_req_t *r;
    pair_t p;

    pair_waiting(&p, in, &r);
    raw_ctl(p.c, TCP_CTL_ACKREQ, 0);
    ck_assert_int_eq(wait_one(r, 3000), -EPROTO);
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
    tcase_add_test(tc, test_ring_wraps_at_its_end);
    tcase_add_test(tc, test_no_retry_fails_at_once);
    tcase_add_test(tc, test_hold_time_ends_it);
    tcase_add_test(tc, test_resume_of_unknown_refused);
    tcase_add_test(tc, test_close_says_bye);
    tcase_add_test(tc, test_end_without_bye_suspends);
    tcase_add_test(tc, test_ackreq_makes_the_peer_acknowledge);
    tcase_add_test(tc, test_ackreq_of_nothing_fails);
    suite_add_tcase(s, tc);
    return s;
}
