/*
 * What every transport must do (transport/transport.h), run against TCP on loopback and
 * against RDMA between two soft-RoCE devices: the key handshake, messages of every size both
 * ways, matching by tag, withdrawing requests, forgetting a gone comm's messages, length
 * mismatches, flow control under many messages, peers that go away, and sleeping when idle.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pair.h"

START_TEST(test_handshake_ok)
{
    pair_t p;

    pair_ready(&p);
    ck_assert_uint_eq(fx->tp->conn_peer_node(p.a), 7);
    ck_assert_uint_eq(fx->tp->conn_peer_node(p.c), TP_NODE_UNKNOWN);
    printf("%s: handshake in %lld ms\n", fx->name, p.ms);
    pair_close(&p);
}
END_TEST

START_TEST(test_wrong_key_refused)
{
    uint8_t key[AUTH_KEY_BYTES];
    pair_t p;
    tp_req_t *r;

    memcpy(key, the_job.key, sizeof(key));
    key[3] ^= 1;
    pair_open(&p, the_job.id, key);
    ck_assert_int_eq(p.c_state, -EACCES);
    ck_assert_int_eq(p.a_state, -EACCES);
    ck_assert_int_lt(p.ms, fx->deadline_ms);
    ck_assert_int_lt(fx->tp->isend(p.c, "x", 1, NULL, 1, &r), 0);
    ck_assert_int_lt(fx->tp->irecv(p.a, key, 1, NULL, 1, &r), 0);
    pair_close(&p);
}
END_TEST

START_TEST(test_unknown_job_refused)
{
    uint8_t id[AUTH_JOB_BYTES] = "another-job";
    pair_t p;

    pair_open(&p, id, the_job.key);
    ck_assert_int_eq(p.c_state, -EACCES);
    ck_assert_int_eq(p.a_state, -EACCES);
    ck_assert_int_lt(p.ms, fx->deadline_ms);
    pair_close(&p);
}
END_TEST

/* Nothing listens on the port: the connecting side fails (at once or while connecting), it
 * does not wait for ever. */
START_TEST(test_no_listener_refused)
{
    char addr[TP_ADDR_MAX];
    tp_listener_t *l;
    pair_t p = {0};
    long long end = now_ms() + fx->deadline_ms;
    int st;

    ck_assert_int_eq(fx->tp->listen(fx->server_ip, &l, addr, sizeof(addr)), 0);
    fx->tp->listen_close(l);
    st = pair_connect(&p, addr, the_job.id, the_job.key);
    while (st == 0 && now_ms() < end) {
        st = fx->tp->conn_state(p.c);
        if (st == 0)
            pair_wait(&p);
    }
    ck_assert_int_lt(st, 0);
    pair_close(&p);
}
END_TEST

/* Every size in both directions at once, all posted before any progress, checked byte by
 * byte, nothing written past the end. */
START_TEST(test_sizes_both_directions)
{
    const size_t sizes[] = {0, 1, 4095, 1048579, fx->big, 1, 0};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uint8_t *src[2][N], *dst[2][N];
    tp_req_t *r[4 * N];
    int status[4 * N], n = 0, bad = 0;
    size_t each = 0;
    long long t0;
    pair_t p;

    for (int i = 0; i < N; i++)
        each += sizes[i];
    pair_ready(&p);
    if (fx->traffic != NULL)
        fx->traffic(1, each);
    t0 = now_ms();
    for (int d = 0; d < 2; d++) {
        tp_conn_t *from = d ? p.a : p.c, *to = d ? p.c : p.a;
        for (int i = 0; i < N; i++) {
            src[d][i] = pattern(sizes[i], (unsigned)(d * 100 + i));
            dst[d][i] = calloc(1, sizes[i] + 1);
            ck_assert_int_eq(fx->tp->irecv(to, dst[d][i], sizes[i], NULL, 1000 * d + i, &r[n++]),
                             0);
            ck_assert_int_eq(fx->tp->isend(from, src[d][i], sizes[i], NULL, 1000 * d + i, &r[n++]),
                             0);
        }
    }
    ck_assert_int_eq(wait_all(&p, r, n, status), 0);
    printf("%s: %zu bytes each way in %lld ms\n", fx->name, each, now_ms() - t0);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(status[i], 0);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < N; i++) {
            bad += memcmp(src[d][i], dst[d][i], sizes[i]) != 0;
            bad += dst[d][i][sizes[i]] != 0;
            free(src[d][i]);
            free(dst[d][i]);
        }
    ck_assert_int_eq(bad, 0);
    if (fx->traffic != NULL)
        fx->traffic(0, each);
    pair_close(&p);
}
END_TEST

/* Receives match by tag, not by arrival: messages of other tags that arrive first wait in
 * their own buffers, and messages of one tag keep their order. */
START_TEST(test_tag_order)
{
    enum { M = 4, LEN = 3000 };
    static const uint64_t tags[M] = {7, 9, 7, 11};
    static const int recv_order[M] = {3, 2, 1, 0}; /* by send index, for tags 11, 7, 9, 7 */
    uint8_t *src[M], dst[M][LEN];
    tp_req_t *r[2 * M];
    int status[2 * M];
    pair_t p;

    pair_ready(&p);
    for (int i = 0; i < M; i++) {
        src[i] = pattern(LEN, (unsigned)i + 40);
        ck_assert_int_eq(fx->tp->isend(p.c, src[i], LEN, NULL, tags[i], &r[i]), 0);
    }
    /* Everything arrives before any receive is posted, except maybe the last one. */
    ck_assert_int_eq(wait_all(&p, r, M - 1, status), 0);
    for (int k = 0; k < M; k++) {
        int i = recv_order[k];
        ck_assert_int_eq(fx->tp->irecv(p.a, dst[i], LEN, NULL, tags[i], &r[M + k]), 0);
    }
    ck_assert_int_eq(wait_all(&p, r + M - 1, M + 1, status), 0);
    for (int k = 0; k < M + 1; k++)
        ck_assert_int_eq(status[k], 0);
    /* The two messages of tag 7 went to the receives of tag 7 in order: the first posted
     * (for send 2 in recv_order) got send 0's data. */
    ck_assert_int_eq(memcmp(dst[2], src[0], LEN), 0);
    ck_assert_int_eq(memcmp(dst[0], src[2], LEN), 0);
    ck_assert_int_eq(memcmp(dst[1], src[1], LEN), 0);
    ck_assert_int_eq(memcmp(dst[3], src[3], LEN), 0);
    for (int i = 0; i < M; i++)
        free(src[i]);
    pair_close(&p);
}
END_TEST

/* A withdrawn receive takes no message and a withdrawn unsent send sends none: the next
 * receive of that tag gets the next message, and the connection stays sound (another comm
 * may go on using it). */
START_TEST(test_cancel)
{
    enum { LEN = 3000, BLOCKERS = 40 };
    uint8_t *a = pattern(LEN, 60), *b = pattern(LEN, 61), dead[LEN], got[LEN];
    tp_req_t *r[3], *gone, *blocker[BLOCKERS];
    int status[BLOCKERS], done = 0;
    pair_t p;

    pair_ready(&p);
    ck_assert_int_eq(fx->tp->irecv(p.a, dead, LEN, NULL, 5, &gone), 0);
    fx->tp->cancel(gone);
    /* A send still queued leaves without a byte sent: here behind messages of another tag
     * (more than RDMA's credits), with nothing driven before the cancel. */
    for (int i = 0; i < BLOCKERS; i++)
        ck_assert_int_eq(fx->tp->isend(p.c, a, LEN, NULL, 99, &blocker[i]), 0);
    ck_assert_int_eq(fx->tp->isend(p.c, b, LEN, NULL, 5, &gone), 0);
    fx->tp->cancel(gone);
    ck_assert_int_eq(fx->tp->isend(p.c, a, LEN, NULL, 5, &r[0]), 0);
    ck_assert_int_eq(fx->tp->irecv(p.a, got, LEN, NULL, 5, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[0], 0);
    ck_assert_int_eq(status[1], 0);
    ck_assert_int_eq(memcmp(got, a, LEN), 0);
    ck_assert_int_eq(wait_all(&p, blocker, BLOCKERS, status), 0);
    /* Nothing else arrives for tag 5: the cancelled send never went out. */
    ck_assert_int_eq(fx->tp->isend(p.c, b, LEN, NULL, 6, &r[0]), 0);
    ck_assert_int_eq(fx->tp->irecv(p.a, got, LEN, NULL, 6, &r[1]), 0);
    ck_assert_int_eq(fx->tp->irecv(p.a, dead, LEN, NULL, 5, &r[2]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(memcmp(got, b, LEN), 0);
    ck_assert_int_eq(fx->tp->test(r[2], &done), 0);
    ck_assert_int_eq(done, 0);
    fx->tp->cancel(r[2]);
    free(a);
    free(b);
    pair_close(&p);
}
END_TEST

/* A comm that leaves a shared connection: its kept messages go, and for the given time
 * those still to come; the other comm's traffic goes on, and after the time the tag bits
 * are usable again. Tags: comm bits in 61..32 as in span/tag.h. */
START_TEST(test_forget)
{
    enum { LEN = 5000 };
    const uint64_t mask = 0x3fffffffull << 32, gone = 1ull << 32, other = 2ull << 32;
    uint8_t *src = pattern(LEN, 70), got[LEN], dead[LEN];
    tp_req_t *r[4];
    int status[4], done = 0;
    pair_t p;

    pair_ready(&p);
    ck_assert_int_eq(fx->tp->isend(p.c, src, LEN, NULL, gone | 1, &r[0]), 0);
    ck_assert_int_eq(fx->tp->isend(p.c, src, LEN, NULL, gone | 2, &r[1]), 0);
    ck_assert_int_eq(fx->tp->isend(p.c, src, LEN, NULL, other | 1, &r[2]), 0);
    ck_assert_int_eq(fx->tp->irecv(p.a, got, LEN, NULL, other | 1, &r[3]), 0);
    /* In order on the connection: the two messages of the gone comm are kept by now. */
    ck_assert_int_eq(wait_all(&p, r, 4, status), 0);
    fx->tp->forget(p.a, mask, gone, 10ull * 1000000000);
    /* A late one of the gone comm, then the other comm's next. */
    ck_assert_int_eq(fx->tp->isend(p.c, src, LEN, NULL, gone | 3, &r[0]), 0);
    ck_assert_int_eq(fx->tp->isend(p.c, src, LEN, NULL, other | 2, &r[1]), 0);
    ck_assert_int_eq(fx->tp->irecv(p.a, got, LEN, NULL, other | 2, &r[2]), 0);
    ck_assert_int_eq(wait_all(&p, r, 3, status), 0);
    ck_assert_int_eq(status[2], 0);
    ck_assert_int_eq(memcmp(got, src, LEN), 0);
    /* None of the gone comm's three messages is there any more. */
    for (uint64_t low = 1; low <= 3; low++) {
        ck_assert_int_eq(fx->tp->irecv(p.a, dead, LEN, NULL, gone | low, &r[0]), 0);
        ck_assert_int_eq(fx->tp->test(r[0], &done), 0);
        ck_assert_int_eq(done, 0);
        fx->tp->cancel(r[0]);
    }
    /* Forgotten for a moment only: afterwards a comm with those bits is served again. */
    fx->tp->forget(p.a, mask, 3ull << 32, 1);
    usleep(1000);
    ck_assert_int_eq(fx->tp->isend(p.c, src, LEN, NULL, 3ull << 32, &r[0]), 0);
    ck_assert_int_eq(fx->tp->irecv(p.a, got, LEN, NULL, 3ull << 32, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[1], 0);
    free(src);
    pair_close(&p);
}
END_TEST

/* A message of another length than its receive: -EPROTO, nothing written into the buffer. */
START_TEST(test_len_mismatch)
{
    uint8_t src[64] = {1, 2, 3}, dst[64 + 8];
    tp_req_t *r[2];
    int status[2];
    pair_t p;

    pair_ready(&p);
    memset(dst, 0x5a, sizeof(dst));
    ck_assert_int_eq(fx->tp->irecv(p.a, dst, 16, NULL, 5, &r[1]), 0);
    ck_assert_int_eq(fx->tp->isend(p.c, src, 64, NULL, 5, &r[0]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[1], -EPROTO);
    for (size_t i = 0; i < sizeof(dst); i++)
        ck_assert_uint_eq(dst[i], 0x5a);
    pair_close(&p);
}
END_TEST

/* The same with a message that waited for its receive. */
START_TEST(test_len_mismatch_late)
{
    uint8_t src[64] = {1, 2, 3}, dst[64];
    tp_req_t *r[2], *other;
    int status[2], done = 0;
    pair_t p;

    pair_ready(&p);
    ck_assert_int_eq(fx->tp->isend(p.c, src, 64, NULL, 3, &r[0]), 0);
    ck_assert_int_eq(wait_all(&p, r, 1, status), 0);
    /* A receive of another tag drives the other side until the message sits there. */
    ck_assert_int_eq(fx->tp->irecv(p.a, dst, 0, NULL, 99, &other), 0);
    drive(&p, &other, 1, &done, 200);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(fx->tp->irecv(p.a, dst, 16, NULL, 3, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r + 1, 1, status + 1), 0);
    ck_assert_int_eq(status[1], -EPROTO);
    pair_close(&p);
}
END_TEST

/* Many small messages in flight both ways, receives posted first on one side and last on the
 * other: none is lost, each tag's order holds. */
START_TEST(test_many_in_flight)
{
    enum { M = 60, LEN = 1000 };
    uint8_t *src[2], *dst[2];
    tp_req_t *r[4 * M];
    int status[4 * M], n = 0;
    pair_t p;

    pair_ready(&p);
    for (int d = 0; d < 2; d++) {
        src[d] = pattern((size_t)M * LEN, 90 + (unsigned)d);
        dst[d] = calloc(M, LEN);
    }
    for (int i = 0; i < M; i++) /* c -> a: receives first */
        ck_assert_int_eq(fx->tp->irecv(p.a, dst[0] + i * LEN, LEN, NULL, i % 3, &r[n++]), 0);
    for (int i = 0; i < M; i++) {
        ck_assert_int_eq(fx->tp->isend(p.c, src[0] + i * LEN, LEN, NULL, i % 3, &r[n++]), 0);
        ck_assert_int_eq(fx->tp->isend(p.a, src[1] + i * LEN, LEN, NULL, i % 3, &r[n++]), 0);
    }
    for (int i = 0; i < M; i++) /* a -> c: receives last */
        ck_assert_int_eq(fx->tp->irecv(p.c, dst[1] + i * LEN, LEN, NULL, i % 3, &r[n++]), 0);
    ck_assert_int_eq(wait_all(&p, r, n, status), 0);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(status[i], 0);
    for (int d = 0; d < 2; d++) {
        ck_assert_int_eq(memcmp(src[d], dst[d], (size_t)M * LEN), 0);
        free(src[d]);
        free(dst[d]);
    }
    pair_close(&p);
}
END_TEST

/* A huge message both sides have started on, so neither is done. */
static void mid_transfer(pair_t *p, tp_req_t **r, uint8_t *src, uint8_t *dst)
{
    int done[2] = {0};

    pair_ready(p);
    ck_assert_int_eq(fx->tp->isend(p->c, src, fx->huge, NULL, 1, &r[0]), 0);
    ck_assert_int_eq(fx->tp->irecv(p->a, dst, fx->huge, NULL, 1, &r[1]), 0);
    drive(p, r, 2, done, fx->mid_ms);
    ck_assert_int_eq(done[0] + done[1], 0);
}

/* The receiving side goes away mid-message: the sender's request fails, it does not hang. */
START_TEST(test_peer_close_mid_transfer)
{
    uint8_t *src = pattern(fx->huge, 3), *dst = malloc(fx->huge);
    tp_req_t *r[2];
    int status[2];
    long long t0;
    pair_t p;

    mid_transfer(&p, r, src, dst);
    fx->tp->close(p.a);
    p.a = NULL;
    t0 = now_ms();
    ck_assert_int_eq(wait_all(&p, r, 1, status), 0);
    printf("%s: the sender saw %d %lld ms after the receiver closed\n", fx->name, status[0],
           now_ms() - t0);
    ck_assert_int_lt(status[0], 0);
    pair_close(&p);
    free(src);
    free(dst);
}
END_TEST

/* The sending side goes away mid-message: the pending receive fails. */
START_TEST(test_sender_close_mid_transfer)
{
    uint8_t *src = pattern(fx->huge, 4), *dst = malloc(fx->huge);
    tp_req_t *r[2];
    int status[2];
    pair_t p;

    mid_transfer(&p, r, src, dst);
    fx->tp->close(p.c);
    p.c = NULL;
    ck_assert_int_eq(wait_all(&p, &r[1], 1, status), 0);
    ck_assert_int_eq(status[0], -ECONNRESET);
    pair_close(&p);
    free(src);
    free(dst);
}
END_TEST

/* A peer that closes between messages has finished sending: what it sent stays readable. */
START_TEST(test_peer_close_between_messages)
{
    enum { LEN = 3000 };
    uint8_t *src = pattern(LEN, 5), got[LEN];
    tp_req_t *r[3];
    int status[3], done = 0;
    pair_t p;

    pair_ready(&p);
    ck_assert_int_eq(fx->tp->isend(p.c, src, LEN, NULL, 1, &r[0]), 0);
    ck_assert_int_eq(fx->tp->irecv(p.a, got, LEN, NULL, 2, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 1, status), 0);
    ck_assert_int_eq(status[0], 0);
    fx->tp->close(p.c);
    p.c = NULL;
    /* The receive of tag 2 can never be filled; the message of tag 1 is still there. */
    ck_assert_int_eq(wait_all(&p, &r[1], 1, status), 0);
    ck_assert_int_eq(status[0], -ECONNRESET);
    ck_assert_int_eq(fx->tp->irecv(p.a, got, LEN, NULL, 1, &r[2]), 0);
    ck_assert_int_eq(fx->tp->test(r[2], &done), 0);
    ck_assert_int_eq(done, 1);
    ck_assert_int_eq(memcmp(got, src, LEN), 0);
    pair_close(&p);
    free(src);
}
END_TEST

/* Idle, every fd stays quiet: the engine can sleep in poll() and never spins. */
START_TEST(test_idle_sleeps)
{
    struct pollfd pfd[PAIR_MAX_FDS];
    tp_req_t *r;
    uint8_t b[8];
    int done = 0, quiet = 0;
    pair_t p;

    pair_ready(&p);
    ck_assert_int_eq(fx->tp->irecv(p.a, b, sizeof(b), NULL, 1, &r), 0);
    /* Late events of the handshake may need a pass or two to be taken. */
    for (int i = 0; i < 5 && !quiet; i++) {
        ck_assert_int_eq(fx->tp->test(r, &done), 0);
        ck_assert_int_eq(fx->tp->conn_state(p.c), 1);
        ck_assert_int_eq(fx->tp->conn_state(p.a), 1);
        quiet = poll(pfd, (nfds_t)pair_fds(&p, pfd), 300) == 0;
    }
    ck_assert_msg(quiet, "an idle connection keeps an fd readable");
    ck_assert_int_eq(done, 0);
    fx->tp->cancel(r);
    pair_close(&p);
}
END_TEST

void tp_conformance_add(TCase *tc, void (*use)(void))
{
    tcase_add_checked_fixture(tc, use, NULL);
    tcase_add_test(tc, test_handshake_ok);
    tcase_add_test(tc, test_wrong_key_refused);
    tcase_add_test(tc, test_unknown_job_refused);
    tcase_add_test(tc, test_no_listener_refused);
    tcase_add_test(tc, test_sizes_both_directions);
    tcase_add_test(tc, test_tag_order);
    tcase_add_test(tc, test_cancel);
    tcase_add_test(tc, test_forget);
    tcase_add_test(tc, test_len_mismatch);
    tcase_add_test(tc, test_len_mismatch_late);
    tcase_add_test(tc, test_many_in_flight);
    tcase_add_test(tc, test_peer_close_mid_transfer);
    tcase_add_test(tc, test_sender_close_mid_transfer);
    tcase_add_test(tc, test_peer_close_between_messages);
    tcase_add_test(tc, test_idle_sleeps);
}
