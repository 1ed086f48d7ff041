/*
 * The TCP transport over 127.0.0.1: two endpoints in this process, both driven from one
 * thread by a poll loop with a deadline, so a bug shows as a failure and never as a hang.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "test_list.h"
#include "transport/crc32c.h"
#include "transport/transport.h"

#define DEADLINE_MS 10000
#define BIG (8u * 1024 * 1024 + 3)
/* More than both socket buffers together hold, so that a transfer is caught in the middle. */
#define HUGE (64u * 1024 * 1024)

static const transport_ops_t *tp = &tp_tcp;

typedef struct job {
    uint8_t id[AUTH_JOB_BYTES];
    uint8_t key[AUTH_KEY_BYTES];
} job_t;

typedef struct pair {
    tp_listener_t *l;
    tp_conn_t *c; /* connecting side */
    tp_conn_t *a; /* accepting side */
    int c_state, a_state;
} pair_t;

static const job_t the_job = {.id = "job-0123456789a", .key = "key-0123456789a"};

static int lookup(void *ctx, const uint8_t job_id[AUTH_JOB_BYTES], uint8_t key_out[AUTH_KEY_BYTES])
{
    const job_t *j = ctx;

    if (memcmp(job_id, j->id, AUTH_JOB_BYTES) != 0)
        return -ENOENT;
    memcpy(key_out, j->key, AUTH_KEY_BYTES);
    return 0;
}

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

/* Sleeps until one of the pair's fds (and the listener's, while accepting) is ready. */
static void pair_wait(pair_t *p)
{
    struct pollfd pfd[3];
    int n = 0;

    if (p->a == NULL) {
        pfd[n++] = (struct pollfd){.fd = tp->listen_fd(p->l), .events = POLLIN};
    }
    if (p->c != NULL)
        n += tp->poll_fds(p->c, pfd + n, 1);
    if (p->a != NULL)
        n += tp->poll_fds(p->a, pfd + n, 1);
    poll(pfd, (nfds_t)n, 50);
}

/* Connects with (job id, key) and runs both handshakes until each side settles. */
static void pair_open(pair_t *p, const uint8_t *id, const uint8_t *key)
{
    char addr[TP_ADDR_MAX];
    long long end = now_ms() + DEADLINE_MS;

    memset(p, 0, sizeof(*p));
    ck_assert_int_eq(tp->listen("127.0.0.1", &p->l, addr, sizeof(addr)), 0);
    ck_assert_int_eq(tp->connect(addr, id, key, 7, &p->c), 0);
    while ((p->c_state == 0 || p->a_state == 0) && now_ms() < end) {
        if (p->a == NULL && tp->accept(p->l, lookup, (void *)&the_job, &p->a) != 0)
            p->a = NULL;
        if (p->c_state == 0)
            p->c_state = tp->conn_state(p->c);
        if (p->a != NULL && p->a_state == 0)
            p->a_state = tp->conn_state(p->a);
        if (p->c_state == 0 || p->a_state == 0)
            pair_wait(p);
    }
    ck_assert_msg(p->a != NULL, "no connection accepted");
}

static void pair_close(pair_t *p)
{
    tp->close(p->c);
    tp->close(p->a);
    tp->listen_close(p->l);
}

/* Tests every request until all are done; status[i] gets each result. Returns 0 or -ETIMEDOUT. */
static int wait_all(pair_t *p, tp_req_t **r, int n, int *status)
{
    long long end = now_ms() + DEADLINE_MS;
    int left = n;

    for (int i = 0; i < n; i++)
        status[i] = 1;
    while (left > 0 && now_ms() < end) {
        for (int i = 0; i < n; i++) {
            int done = 0, rc;
            if (status[i] != 1)
                continue;
            rc = tp->test(r[i], &done);
            if (done) {
                status[i] = rc;
                left--;
            }
        }
        if (left > 0)
            pair_wait(p);
    }
    return left == 0 ? 0 : -ETIMEDOUT;
}

static uint8_t *pattern(size_t len, unsigned seed)
{
    uint8_t *b = malloc(len + 1);

    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)(i * 31 + seed + (i >> 12));
    return b;
}

START_TEST(test_handshake_ok)
{
    pair_t p;

    pair_open(&p, the_job.id, the_job.key);
    ck_assert_int_eq(p.c_state, 1);
    ck_assert_int_eq(p.a_state, 1);
    ck_assert_uint_eq(tp->conn_peer_node(p.a), 7);
    ck_assert_uint_eq(tp->conn_peer_node(p.c), TP_NODE_UNKNOWN);
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
    ck_assert_int_lt(tp->isend(p.c, "x", 1, NULL, 1, &r), 0);
    ck_assert_int_lt(tp->irecv(p.a, key, 1, NULL, 1, &r), 0);
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
    pair_close(&p);
}
END_TEST

START_TEST(test_garbage_handshake_refused)
{
    char addr[TP_ADDR_MAX];
    struct sockaddr_in sin = {.sin_family = AF_INET};
    uint8_t junk[80];
    pair_t p = {0};
    long long end = now_ms() + DEADLINE_MS;
    int fd;

    ck_assert_int_eq(tp->listen("127.0.0.1", &p.l, addr, sizeof(addr)), 0);
    sin.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    memset(junk, 0xab, sizeof(junk));
    ck_assert_int_eq(write(fd, junk, sizeof(junk)), sizeof(junk));
    while (p.a_state == 0 && now_ms() < end) {
        if (p.a == NULL && tp->accept(p.l, lookup, (void *)&the_job, &p.a) != 0)
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

/* Every size in both directions at once, all posted before any progress. */
START_TEST(test_sizes_both_directions)
{
    static const size_t sizes[] = {0, 1, 4097, BIG, 1, 0};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uint8_t *src[2][N], *dst[2][N];
    tp_req_t *r[4 * N];
    int status[4 * N], n = 0, bad = 0;
    pair_t p;

    pair_open(&p, the_job.id, the_job.key);
    ck_assert_int_eq(p.c_state + p.a_state, 2);
    for (int d = 0; d < 2; d++) {
        tp_conn_t *from = d ? p.a : p.c, *to = d ? p.c : p.a;
        for (int i = 0; i < N; i++) {
            src[d][i] = pattern(sizes[i], (unsigned)(d * 100 + i));
            dst[d][i] = calloc(1, sizes[i] + 1);
            ck_assert_int_eq(tp->irecv(to, dst[d][i], sizes[i], NULL, 1000 * d + i, &r[n++]), 0);
            ck_assert_int_eq(tp->isend(from, src[d][i], sizes[i], NULL, 1000 * d + i, &r[n++]), 0);
        }
    }
    ck_assert_int_eq(wait_all(&p, r, n, status), 0);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(status[i], 0);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < N; i++) {
            bad += memcmp(src[d][i], dst[d][i], sizes[i]) != 0;
            free(src[d][i]);
            free(dst[d][i]);
        }
    ck_assert_int_eq(bad, 0);
    pair_close(&p);
}
END_TEST

static void expect_mismatch(uint64_t send_tag, size_t send_len, uint64_t recv_tag, size_t recv_len)
{
    uint8_t src[64] = {1, 2, 3}, dst[64 + 8];
    tp_req_t *r[2];
    int status[2];
    pair_t p;

    pair_open(&p, the_job.id, the_job.key);
    memset(dst, 0x5a, sizeof(dst));
    ck_assert_int_eq(tp->isend(p.c, src, send_len, NULL, send_tag, &r[0]), 0);
    ck_assert_int_eq(tp->irecv(p.a, dst, recv_len, NULL, recv_tag, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[1], -EPROTO);
    /* Nothing was written into the receive buffer, let alone past it. */
    for (size_t i = 0; i < sizeof(dst); i++)
        ck_assert_uint_eq(dst[i], 0x5a);
    pair_close(&p);
}

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

    pair_open(&p, the_job.id, the_job.key);
    for (int i = 0; i < M; i++) {
        src[i] = pattern(LEN, (unsigned)i + 40);
        ck_assert_int_eq(tp->isend(p.c, src[i], LEN, NULL, tags[i], &r[i]), 0);
    }
    /* Let everything arrive before any receive is posted, except the last one. */
    ck_assert_int_eq(wait_all(&p, r, M - 1, status), 0);
    for (int k = 0; k < M; k++) {
        int i = recv_order[k];
        ck_assert_int_eq(tp->irecv(p.a, dst[i], LEN, NULL, tags[i], &r[M + k]), 0);
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

/* A message that waited for its receive and turns out to be of another length. */
/* A withdrawn receive takes no message and a withdrawn unsent send sends none: the next
 * receive of that tag gets the next message, and the connection stays sound (another comm
 * may go on using it). */
START_TEST(test_cancel)
{
    enum { LEN = 3000 };
    uint8_t *a = pattern(LEN, 60), *b = pattern(LEN, 61), dead[LEN], got[LEN];
    tp_req_t *r[3], *gone;
    int status[3];
    pair_t p;

    pair_open(&p, the_job.id, the_job.key);
    ck_assert_int_eq(tp->irecv(p.a, dead, LEN, NULL, 5, &gone), 0);
    tp->cancel(gone);
    /* Queued behind nothing on the wire yet: leaves without a byte sent. */
    ck_assert_int_eq(tp->isend(p.c, b, LEN, NULL, 5, &gone), 0);
    tp->cancel(gone);
    ck_assert_int_eq(tp->isend(p.c, a, LEN, NULL, 5, &r[0]), 0);
    ck_assert_int_eq(tp->irecv(p.a, got, LEN, NULL, 5, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[0], 0);
    ck_assert_int_eq(status[1], 0);
    ck_assert_int_eq(memcmp(got, a, LEN), 0);
    /* Nothing else arrives for tag 5: the cancelled send never went out. */
    ck_assert_int_eq(tp->isend(p.c, b, LEN, NULL, 6, &r[0]), 0);
    ck_assert_int_eq(tp->irecv(p.a, got, LEN, NULL, 6, &r[1]), 0);
    ck_assert_int_eq(tp->irecv(p.a, dead, LEN, NULL, 5, &r[2]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(memcmp(got, b, LEN), 0);
    int done = 0;
    ck_assert_int_eq(tp->test(r[2], &done), 0);
    ck_assert_int_eq(done, 0);
    tp->cancel(r[2]);
    free(a);
    free(b);
    pair_close(&p);
}
END_TEST

/* A comm that leaves a shared connection: its kept messages go, and for the given time
 * those still to come; the other comm's traffic goes on, and after the time the tag bits
 * are usable again. Tags: comm bits in 61..32 as in sched/multi_tag.h. */
START_TEST(test_forget)
{
    enum { LEN = 5000 };
    const uint64_t mask = 0x3fffffffull << 32, gone = 1ull << 32, other = 2ull << 32;
    uint8_t *src = pattern(LEN, 70), got[LEN], dead[LEN];
    tp_req_t *r[4];
    int status[4], done = 0;
    pair_t p;

    pair_open(&p, the_job.id, the_job.key);
    ck_assert_int_eq(tp->isend(p.c, src, LEN, NULL, gone | 1, &r[0]), 0);
    ck_assert_int_eq(tp->isend(p.c, src, LEN, NULL, gone | 2, &r[1]), 0);
    ck_assert_int_eq(tp->isend(p.c, src, LEN, NULL, other | 1, &r[2]), 0);
    ck_assert_int_eq(tp->irecv(p.a, got, LEN, NULL, other | 1, &r[3]), 0);
    /* The stream is in order: the two messages of the gone comm are kept by now. */
    ck_assert_int_eq(wait_all(&p, r, 4, status), 0);
    tp->forget(p.a, mask, gone, 10ull * 1000000000);
    /* A late one of the gone comm, then the other comm's next. */
    ck_assert_int_eq(tp->isend(p.c, src, LEN, NULL, gone | 3, &r[0]), 0);
    ck_assert_int_eq(tp->isend(p.c, src, LEN, NULL, other | 2, &r[1]), 0);
    ck_assert_int_eq(tp->irecv(p.a, got, LEN, NULL, other | 2, &r[2]), 0);
    ck_assert_int_eq(wait_all(&p, r, 3, status), 0);
    ck_assert_int_eq(status[2], 0);
    ck_assert_int_eq(memcmp(got, src, LEN), 0);
    /* None of the gone comm's three messages is there any more. */
    for (uint64_t low = 1; low <= 3; low++) {
        ck_assert_int_eq(tp->irecv(p.a, dead, LEN, NULL, gone | low, &r[0]), 0);
        ck_assert_int_eq(tp->test(r[0], &done), 0);
        ck_assert_int_eq(done, 0);
        tp->cancel(r[0]);
    }
    /* Forgotten for a moment only: afterwards a comm with those bits is served again. */
    tp->forget(p.a, mask, 3ull << 32, 1);
    usleep(1000);
    ck_assert_int_eq(tp->isend(p.c, src, LEN, NULL, 3ull << 32, &r[0]), 0);
    ck_assert_int_eq(tp->irecv(p.a, got, LEN, NULL, 3ull << 32, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[1], 0);
    free(src);
    pair_close(&p);
}
END_TEST

START_TEST(test_len_mismatch_late)
{
    uint8_t src[64] = {1, 2, 3}, dst[64];
    tp_req_t *r[2];
    int status[2];
    pair_t p;

    pair_open(&p, the_job.id, the_job.key);
    ck_assert_int_eq(tp->isend(p.c, src, 64, NULL, 3, &r[0]), 0);
    ck_assert_int_eq(wait_all(&p, r, 1, status), 0);
    /* A receive of another tag drives the other side until the message sits there. */
    tp_req_t *other;
    int done = 0;
    ck_assert_int_eq(tp->irecv(p.a, dst, 0, NULL, 99, &other), 0);
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(tp->test(other, &done), 0);
        usleep(5 * 1000);
    }
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(tp->irecv(p.a, dst, 16, NULL, 3, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r + 1, 1, status + 1), 0);
    ck_assert_int_eq(status[1], -EPROTO);
    pair_close(&p);
}
END_TEST

START_TEST(test_len_mismatch)
{
    expect_mismatch(5, 64, 5, 16);
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

/* The receiving side goes away mid-message: the sender's request fails, it does not hang. */
START_TEST(test_peer_close_mid_transfer)
{
    uint8_t *src = pattern(HUGE, 3), *dst = malloc(HUGE);
    tp_req_t *r[2];
    int status[2], done = 0;
    pair_t p;

    pair_open(&p, the_job.id, the_job.key);
    ck_assert_int_eq(tp->isend(p.c, src, HUGE, NULL, 1, &r[0]), 0);
    ck_assert_int_eq(tp->irecv(p.a, dst, HUGE, NULL, 1, &r[1]), 0);
    ck_assert_int_eq(tp->test(r[0], &done), 0);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(tp->test(r[1], &done), 0);
    ck_assert_int_eq(done, 0);
    tp->close(p.a);
    p.a = NULL;
    ck_assert_int_eq(wait_all(&p, r, 1, status), 0);
    ck_assert_int_lt(status[0], 0);
    tp->close(p.c);
    tp->listen_close(p.l);
    free(src);
    free(dst);
}
END_TEST

/* The sending side goes away mid-message: the pending receive fails. */
START_TEST(test_sender_close_mid_transfer)
{
    uint8_t *src = pattern(HUGE, 4), *dst = malloc(HUGE);
    tp_req_t *r[2];
    int status[2], done = 0;
    pair_t p;

    pair_open(&p, the_job.id, the_job.key);
    ck_assert_int_eq(tp->isend(p.c, src, HUGE, NULL, 1, &r[0]), 0);
    ck_assert_int_eq(tp->irecv(p.a, dst, HUGE, NULL, 1, &r[1]), 0);
    ck_assert_int_eq(tp->test(r[0], &done), 0);
    ck_assert_int_eq(tp->test(r[1], &done), 0);
    ck_assert_int_eq(done, 0);
    tp->close(p.c);
    p.c = NULL;
    ck_assert_int_eq(wait_all(&p, &r[1], 1, status), 0);
    ck_assert_int_eq(status[0], -ECONNRESET);
    tp->close(p.a);
    tp->listen_close(p.l);
    free(src);
    free(dst);
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
    tcase_add_test(tc, test_crc32c_check_value);
    tcase_add_test(tc, test_handshake_ok);
    tcase_add_test(tc, test_wrong_key_refused);
    tcase_add_test(tc, test_unknown_job_refused);
    tcase_add_test(tc, test_garbage_handshake_refused);
    tcase_add_test(tc, test_sizes_both_directions);
    tcase_add_test(tc, test_tag_order);
    tcase_add_test(tc, test_cancel);
    tcase_add_test(tc, test_forget);
    tcase_add_test(tc, test_len_mismatch_late);
    tcase_add_test(tc, test_len_mismatch);
    tcase_add_test(tc, test_checksum);
    tcase_add_test(tc, test_peer_close_mid_transfer);
    tcase_add_test(tc, test_sender_close_mid_transfer);
    suite_add_tcase(s, tc);
    return s;
}
