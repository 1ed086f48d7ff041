#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "test_list.h"
#include "uds.h"

static size_t encode_hello(uint8_t *buf, size_t cap, uint32_t pid, const char *job)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Hello h = HCCLD__HELLO__INIT;

    h.version = PROTO_VERSION;
    h.pid = pid;
    h.job_name = (char *)job;
    m.req_id = pid;
    m.body_case = HCCLD__MSG__BODY_HELLO;
    m.hello = &h;
    return frame_encode(&m, buf, cap);
}

static void feed(frame_dec_t *d, const uint8_t *p, size_t n)
{
    uint8_t *dst;
    size_t room;

    frame_dec_space(d, &dst, &room);
    ck_assert_uint_ge(room, n);
    memcpy(dst, p, n);
    frame_dec_commit(d, n);
}

START_TEST(test_roundtrip_byte_by_byte)
{
    uint8_t buf[3 * 256];
    size_t n = 0;
    frame_dec_t *d = malloc(sizeof(*d));
    Hccld__Msg *m;
    uint32_t seen = 0;

    frame_dec_init(d);
    for (uint32_t i = 1; i <= 3; i++)
        n += encode_hello(buf + n, sizeof(buf) - n, i, "job");
    /* Frames split at every byte boundary still decode, in order. */
    for (size_t i = 0; i < n; i++) {
        feed(d, buf + i, 1);
        int rc;
        while ((rc = frame_dec_next(d, &m)) == 1) {
            ck_assert_int_eq(m->body_case, HCCLD__MSG__BODY_HELLO);
            ck_assert_uint_eq(m->hello->pid, ++seen);
            ck_assert_str_eq(m->hello->job_name, "job");
            frame_msg_free(m);
        }
        ck_assert_int_eq(rc, 0);
    }
    ck_assert_uint_eq(seen, 3);
    free(d);
}
END_TEST

/* Two answers back to back, the second with a descriptor (as comm init answers carry their
 * shared memory): the reader must hand the descriptor over with the second, not the first. */
START_TEST(test_fds_stay_with_their_frame)
{
    Hccld__Msg a = HCCLD__MSG__INIT, b = HCCLD__MSG__INIT, *m = NULL;
    Hccld__Hello ha = HCCLD__HELLO__INIT, hb = HCCLD__HELLO__INIT;
    uds_conn_t *c = malloc(sizeof(*c));
    int sv[2], fd = open("/dev/null", O_RDONLY);

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ha.pid = 1;
    hb.pid = 2;
    a.body_case = b.body_case = HCCLD__MSG__BODY_HELLO;
    a.hello = &ha;
    b.hello = &hb;
    ck_assert_int_eq(uds_send(sv[0], &a, NULL, 0), 0);
    ck_assert_int_eq(uds_send(sv[0], &b, &fd, 1), 0);
    uds_conn_init(c, sv[1]);
    ck_assert_int_eq(uds_recv(c, &m, 1000), 0);
    ck_assert_uint_eq(m->hello->pid, 1);
    ck_assert_int_eq(c->nfds, 0);
    frame_msg_free(m);
    ck_assert_int_eq(uds_recv(c, &m, 1000), 0);
    ck_assert_uint_eq(m->hello->pid, 2);
    ck_assert_int_eq(c->nfds, 1);
    frame_msg_free(m);
    uds_conn_close(c);
    close(sv[0]);
    close(fd);
    free(c);
}
END_TEST

START_TEST(test_oversized_and_garbage)
{
    frame_dec_t *d = malloc(sizeof(*d));
    Hccld__Msg *m;
    uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    uint8_t bad[12] = {8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    uint8_t big[FRAME_HDR + FRAME_MAX + 64];

    frame_dec_init(d);
    feed(d, huge, sizeof(huge));
    ck_assert_int_eq(frame_dec_next(d, &m), -EMSGSIZE);
    frame_dec_init(d);
    feed(d, bad, sizeof(bad));
    ck_assert_int_eq(frame_dec_next(d, &m), -EBADMSG);
    /* The encoder refuses what the decoder would refuse. */
    char *job = malloc(FRAME_MAX + 1);
    memset(job, 'x', FRAME_MAX);
    job[FRAME_MAX] = '\0';
    ck_assert_uint_eq(encode_hello(big, sizeof(big), 1, job), 0);
    free(job);
    free(d);
}
END_TEST

START_TEST(test_random_bytes_never_crash)
{
    frame_dec_t *d = malloc(sizeof(*d));
    uint8_t junk[512];
    Hccld__Msg *m;

    srand(7);
    for (int round = 0; round < 2000; round++) {
        size_t n = (size_t)(rand() % (int)sizeof(junk));
        for (size_t i = 0; i < n; i++)
            junk[i] = (uint8_t)rand();
        if (n >= 4)
            junk[2] = junk[3] = 0; /* plausible lengths reach the protobuf decoder */
        frame_dec_init(d);
        feed(d, junk, n);
        int rc;
        while ((rc = frame_dec_next(d, &m)) == 1)
            frame_msg_free(m);
        ck_assert(rc == 0 || rc == -EMSGSIZE || rc == -EBADMSG);
    }
    free(d);
}
END_TEST

Suite *frame_suite(void)
{
    Suite *s = suite_create("frame");
    TCase *tc = tcase_create("frame");

    tcase_add_test(tc, test_roundtrip_byte_by_byte);
    tcase_add_test(tc, test_oversized_and_garbage);
    tcase_add_test(tc, test_fds_stay_with_their_frame);
    tcase_add_test(tc, test_random_bytes_never_crash);
    suite_add_tcase(s, tc);
    return s;
}
