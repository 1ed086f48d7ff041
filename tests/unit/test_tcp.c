/*
 * The TCP transport over 127.0.0.1: the conformance suite every transport passes
 * (tests/transport/conformance.c), and what only TCP has: a handshake of garbage bytes, the
 * CRC32C of HCCL_CHECKSUM.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../transport/pair.h"
#include "tcp_fixture.h"
#include "test_list.h"
#include "transport/crc32c.h"
#include "transport/tcp_wire.h"

#define BIG (8u * 1024 * 1024 + 3)
/* More than both socket buffers together hold, so that a transfer is caught in the middle. */
#define HUGE (64u * 1024 * 1024)

static const transport_ops_t *tp = &tp_tcp;

const tp_fixture_t tcp_fixture = {.name = "tcp",
                                  .tp = &tp_tcp,
                                  .server_ip = "127.0.0.1",
                                  .deadline_ms = 10000,
                                  .big = BIG,
                                  .huge = HUGE,
                                  .mid_ms = 1};

void use_tcp(void)
{
    fx = &tcp_fixture;
}

/* Bytes that are no handshake: the accepting side refuses them (-EPROTO). */
START_TEST(test_garbage_handshake_refused)
{
    char addr[TP_ADDR_MAX];
    struct sockaddr_in sin = {.sin_family = AF_INET};
    uint8_t junk[TCP_HS_BYTES];
    pair_t p = {0};
    long long end = now_ms() + tcp_fixture.deadline_ms;
    int fd;

    ck_assert_int_eq(tp->listen("127.0.0.1", &p.l, addr, sizeof(addr)), 0);
    sin.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    memset(junk, 0xab, sizeof(junk));
    ck_assert_int_eq(write(fd, junk, sizeof(junk)), sizeof(junk));
    while (p.a_state == 0 && now_ms() < end) {
        if (p.a == NULL && tp->accept(p.l, pair_lookup, (void *)&the_job, &p.a) != 0)
            p.a = NULL;
        if (p.a != NULL)
            p.a_state = tp->conn_state(p.a);
        pair_wait(&p);
    }
    ck_assert_int_eq(p.a_state, -EPROTO);
    close(fd);
    tp->close(p.a);
    tp->listen_close(p.l);
}
END_TEST

START_TEST(test_checksum)
{
    uint8_t *src = pattern(BIG, 9), *dst = malloc(BIG);
    tp_req_t *r[2];
    int status[2];
    pair_t p;

    setenv("HCCL_CHECKSUM", "1", 1);
    pair_open(&p, the_job.id, the_job.key);
    unsetenv("HCCL_CHECKSUM");
    ck_assert_int_eq(tp->isend(p.c, src, BIG, NULL, 1, &r[0]), 0);
    ck_assert_int_eq(tp->irecv(p.a, dst, BIG, NULL, 1, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[0] | status[1], 0);
    ck_assert_int_eq(memcmp(src, dst, BIG), 0);
    /*
     * isend takes the checksum when posted and the payload when progressing, so a byte
     * changed in between is what the receiver would see from a corrupting wire.
     */
    ck_assert_int_eq(tp->isend(p.c, src, BIG, NULL, 2, &r[0]), 0);
    src[BIG / 2] ^= 0x10;
    ck_assert_int_eq(tp->irecv(p.a, dst, BIG, NULL, 2, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[1], -EBADMSG);
    pair_close(&p);
    free(src);
    free(dst);
}
END_TEST

/* A peer that says something and then resets the connection (SO_LINGER 0, as a crash with
 * unread bytes does): our next send fails, but what it said is still delivered before the
 * connection fails, so a daemon that explains why it leaves (an abort notice) is heard. */
START_TEST(test_reset_after_message_still_delivered)
{
    uint8_t said[100], got[100], ours[16] = {7};
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    struct pollfd pfd;
    tp_req_t *rx, *tx, *m;
    int done = 0, rc = 0;
    pair_t p;

    for (size_t i = 0; i < sizeof(said); i++)
        said[i] = (uint8_t)(i * 3 + 1);
    pair_ready(&p);
    ck_assert_int_eq(tp->irecv(p.a, got, sizeof(got), NULL, 1, &rx), 0);
    ck_assert_int_eq(tp->isend(p.c, said, sizeof(said), NULL, 1, &m), 0);
    ck_assert_int_eq(tp->test(m, &done), 0);
    ck_assert_int_eq(done, 1);
    ck_assert_int_eq(tp->poll_fds(p.c, &pfd, 1), 1);
    ck_assert_int_eq(setsockopt(pfd.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    tp->close(p.c);
    p.c = NULL;
    usleep(50000); /* the reset arrives */
    ck_assert_int_eq(tp->isend(p.a, ours, sizeof(ours), NULL, 4, &tx), 0);
    done = 0;
    for (int i = 0; i < 100 && !done; i++) {
        done = 0;
        rc = tp->test(tx, &done);
        if (!done)
            usleep(1000);
    }
    ck_assert_int_eq(done, 1);
    ck_assert_msg(tp_peer_gone(rc), "the send gave %d", rc);
    done = 0;
    ck_assert_int_eq(tp->test(rx, &done), 0);
    ck_assert_int_eq(done, 1);
    ck_assert_int_eq(memcmp(got, said, sizeof(said)), 0);
    pair_close(&p);
}
END_TEST

/* Waits (at most a second) until r is done, which it must be without error. */
static void wait_done(tp_req_t *r)
{
    int done = 0;

    for (int i = 0; i < 1000 && !done; i++) {
        ck_assert_int_eq(tp->test(r, &done), 0);
        if (!done)
            usleep(1000);
    }
    ck_assert_int_eq(done, 1);
}

/* Sends 4 bytes of v with tag on c and waits until they are out. */
static void send_u32(tp_conn_t *c, uint32_t v, uint64_t tag)
{
    tp_req_t *r;

    ck_assert_int_eq(tp->isend(c, &v, sizeof(v), NULL, tag, &r), 0);
    wait_done(r);
}

static uint32_t recv_u32(tp_conn_t *c, uint64_t tag)
{
    uint32_t v = 0;
    tp_req_t *r;

    ck_assert_int_eq(tp->irecv(c, &v, sizeof(v), NULL, tag, &r), 0);
    wait_done(r);
    return v;
}

/* Messages no receive has taken, carried from a connection to the next one (span/drain.c, a
 * restart of a daemon): those of the tags asked for come out in order, and go before what the
 * next connection brings; the others stay. */
START_TEST(test_kept_carried_over)
{
    tp_retry_stats_t st = {0};
    tp_req_t *idle;
    uint32_t unused;
    int done = 0;
    pair_t p, q;

    pair_ready(&p);
    pair_ready(&q);
    send_u32(p.c, 1, 0x105);
    send_u32(p.c, 3, 0x209);
    send_u32(p.c, 2, 0x105);
    /* A receive nothing matches makes p.a read the three and keep them. */
    ck_assert_int_eq(tp->irecv(p.a, &unused, sizeof(unused), NULL, 77, &idle), 0);
    for (int i = 0; i < 1000 && st.held < 3; i++) {
        ck_assert_int_eq(tp->test(idle, &done), 0);
        tp->retry_stats(p.a, &st);
        if (st.held < 3)
            usleep(1000);
    }
    ck_assert_uint_eq(st.held, 3);
    tp_msg_t *carried = tp->kept_take(p.a, 0xff00, 0x100);
    ck_assert_ptr_nonnull(carried);
    send_u32(q.c, 4, 0x105);
    tp->kept_put(q.a, carried);
    ck_assert_uint_eq(recv_u32(q.a, 0x105), 1);
    ck_assert_uint_eq(recv_u32(q.a, 0x105), 2);
    ck_assert_uint_eq(recv_u32(q.a, 0x105), 4);
    ck_assert_uint_eq(recv_u32(p.a, 0x209), 3);
    tp->cancel(idle);
    pair_close(&p);
    pair_close(&q);
}
END_TEST

/* The standard check value of CRC32C, whole and continued across two calls. */
START_TEST(test_crc32c_check_value)
{
    const char *s = "123456789";

    ck_assert_uint_eq(crc32c(0, s, 9), 0xE3069283u);
    ck_assert_uint_eq(crc32c(crc32c(0, s, 4), s + 4, 5), 0xE3069283u);
}
END_TEST

Suite *tcp_suite(void)
{
    Suite *s = suite_create("tcp");
    TCase *tc = tcase_create("loopback");

    tcase_set_timeout(tc, 60);
    tp_conformance_add(tc, use_tcp);
    tcase_add_test(tc, test_crc32c_check_value);
    tcase_add_test(tc, test_garbage_handshake_refused);
    tcase_add_test(tc, test_checksum);
    tcase_add_test(tc, test_reset_after_message_still_delivered);
    tcase_add_test(tc, test_kept_carried_over);
    suite_add_tcase(s, tc);
    return s;
}
