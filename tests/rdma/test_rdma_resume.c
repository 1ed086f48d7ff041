/*
 * Resumable RDMA connections (daemon/transport/rdma_resume.c) between the two soft-RoCE
 * devices: the cases every resumable transport passes (tests/transport/resume.c) with a QP
 * moved to error under the transport (one side, then the other), and again with rxe0's link
 * taken down until a side sees its QP fail, then brought back up. The connecting side dials
 * again with AGAIN; the accepting side's new QP goes to the suspended connection.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../transport/resume.h"
#include "rdma_tests.h"
#include "transport/rdma_conn.h"

/* Moves one side's QP to the error state, as a device does on a fatal error: everything
 * posted on it flushes. Alternates between the sides. */
static void qp_error(pair_t *p)
{
    static unsigned n;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    rdma_conn_t *c = rdma_conn_of(n++ % 2 == 0 ? p->c : p->a);

    ck_assert_ptr_nonnull(c->qp);
    ck_assert_int_eq(ibv_modify_qp(c->qp, &a, IBV_QP_STATE), 0);
}

/* rxe0's link down until a side has seen its QP fail and half a second more (its dials fail
 * meanwhile), then up again. */
static void link_flap(pair_t *p)
{
    long long end = now_ms() + 10000;

    ck_assert_int_eq(sh("ip link set veth0 down"), 0);
    while (now_ms() < end && !resume_suspended(p->c) && !resume_suspended(p->a))
        resume_drive(p, NULL, 0, NULL, 0), usleep(1000);
    for (long long more = now_ms() + 500; now_ms() < more;)
        resume_drive(p, NULL, 0, NULL, 0), usleep(1000);
    int was = resume_suspended(p->c) || resume_suspended(p->a);
    ck_assert_int_eq(sh("ip link set veth0 up"), 0);
    ck_assert_int_eq(ports_active(30000), 0);
    for (long long more = now_ms() + 3000; now_ms() < more;)
        resume_drive(p, NULL, 0, NULL, 0), usleep(1000);
    ck_assert_msg(was, "no side saw the link fail within 10 s");
}

static void ready(pair_t *p)
{
    use_rdma();
    pair_ready(p);
}

START_TEST(test_resume_qp_error_twice)
{
    pair_t p;

    ready(&p);
    resume_twice(&p, qp_error);
    pair_close(&p);
}
END_TEST

START_TEST(test_resume_qp_error_mid_send)
{
    pair_t p;

    ready(&p);
    resume_mid_send(&p, qp_error, 8u << 20);
    pair_close(&p);
}
END_TEST

START_TEST(test_resume_qp_error_without_retry)
{
    pair_t p;

    ready(&p);
    resume_without_retry(&p, qp_error);
    pair_close(&p);
}
END_TEST

START_TEST(test_resume_hold_time_ends_it)
{
    pair_t p;

    ready(&p);
    resume_hold_ends(&p, qp_error);
    pair_close(&p);
}
END_TEST

START_TEST(test_resume_close_says_bye)
{
    pair_t p;

    ready(&p);
    resume_close_says_bye(&p);
    pair_close(&p);
}
END_TEST

/* A send withdrawn half done while its connection is suspended cannot go again (its buffer is
 * gone): the connection fails with -ECANCELED, as it does without retry. */
START_TEST(test_resume_cancel_started_send_while_suspended)
{
    enum { LEN = 8u << 20 };
    uint8_t *big = pattern(LEN, 5);
    tp_req_t *r;
    int status = 1;
    pair_t p;

    ready(&p);
    resume_set_retry(&p, 5000);
    ck_assert_int_eq(tp_isend(p.c, big, LEN, NULL, 9, &r), 0); /* fragments go at once */
    qp_error(&p);                                              /* the connecting side's */
    for (long long end = now_ms() + 5000; now_ms() < end && !resume_suspended(p.c);)
        resume_drive(&p, &r, 1, &status, 0);
    ck_assert_int_eq(status, 1); /* not done: it waits for the connection */
    ck_assert(resume_suspended(p.c));
    tp_cancel(r);
    ck_assert_int_eq(tp_conn_state(p.c), -ECANCELED);
    resume_end();
    pair_close(&p);
    free(big);
}
END_TEST

/* Guest only: the link itself goes down twice while messages cross. */
/* AGAIN for a connection the accepting side never had: rejected, the request's side fails. */
static void mark_again(tp_conn_t *c)
{
    rdma_conn_of(c)->hs.again = 1; /* a name it never gave */
}

START_TEST(test_resume_of_unknown_refused)
{
    pair_t p;

    ready(&p);
    resume_unknown_refused(&p, mark_again);
    pair_close(&p);
}
END_TEST

START_TEST(test_resume_link_flap_twice)
{
    pair_t p;

    if (!in_guest("test_resume_link_flap_twice"))
        return;
    short_retries();
    ready(&p);
    resume_twice(&p, link_flap);
    pair_close(&p);
}
END_TEST

/* The link check reads each side's netdev, not only its port: soft-RoCE fails what it sends
 * on a netdev that went down (a local QP operation error) before its port reads DOWN, and
 * such a failure is the link's, which op retry rides out. */
START_TEST(test_link_up_reads_the_netdev)
{
    pair_t p;
    char n0[IF_NAMESIZE], n1[IF_NAMESIZE];
    rdma_conn_t *c, *a;

    if (!in_guest("test_link_up_reads_the_netdev"))
        return;
    ready(&p);
    c = rdma_conn_of(p.c);
    a = rdma_conn_of(p.a);
    ck_assert_int_eq(rdma_id_netdev(c->id, n0), 0);
    ck_assert_int_eq(rdma_id_netdev(a->id, n1), 0);
    ck_assert_msg(strncmp(n0, "veth", 4) == 0 && strncmp(n1, "veth", 4) == 0 && strcmp(n0, n1) != 0,
                  "netdevs %s and %s", n0, n1);
    ck_assert_int_eq(rdma_id_link_up(c->id), 1);
    ck_assert_int_eq(rdma_id_link_up(a->id), 1);
    ck_assert_int_eq(sh("ip link set veth0 down"), 0);
    /* veth0 is down, and veth1 lost its carrier with it. */
    ck_assert_int_eq(rdma_id_link_up(c->id), 0);
    ck_assert_int_eq(rdma_id_link_up(a->id), 0);
    ck_assert_int_eq(sh("ip link set veth0 up"), 0);
    ck_assert_int_eq(ports_active(30000), 0);
    ck_assert_int_eq(rdma_id_link_up(c->id), 1);
    ck_assert_int_eq(rdma_id_link_up(a->id), 1);
    pair_close(&p);
}
END_TEST

void rdma_resume_add(TCase *tc)
{
    tcase_add_test(tc, test_resume_qp_error_twice);
    tcase_add_test(tc, test_resume_qp_error_mid_send);
    tcase_add_test(tc, test_resume_qp_error_without_retry);
    tcase_add_test(tc, test_resume_hold_time_ends_it);
    tcase_add_test(tc, test_resume_close_says_bye);
    tcase_add_test(tc, test_resume_cancel_started_send_while_suspended);
    tcase_add_test(tc, test_resume_of_unknown_refused);
    tcase_add_test(tc, test_resume_link_flap_twice);
    tcase_add_test(tc, test_link_up_reads_the_netdev);
}
