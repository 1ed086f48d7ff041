/*
 * A connection striped over 3 TCP connections on loopback (transport/tp_stripe.h): the
 * conformance suite every transport passes, run through a test transport that opens and
 * gathers the stripes as the daemon does, then what only striping has: the announcement's
 * encoding, length mismatches that a split alone would miss, and the gathering's refusals.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../transport/pair.h"
#include "test_list.h"
#include "transport/tp_stripe.h"

enum { N = 3, THRESHOLD = 4096 };

/* The accepting side's stripes not yet gathered (one pair at a time in these tests). */
static struct {
    tp_listener_t *l;
    tp_conn_t *sub[N];
    unsigned n;
} gather;

static void gather_reset(tp_listener_t *l)
{
    for (unsigned i = 0; i < gather.n; i++)
        tp_close(gather.sub[i]);
    gather.n = 0;
    gather.l = l;
}

static int st_listen(const char *ip, tp_listener_t **l_p, char *addr, size_t cap)
{
    return tp_tcp.listen(ip, l_p, addr, cap);
}

static int st_listen_fd(tp_listener_t *l)
{
    return tp_tcp.listen_fd(l);
}

static void st_listen_close(tp_listener_t *l)
{
    if (gather.l == l)
        gather_reset(NULL);
    tp_tcp.listen_close(l);
}

/* N connections, each announcing its stripe, wrapped into one. */
static int st_connect(const char *addr, const uint8_t job_id[AUTH_JOB_BYTES],
                      const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, tp_conn_t **c_p)
{
    tp_conn_t *subs[N];
    int rc;

    for (unsigned k = 0; k < N; k++)
        if ((rc = tp_tcp.connect(addr, job_id, key, tp_stripe_announce(my_node, k, N), &subs[k])) !=
            0) {
            while (k > 0)
                tp_close(subs[--k]);
            return rc;
        }
    return tp_stripe_wrap(subs, N, THRESHOLD, c_p);
}

/* Takes the stripes as they come and drives their handshakes; -EAGAIN until all N are ready
 * (then their striped connection) or one failed (then that one, whose state says why). */
static int st_accept(tp_listener_t *l, tp_key_lookup_fn lookup, void *ctx, tp_conn_t **c_p)
{
    tp_conn_t *c, *s;
    unsigned ready = 0, k, n;
    uint32_t node = TP_NODE_UNKNOWN;

    if (gather.l != l)
        gather_reset(l);
    while (gather.n < N && tp_tcp.accept(l, lookup, ctx, &c) == 0)
        gather.sub[gather.n++] = c;
    for (unsigned i = 0; i < gather.n; i++) {
        int st = tp_conn_state(gather.sub[i]);
        if (st < 0) {
            *c_p = gather.sub[i];
            gather.sub[i] = gather.sub[--gather.n];
            gather_reset(l);
            return 0;
        }
        ready += st == 1;
    }
    if (ready < N)
        return -EAGAIN;
    for (unsigned i = 0; i < N; i++) {
        node = tp_stripe_parse(tp_conn_peer_node(gather.sub[i]), &k, &n);
        ck_assert_uint_eq(n, N);
    }
    s = tp_stripe_new(N, node);
    ck_assert_ptr_nonnull(s);
    for (unsigned i = 0; i < N; i++) {
        tp_stripe_parse(tp_conn_peer_node(gather.sub[i]), &k, &n);
        ck_assert_int_eq(tp_stripe_add(s, k, n, gather.sub[i]), 0);
    }
    gather.n = 0;
    *c_p = s;
    return 0;
}

/* The rest goes to whatever the handle is: a striped connection, or a stripe that failed. */
static int st_conn_state(tp_conn_t *c)
{
    return tp_conn_state(c);
}

static uint32_t st_peer_node(tp_conn_t *c)
{
    return tp_conn_peer_node(c);
}

static int st_isend(tp_conn_t *c, const void *buf, size_t len, void *mr, uint64_t tag,
                    tp_req_t **r_p)
{
    return tp_isend(c, buf, len, mr, tag, r_p);
}

static int st_irecv(tp_conn_t *c, void *buf, size_t len, void *mr, uint64_t tag, tp_req_t **r_p)
{
    return tp_irecv(c, buf, len, mr, tag, r_p);
}

static int st_poll_fds(tp_conn_t *c, struct pollfd *pfd, int max)
{
    return tp_poll_fds(c, pfd, max);
}

static void st_forget(tp_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns)
{
    tp_forget(c, mask, value, ttl_ns);
}

static const transport_ops_t striped_tcp = {
    .name = "tcp x3",
    .listen = st_listen,
    .listen_fd = st_listen_fd,
    .accept = st_accept,
    .connect = st_connect,
    .conn_state = st_conn_state,
    .conn_peer_node = st_peer_node,
    .isend = st_isend,
    .irecv = st_irecv,
    .test = tp_test,
    .poll_fds = st_poll_fds,
    .cancel = tp_cancel,
    .forget = st_forget,
    .close = tp_close,
    .listen_close = st_listen_close,
};

static const tp_fixture_t stripe_fixture = {.name = "tcp x3",
                                            .tp = &striped_tcp,
                                            .server_ip = "127.0.0.1",
                                            .deadline_ms = 10000,
                                            .big = 8u * 1024 * 1024 + 3,
                                            .huge = 96u * 1024 * 1024,
                                            .mid_ms = 1};

static void use_stripes(void)
{
    fx = &stripe_fixture;
}

START_TEST(test_announce_roundtrip)
{
    unsigned k, n;

    ck_assert_uint_eq(tp_stripe_announce(5, 0, 1), 5);
    ck_assert_uint_eq(tp_stripe_parse(5, &k, &n), 5);
    ck_assert_uint_eq(k, 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(tp_stripe_parse(TP_NODE_UNKNOWN, &k, &n), TP_NODE_UNKNOWN);
    ck_assert_uint_eq(n, 1);
    for (unsigned nn = 2; nn <= TP_STRIPE_MAX; nn++)
        for (unsigned kk = 0; kk < nn; kk++) {
            uint32_t v = tp_stripe_announce(TP_STRIPE_NODE_MAX, kk, nn);
            ck_assert_uint_ne(v, TP_NODE_UNKNOWN);
            ck_assert_uint_eq(tp_stripe_parse(v, &k, &n), TP_STRIPE_NODE_MAX);
            ck_assert_uint_eq(k, kk);
            ck_assert_uint_eq(n, nn);
            ck_assert_uint_eq(tp_stripe_parse(tp_stripe_announce(0, kk, nn), &k, &n), 0);
            ck_assert_uint_eq(k, kk);
            ck_assert_uint_eq(n, nn);
        }
}
END_TEST

/*
 * Lengths that disagree fail the receive with -EPROTO even where the split would match:
 * 2T bytes go as 2 parts of T behind a header, which a receive of T meets first; a message
 * as long as the header goes behind one too. Lengths that agree (the header's own length
 * among them) arrive intact.
 */
START_TEST(test_length_mismatch_split)
{
    static const size_t cases[][2] = {
        {2 * THRESHOLD, THRESHOLD},
        {THRESHOLD, 2 * THRESHOLD},
        {24, 3 * THRESHOLD},
        {3 * THRESHOLD, 24},
        {24, 16},
        {16, 24},
        {3 * THRESHOLD, 3 * THRESHOLD + 1},
    };
    static const size_t good[] = {24, 0, 2 * THRESHOLD - 1, 2 * THRESHOLD, 7 * THRESHOLD + 5};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t ls = cases[i][0], lr = cases[i][1];
        uint8_t *src = pattern(ls, 3), *dst = malloc(lr + 1);
        tp_req_t *r[2];
        int status[2];
        pair_t p;

        pair_ready(&p);
        ck_assert_int_eq(tp_isend(p.c, src, ls, NULL, 9, &r[0]), 0);
        ck_assert_int_eq(tp_irecv(p.a, dst, lr, NULL, 9, &r[1]), 0);
        ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
        ck_assert_msg(status[1] == -EPROTO, "send %zu, receive %zu: %d", ls, lr, status[1]);
        pair_close(&p);
        free(src);
        free(dst);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint8_t *src = pattern(good[i], 4), *dst = malloc(good[i] + 1);
        tp_req_t *r[2];
        int status[2];
        pair_t p;

        pair_ready(&p);
        ck_assert_int_eq(tp_isend(p.c, src, good[i], NULL, 9, &r[0]), 0);
        ck_assert_int_eq(tp_irecv(p.a, dst, good[i], NULL, 9, &r[1]), 0);
        ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
        ck_assert_int_eq(status[0], 0);
        ck_assert_int_eq(status[1], 0);
        ck_assert_int_eq(memcmp(src, dst, good[i]), 0);
        pair_close(&p);
        free(src);
        free(dst);
    }
}
END_TEST

/*
 * A receive withdrawn with its header and part 0 in (stripe 0 driven) but part 1 not (stripe
 * 1 never driven) would leave stripe 1's part for the next message of the tag: the whole
 * connection fails instead. One withdrawn before anything moved leaves it sound.
 */
START_TEST(test_cancel_partway)
{
    enum { LEN = 2 * THRESHOLD };
    uint8_t *src = pattern(LEN, 8), dst[LEN], small[8];
    tp_req_t *r[2], *drv;
    int status[2], done = 0;
    pair_t p;

    pair_ready(&p);
    ck_assert_int_eq(tp_irecv(p.a, dst, LEN, NULL, 3, &r[1]), 0);
    tp_cancel(r[1]); /* nothing moved: clean */
    ck_assert_int_eq(tp_conn_state(p.a), 1);
    ck_assert_int_eq(tp_isend(p.c, src, LEN, NULL, 5, &r[0]), 0);
    ck_assert_int_eq(wait_all(&p, r, 1, status), 0);
    ck_assert_int_eq(status[0], 0);
    ck_assert_int_eq(tp_irecv(p.a, dst, LEN, NULL, 5, &r[1]), 0);
    /* A receive of another tag, all on stripe 0, drives only that stripe. */
    ck_assert_int_eq(tp_irecv(p.a, small, sizeof(small), NULL, 77, &drv), 0);
    drive(&p, &drv, 1, &done, 300);
    ck_assert_int_eq(done, 0);
    tp_cancel(r[1]);
    ck_assert_int_eq(tp_conn_state(p.a), -ECONNABORTED);
    ck_assert_int_lt(tp_irecv(p.a, dst, LEN, NULL, 5, &r[1]), 0);
    tp_cancel(drv);
    pair_close(&p);
    free(src);
}
END_TEST

/* A stripe that does not fit (another count, a k taken twice, one past n) is refused and
 * closed; so is one given to a connection that is no gathering one. */
START_TEST(test_gather_refusals)
{
    char addr[TP_ADDR_MAX];
    tp_listener_t *l;
    tp_conn_t *s = tp_stripe_new(N, 4), *sub;

    ck_assert_int_eq(tp_tcp.listen("127.0.0.1", &l, addr, sizeof(addr)), 0);
    ck_assert_uint_eq(tp_stripe_gathering(s), 4);
    ck_assert_int_eq(tp_tcp.connect(addr, the_job.id, the_job.key, 1, &sub), 0);
    ck_assert_int_eq(tp_stripe_add(s, 0, N + 1, sub), -EINVAL);
    ck_assert_int_eq(tp_tcp.connect(addr, the_job.id, the_job.key, 1, &sub), 0);
    ck_assert_int_eq(tp_stripe_add(s, N, N, sub), -EINVAL);
    ck_assert_int_eq(tp_tcp.connect(addr, the_job.id, the_job.key, 1, &sub), 0);
    ck_assert_int_eq(tp_stripe_add(s, 1, N, sub), 0);
    ck_assert_int_eq(tp_tcp.connect(addr, the_job.id, the_job.key, 1, &sub), 0);
    ck_assert_int_eq(tp_stripe_add(s, 1, N, sub), -EINVAL);
    ck_assert_int_eq(tp_conn_state(s), 0); /* still gathering */
    ck_assert_int_eq(tp_tcp.connect(addr, the_job.id, the_job.key, 1, &sub), 0);
    ck_assert_uint_eq(tp_stripe_gathering(sub), TP_NODE_UNKNOWN);
    ck_assert_int_eq(tp_stripe_add(sub, 0, N, sub), -EINVAL); /* sub is closed by it */
    tp_close(s);
    tp_tcp.listen_close(l);
}
END_TEST

Suite *stripe_suite(void)
{
    Suite *s = suite_create("stripe");
    TCase *tc = tcase_create("tcp_x3");

    tcase_set_timeout(tc, 120);
    tp_conformance_add(tc, use_stripes);
    tcase_add_test(tc, test_announce_roundtrip);
    tcase_add_test(tc, test_length_mismatch_split);
    tcase_add_test(tc, test_gather_refusals);
    tcase_add_test(tc, test_cancel_partway);
    suite_add_tcase(s, tc);
    return s;
}
