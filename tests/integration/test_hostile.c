/* A hostile client while a normal job runs: the daemon survives, the job's results stay right. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "frame.h"
#include "harness.h"
#include "ring.h"
#include "rootinfo.h"
#include "suites.h"
#include "uds.h"

static int loop_job(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    enum { CNT = 50000 };
    int64_t *a = malloc(CNT * 8), *b = malloc(CNT * 8);

    for (int it = 0; it < 200; it++) {
        for (int i = 0; i < CNT; i++)
            a[i] = (int64_t)r * 1000003 + i * it;
        if (HcclAllReduce(a, b, CNT, HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM, comm, NULL) != 0)
            return 1;
        for (int i = 0; i < CNT; i++)
            if (b[i] != (int64_t)1000003 * n * (n - 1) / 2 + (int64_t)n * i * it)
                return 2;
    }
    free(a);
    free(b);
    return 0;
}

static void send_raw(const void *p, size_t len)
{
    int fd = uds_connect(harness_socket());

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, p, len), (ssize_t)len);
    /* The daemon closes the connection on a bad frame: reading gives EOF, not a hang. */
    char c;
    alarm(10);
    ck_assert_int_le(read(fd, &c, 1), 0);
    alarm(0);
    close(fd);
}

static void garbage_frames(void)
{
    uint8_t junk[4096];
    uint8_t huge[8] = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4};

    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    junk[0] = 200; /* length 200, then bytes that are not a Msg */
    junk[1] = junk[2] = junk[3] = 0;
    send_raw(junk, sizeof(junk));
    send_raw(huge, sizeof(huge));
}

/* Speaks the protocol, joins a 1-rank comm, then posts descriptors that lie. */
static void lying_descriptors(void)
{
    HcclRootInfo ri;
    Hccld__RootInfo *info;
    Hccld__Msg m = HCCLD__MSG__INIT, *resp;
    Hccld__Hello h = HCCLD__HELLO__INIT;
    Hccld__CommInitReq ci = HCCLD__COMM_INIT_REQ__INIT;
    uds_conn_t c;
    int fd = uds_connect(harness_socket());

    ck_assert_int_ge(fd, 0);
    uds_conn_init(&c, fd);
    h.version = PROTO_VERSION;
    h.arena_bytes = 1 << 20;
    m.body_case = HCCLD__MSG__BODY_HELLO;
    m.hello = &h;
    ck_assert_int_eq(uds_send(fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(&c, &resp, 5000), 0);
    ck_assert_int_eq(resp->welcome->result, 0);
    ck_assert_int_eq(c.nfds, 3);
    Hccld__Welcome w = *resp->welcome;
    uint8_t *seg = mmap(NULL, w.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c.fds[0], 0);
    ck_assert_ptr_ne(seg, MAP_FAILED);
    frame_msg_free(resp);

    ck_assert_int_eq(HcclGetRootInfo(&ri), 0);
    info = rootinfo_unpack(&ri);
    ci.info = info;
    ci.nranks = 1;
    m.body_case = HCCLD__MSG__BODY_COMM_INIT_REQ;
    m.comm_init_req = &ci;
    ck_assert_int_eq(uds_send(fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(&c, &resp, 5000), 0);
    ck_assert_int_eq(resp->comm_init_resp->result, 0);
    uint32_t comm_id = resp->comm_init_resp->comm_id;
    frame_msg_free(resp);
    hccld__root_info__free_unpacked(info, NULL);

    ring_t sq, cq;
    ring_attach(&sq, shm_ring(seg, w.sq_off), w.sq_entries, sizeof(desc_t));
    ring_attach(&cq, shm_ring(seg, w.cq_off), w.cq_entries, sizeof(cqe_t));
    desc_t bad[] = {
        {.comm_id = comm_id,
         .kind = DESC_ALLREDUCE,
         .dtype = 4,
         .count = 1000,
         .send_off = w.arena_bytes - 100,
         .recv_off = 0},
        {.comm_id = comm_id, .kind = DESC_ALLREDUCE, .dtype = 4, .count = UINT64_MAX / 2},
        {.comm_id = comm_id,
         .kind = DESC_ALLREDUCE,
         .dtype = 4,
         .count = 10,
         .send_off = UINT64_MAX - 8},
        {.comm_id = comm_id, .kind = 99, .dtype = 4, .count = 10},
        {.comm_id = comm_id, .kind = DESC_ALLREDUCE, .dtype = 44, .count = 10},
        {.comm_id = comm_id, .kind = DESC_ALLREDUCE, .dtype = 4, .redop = 9, .count = 10},
        {.comm_id = comm_id + 1000, .kind = DESC_ALLREDUCE, .dtype = 4, .count = 10},
        {.comm_id = comm_id, .rank = 5, .kind = DESC_ALLREDUCE, .dtype = 4, .count = 10},
        {.comm_id = comm_id, .kind = DESC_SEND, .dtype = 4, .count = 10, .root = 7},
        {.comm_id = comm_id, .kind = DESC_ALLREDUCE, .dtype = 4, .count = 10, .seq = 12345},
    };
    int nbad = sizeof(bad) / sizeof(bad[0]);
    for (int i = 0; i < nbad; i++) {
        bad[i].tag = 1000 + (uint64_t)i;
        ck_assert_int_eq(ring_push(&sq, &bad[i]), 0);
    }
    uint64_t one = 1;
    ck_assert_int_eq(write(c.fds[2], &one, 8), 8);
    int got = 0;
    for (int spins = 0; spins < 5000 && got < nbad; spins++) {
        cqe_t e;
        if (ring_pop(&cq, &e) == 0) {
            ck_assert_msg(e.status == HCCL_E_PARA, "descriptor %llu completed with %d",
                          (unsigned long long)e.tag - 1000, e.status);
            got++;
        } else {
            usleep(1000);
        }
    }
    ck_assert_int_eq(got, nbad);
    /* Now scribble over the ring indices: the daemon must drop us, not crash. */
    sq.hdr->tail = sq.hdr->head + 100000;
    ck_assert_int_eq(write(c.fds[2], &one, 8), 8);
    usleep(100000);
    munmap(seg, w.seg_bytes);
    uds_conn_close(&c);
}

START_TEST(test_hostile_while_job_runs)
{
    pid_t job[2];
    int half_open[8];

    ck_assert_int_eq(harness_spawn_ranks(2, loop_job, NULL, 120, job), 0);
    for (int i = 0; i < 8; i++)
        half_open[i] = uds_connect(harness_socket()); /* connect, never speak */
    garbage_frames();
    lying_descriptors();
    ck_assert_int_eq(harness_wait(job, 2, 120), 0);
    for (int i = 0; i < 8; i++)
        if (half_open[i] >= 0)
            close(half_open[i]);
    /* The daemon still serves a new job. */
    ck_assert_int_eq(harness_run_ranks(2, loop_job, NULL, 120), 0);
}
END_TEST

Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_hostile_while_job_runs);
    suite_add_tcase(s, tc);
    return s;
}
