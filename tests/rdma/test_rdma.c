/*
 * The RDMA transport between two soft-RoCE devices (tests/rdma-vm): the listener on rxe0's
 * address, the connecting side bound to rxe1's, so every message crosses rxe1 -> veth1 ->
 * veth0 -> rxe0 and back. The conformance suite every transport passes
 * (tests/transport/conformance.c), with the devices' packet counters checked, and what only
 * RDMA has: credits, a send withdrawn with fragments on the QP, the traffic class, a peer that
 * goes silent, addresses without a device.
 *
 * On a machine without RDMA devices only the "nodev" case runs: listen and connect must fail
 * cleanly with -ENODEV.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../transport/pair.h"
#include "rdma_tests.h"
#include "transport/rdma.h"

#define MIB (1024u * 1024u)
#define BIG (8u * MIB)

static const transport_ops_t *tp = &tp_rdma;

static const char *env_or(const char *name, const char *dflt)
{
    const char *s = getenv(name);

    return s != NULL && *s != '\0' ? s : dflt;
}

/* A device's packet counter (rxe keeps them in sysfs), or -1 if there is none. */
static long long counter(const char *dev, const char *name)
{
    char path[256];
    long long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev, name);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    if (fscanf(f, "%lld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

static long long sent0, rcvd0;

/* The bytes crossed rxe1 -> rxe0: at least one packet per 4 KiB (the largest RoCE MTU). */
static void rxe_traffic(int begin, size_t bytes)
{
    if (begin) {
        sent0 = counter("rxe1", "sent_pkts");
        rcvd0 = counter("rxe0", "rcvd_pkts");
        return;
    }
    if (sent0 < 0 || rcvd0 < 0)
        return;
    long long sent = counter("rxe1", "sent_pkts") - sent0;
    long long rcvd = counter("rxe0", "rcvd_pkts") - rcvd0;
    printf("rdma: rxe1 sent %lld packets, rxe0 received %lld\n", sent, rcvd);
    ck_assert_int_ge(sent, (long long)(bytes / 4096));
    ck_assert_int_ge(rcvd, (long long)(bytes / 4096));
}

/* Generous deadlines: the guest emulates its CPUs (TCG) and soft-RoCE moves tens of MB/s. */
static tp_fixture_t rdma_fixture = {.name = "rdma",
                                    .tp = &tp_rdma,
                                    .connect_from = tp_rdma_connect_from,
                                    .deadline_ms = 60000,
                                    .big = BIG,
                                    .huge = BIG,
                                    .mid_ms = 100,
                                    .traffic = rxe_traffic};

void use_rdma(void)
{
    fx = &rdma_fixture;
}

/* A send with fragments on the QP cannot be withdrawn cleanly: the connection fails
 * (logged), and says so. */
START_TEST(test_cancel_started_send)
{
    uint8_t *big = pattern(BIG, 62);
    tp_req_t *gone;
    pair_t p;

    pair_ready(&p);
    ck_assert_int_eq(tp->isend(p.c, big, BIG, NULL, 8, &gone), 0);
    tp->cancel(gone);
    ck_assert_int_eq(tp->conn_state(p.c), -ECANCELED);
    free(big);
    pair_close(&p);
}
END_TEST

/* A pair whose receiver keeps 1 MiB of early messages, and m sends of len bytes (tag 42)
 * from src, both sides driven (the receiver through a receive of another tag: its CQ, its
 * budget) for 3 s: the receiver is full, the sender held back by its credits. done[i] says
 * which sends finished (and were released). */
static void fill_receiver(pair_t *p, const uint8_t *src, int m, size_t len, tp_req_t **r, int *done)
{
    tp_req_t *probe;
    uint8_t none;
    int pdone = 0;

    setenv("HCCLD_RDMA_UNEXPECTED", "1048576", 1);
    pair_ready(p);
    for (int i = 0; i < m; i++)
        ck_assert_int_eq(tp->isend(p->c, src + (size_t)i * len, len, NULL, 42, &r[i]), 0);
    ck_assert_int_eq(tp->irecv(p->a, &none, 0, NULL, 7777, &probe), 0);
    for (long long end = now_ms() + 3000; now_ms() < end;) {
        drive(p, r, m, done, 100);
        drive(p, &probe, 1, &pdone, 100);
    }
    tp->cancel(probe);
}

/*
 * Far more messages than the receiver has slots, posted before any receive, and a budget for
 * early messages (1 MiB) far below their total: the sender is held back by its credits (some
 * sends stay pending), nothing is lost, and all arrive in order once the receives come.
 */
START_TEST(test_flow_control)
{
    enum { M = 100, LEN = 64 * 1024 };
    uint8_t *src = pattern((size_t)M * LEN, 80), *dst = calloc(M, LEN);
    tp_req_t *r[2 * M];
    int status[2 * M], done[M] = {0}, ndone = 0;
    pair_t p;

    fill_receiver(&p, src, M, LEN, r, done);
    for (int i = 0; i < M; i++)
        ndone += done[i];
    printf("rdma: flow control: %d of %d sends done before any receive\n", ndone, M);
    ck_assert_int_gt(ndone, 0);
    ck_assert_int_lt(ndone, M);
    for (int i = 0; i < M; i++)
        ck_assert_int_eq(tp->irecv(p.a, dst + (size_t)i * LEN, LEN, NULL, 42, &r[M + i]), 0);
    /* The sends already reported done were released: wait only for the rest. */
    int n = 0;
    tp_req_t *left[2 * M];
    for (int i = 0; i < M; i++)
        if (!done[i])
            left[n++] = r[i];
    for (int i = 0; i < M; i++)
        left[n++] = r[M + i];
    ck_assert_int_eq(wait_all(&p, left, n, status), 0);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(status[i], 0);
    ck_assert_int_eq(memcmp(src, dst, (size_t)M * LEN), 0);
    free(src);
    free(dst);
    pair_close(&p);
}
END_TEST

/* The traffic class: the connecting side may choose it before the route exists; afterwards,
 * and on the accepting side (which takes the connecting side's), -ENOTSUP. */
START_TEST(test_set_dscp)
{
    pair_t p;

    pair_start(&p, the_job.id, the_job.key);
    ck_assert_int_eq(tp->set_dscp(p.c, 46), 0);
    pair_settle(&p);
    ck_assert_int_eq(p.c_state + p.a_state, 2);
    ck_assert_int_eq(tp->set_dscp(p.c, 10), -ENOTSUP);
    ck_assert_int_eq(tp->set_dscp(p.a, 10), -ENOTSUP);
    pair_close(&p);
}
END_TEST

/* Runs a shell command (in the guest only: it changes the network). */
int sh(const char *cmd)
{
    int rc = system(cmd);

    return rc == 0 ? 0 : -1;
}

/* Waits until both rxe ports are ACTIVE again. */
int ports_active(long long ms)
{
    long long end = now_ms() + ms;

    while (now_ms() < end) {
        int ok = 1;
        for (int i = 0; i < 2 && ok; i++) {
            char path[128], state[64] = "";
            FILE *f;
            snprintf(path, sizeof(path), "/sys/class/infiniband/rxe%d/ports/1/state", i);
            if ((f = fopen(path, "r")) == NULL || fgets(state, sizeof(state), f) == NULL)
                ok = 0;
            if (f != NULL)
                fclose(f);
            ok = ok && strstr(state, "ACTIVE") != NULL;
        }
        if (ok)
            return 0;
        usleep(100 * 1000);
    }
    return -1;
}

/* Tests that change the network run in the guest only; elsewhere they say so and pass. */
int in_guest(const char *test)
{
    const char *vm = getenv("HCCLD_VM");

    if (vm != NULL && strcmp(vm, "1") == 0)
        return 1;
    printf("rdma: %s skipped (it changes the network: guest only)\n", test);
    return 0;
}

/* HCCL_RDMA_TIMEOUT and HCCL_RDMA_RETRY_CNT short, so that a lost peer shows within a second. */
void short_retries(void)
{
    setenv("HCCL_RDMA_TIMEOUT", "14", 1); /* 4.096 us << 14: 67 ms */
    setenv("HCCL_RDMA_RETRY_CNT", "3", 1);
    setenv("HCCLD_HEARTBEAT_S", "1", 1);
}

/*
 * A peer that goes silent without a word (its link goes down: no disconnect gets through) while
 * a receive waits for it: the heartbeat's probe finds no ACK and the receive fails, in bounded
 * time (HCCL_RDMA_TIMEOUT and HCCL_RDMA_RETRY_CNT made short here). Guest only.
 */
START_TEST(test_silent_peer)
{
    uint8_t b[64];
    tp_req_t *r;
    int status;
    long long t0;
    pair_t p;

    if (!in_guest("test_silent_peer"))
        return;
    short_retries();
    pair_ready(&p);
    ck_assert_int_eq(tp->irecv(p.c, b, sizeof(b), NULL, 1, &r), 0);
    ck_assert_int_eq(sh("ip link set veth0 down"), 0);
    t0 = now_ms();
    int waited = wait_all(&p, &r, 1, &status);
    printf("rdma: link down: the waiting receive ended with %d after %lld ms\n", status,
           now_ms() - t0);
    /* Up again before any check can end the test. */
    ck_assert_int_eq(sh("ip link set veth0 up"), 0);
    ck_assert_int_eq(waited, 0);
    ck_assert_int_lt(status, 0);
    ck_assert_int_eq(ports_active(30000), 0);
    pair_close(&p);
}
END_TEST

/*
 * The same for a side that waits to send: the receiver takes nothing (its budget for early
 * messages is full), so the sender holds messages back for want of credits, with nothing on
 * the wire. When the link goes down, its probe (an RDMA WRITE of nothing, which needs no
 * credit) gets no ACK, and the sends fail in bounded time instead of waiting for ever.
 */
START_TEST(test_starved_silent_peer)
{
    enum { M = 60, LEN = 64 * 1024 };
    uint8_t *src = pattern((size_t)M * LEN, 17);
    tp_req_t *r[M], *left[M];
    int status[M], done[M] = {0}, n = 0;
    long long t0;
    pair_t p;

    if (!in_guest("test_starved_silent_peer"))
        return;
    short_retries();
    fill_receiver(&p, src, M, LEN, r, done);
    for (int i = 0; i < M; i++)
        if (!done[i])
            left[n++] = r[i];
    printf("rdma: starved sender: %d of %d sends wait for credits\n", n, M);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(sh("ip link set veth0 down"), 0);
    t0 = now_ms();
    int waited = wait_all(&p, left, n, status);
    printf("rdma: link down: the starved sends ended with %d after %lld ms\n", status[0],
           now_ms() - t0);
    ck_assert_int_eq(sh("ip link set veth0 up"), 0);
    ck_assert_int_eq(waited, 0);
    for (int i = 0; i < n; i++)
        ck_assert_int_lt(status[i], 0);
    ck_assert_int_eq(ports_active(30000), 0);
    free(src);
    pair_close(&p);
}
END_TEST

/*
 * A connection idle for longer than the send queue's stall bound (about 1.5 s here), then a
 * send on a link that is down: the send queue's stall clock starts when the send is posted, so
 * the connection fails by the QP's retries (at least HCCL_RDMA_RETRY_CNT + 1 timeouts of 67
 * ms) or by the stall bound, never at once. Before, a message's send took its slot before
 * posting, so the clock stayed at the last completion, seconds old, and the first check
 * failed the connection ("no send work completion for 3.0 s") before the QP had retried once
 * (on a new connection the clock read 0: the host's uptime counted as silence). Guest only.
 */
START_TEST(test_send_after_idle)
{
    uint8_t out[64], in[64];
    tp_req_t *r[2];
    int status[2];
    long long t0, took;
    pair_t p;

    if (!in_guest("test_send_after_idle"))
        return;
    short_retries();
    pair_ready(&p);
    memset(out, 0x5a, sizeof(out));
    ck_assert_int_eq(tp->isend(p.c, out, sizeof(out), NULL, 5, &r[0]), 0);
    ck_assert_int_eq(tp->irecv(p.a, in, sizeof(in), NULL, 5, &r[1]), 0);
    ck_assert_int_eq(wait_all(&p, r, 2, status), 0);
    ck_assert_int_eq(status[0], 0);
    ck_assert_int_eq(status[1], 0);
    ck_assert_mem_eq(in, out, sizeof(out));
    sleep(3);
    ck_assert_int_eq(sh("ip link set veth0 down"), 0);
    t0 = now_ms();
    int rc = tp->isend(p.c, out, sizeof(out), NULL, 6, &r[0]);
    int waited = rc == 0 ? wait_all(&p, r, 1, status) : -1;
    took = now_ms() - t0;
    printf("rdma: send after 3 s idle on a link that is down: %d after %lld ms\n", status[0], took);
    ck_assert_int_eq(sh("ip link set veth0 up"), 0);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(waited, 0);
    ck_assert_int_lt(status[0], 0);
    ck_assert_msg(took >= 200,
                  "the send failed %lld ms after it was posted, before the QP's retries", took);
    ck_assert_int_eq(ports_active(30000), 0);
    pair_close(&p);
}
END_TEST

/* RDMA devices, but none on this address (one on lo, which rxe does not serve): -ENODEV, and
 * a log line naming the address. Guest only: it adds an address. */
START_TEST(test_no_device_for_address)
{
    char addr[TP_ADDR_MAX];
    tp_listener_t *l = NULL;
    tp_conn_t *c = NULL;
    int rc_l, rc_c;

    if (!in_guest("test_no_device_for_address"))
        return;
    ck_assert_int_eq(sh("ip addr add 10.78.0.1/32 dev lo"), 0);
    rc_l = tp->listen("10.78.0.1", &l, addr, sizeof(addr));
    rc_c = tp_rdma_connect_from("10.78.0.1", "10.77.0.1:4791", the_job.id, the_job.key, 1, &c);
    ck_assert_int_eq(sh("ip addr del 10.78.0.1/32 dev lo"), 0);
    ck_assert_int_eq(rc_l, -ENODEV);
    ck_assert_ptr_null(l);
    ck_assert_int_eq(rc_c, -ENODEV);
    ck_assert_ptr_null(c);
}
END_TEST

/* Without RDMA devices: a clean -ENODEV, with a log line saying so. */
START_TEST(test_no_device)
{
    char addr[TP_ADDR_MAX];
    tp_listener_t *l = NULL;
    tp_conn_t *c = NULL;

    ck_assert_int_eq(tp->listen("127.0.0.1", &l, addr, sizeof(addr)), -ENODEV);
    ck_assert_ptr_null(l);
    ck_assert_int_eq(tp->connect("127.0.0.1:4791", the_job.id, the_job.key, 1, &c), -ENODEV);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(
        tp_rdma_connect_from("127.0.0.1", "127.0.0.1:4791", the_job.id, the_job.key, 1, &c),
        -ENODEV);
}
END_TEST

/* Whether this machine has an RDMA device at all (without touching libibverbs, so that
 * Check's forks stay free of it). */
static int have_devices(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n > 0;
}

Suite *rdma_suite(void)
{
    Suite *s = suite_create("rdma");
    TCase *tc;

    if (!have_devices()) {
        tc = tcase_create("nodev");
        tcase_add_test(tc, test_no_device);
        suite_add_tcase(s, tc);
        return s;
    }
    rdma_fixture.server_ip = env_or("HCCLD_RDMA_TEST_SERVER", "10.77.0.1");
    rdma_fixture.client_ip = env_or("HCCLD_RDMA_TEST_CLIENT", "10.77.0.2");
    tc = tcase_create("rxe");
    tcase_set_timeout(tc, 180);
    tp_conformance_add(tc, use_rdma);
    tcase_add_test(tc, test_cancel_started_send);
    tcase_add_test(tc, test_flow_control);
    tcase_add_test(tc, test_set_dscp);
    tcase_add_test(tc, test_no_device_for_address);
    /* Last: they take a link down (and up again). */
    tcase_add_test(tc, test_silent_peer);
    tcase_add_test(tc, test_starved_silent_peer);
    tcase_add_test(tc, test_send_after_idle);
    suite_add_tcase(s, tc);
    tc = tcase_create("resume");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, use_rdma, NULL);
    rdma_resume_add(tc);
    suite_add_tcase(s, tc);
    return s;
}
