/*
 * The engine core (daemon/sched) in one process, without a daemon or a client: sessions whose
 * segments are plain memory, a comm of them, descriptors posted on their submission rings as
 * libhccl posts them, completions read back from their completion rings. Matching across
 * ranks, a rank whose process dies (its session removed), a rank that leaves cleanly, ranks
 * that post different collectives. Then the engine's side of comms that span daemons, against a
 * fake of the span layer (span/span.h): what it hands down, and what it does with each event.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_session.h"
#include "hccl/hccl.h"
#include "ring.h"
#include "sched/engine.h"
#include "sched/engine_int.h"
#include "shm.h"
#include "test_list.h"

#define COUNT 1000u /* floats per block */
#define WAIT_S 10   /* a completion that takes longer is a hang */
#define COMM 7u

static engine_t *eng;
static fake_t ranks[3];

/* An engine, n sessions (sid r + 1 for rank r) and a comm of them. */
static void setup(uint32_t n)
{
    uint64_t members[3];

    eng = engine_create(1);
    ck_assert_ptr_nonnull(eng);
    for (uint32_t r = 0; r < n; r++) {
        fake_session_add(eng, &ranks[r], r + 1);
        members[r] = r + 1;
    }
    ck_assert_int_eq(engine_comm_create(eng, COMM, n, members), 0);
}

static void teardown(uint32_t n)
{
    engine_destroy(eng);
    for (uint32_t r = 0; r < n; r++)
        fake_session_free(&ranks[r]);
}

static float *block(uint32_t r, uint64_t off)
{
    return (float *)((char *)ranks[r].arena + off);
}

/* Rank r posts a piece of kind with flags for sequence seq (a transfer: with peer): COUNT floats
 * from arena offset 0 into COUNT * 4 (in place: into 0). */
static void post_f(uint32_t r, uint8_t kind, uint64_t seq, uint64_t tag, uint8_t flags,
                   uint32_t peer)
{
    desc_t d = {.tag = tag,
                .comm_id = COMM,
                .kind = kind,
                .dtype = HCCL_DATA_TYPE_FP32,
                .redop = HCCL_REDUCE_SUM,
                .flags = flags,
                .seq = seq,
                .count = COUNT,
                .root = peer,
                .rank = r,
                .send_off = 0,
                .send_stride = COUNT * sizeof(float),
                .recv_off = flags & DESC_F_OVERWRITES ? 0 : COUNT * sizeof(float),
                .recv_stride = COUNT * sizeof(float),
                .total = COUNT};
    uint64_t one = 1;

    ck_assert_int_eq(ring_push(&ranks[r].sq, &d), 0);
    ck_assert_int_eq(write(engine_doorbell_fd(eng), &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* The same, without flags. */
static void post(uint32_t r, uint8_t kind, uint64_t seq, uint64_t tag)
{
    post_f(r, kind, seq, tag, 0, 0);
}

/* Rank r's next completion, within WAIT_S. */
static cqe_t completion(uint32_t r)
{
    cqe_t e;

    for (int i = 0; i < WAIT_S * 1000; i++) {
        if (ring_pop(&ranks[r].cq, &e) == 0)
            return e;
        usleep(1000);
    }
    ck_abort_msg("rank %u: no completion within %d s", r, WAIT_S);
    return e;
}

/* Waits until the engine holds n descriptors of the comm in its queues (taken in from the
 * rings, waiting for their peers), within WAIT_S. */
static void queued(uint32_t n)
{
    engine_comm_stats_t st;

    for (int i = 0; i < WAIT_S * 1000; i++) {
        ck_assert_int_eq(engine_get_comm_stats(eng, COMM, &st), 0);
        if (st.queued == n)
            return;
        usleep(1000);
    }
    ck_abort_msg("the engine holds %u descriptors, not %u", st.queued, n);
}

/* Two ranks' allreduce meets: both complete with the sum, element by element. */
START_TEST(test_engine_matches_ranks)
{
    setup(2);
    for (uint32_t r = 0; r < 2; r++)
        for (uint32_t i = 0; i < COUNT; i++)
            block(r, 0)[i] = (float)(r * 1000 + i);
    for (uint64_t seq = 0; seq < 3; seq++) {
        post(1, DESC_ALLREDUCE, seq, 10 + seq); /* the later rank posts first: order is free */
        post(0, DESC_ALLREDUCE, seq, 20 + seq);
        for (uint32_t r = 0; r < 2; r++) {
            cqe_t e = completion(r);
            ck_assert_uint_eq(e.tag, (r == 1 ? 10 : 20) + seq);
            ck_assert_int_eq(e.status, HCCL_SUCCESS);
            for (uint32_t i = 0; i < COUNT; i++)
                ck_assert_float_eq(block(r, COUNT * sizeof(float))[i], (float)(1000 + 2 * i));
        }
    }
    teardown(2);
}
END_TEST

/* A client that connects while the engine sleeps must be told to ring the doorbell (else its
 * first ops wait out the engine's 1 s poll): once the engine has gone to sleep over session 1,
 * session 2, added then, finds daemon_sleeping set. */
START_TEST(test_engine_new_session_told_to_ring)
{
    const shm_hdr_t *h1, *h2;

    setup(1);
    h1 = ranks[0].base;
    for (int i = 0; i < WAIT_S * 1000 && !__atomic_load_n(&h1->daemon_sleeping, __ATOMIC_RELAXED);
         i++)
        usleep(1000);
    ck_assert_msg(__atomic_load_n(&h1->daemon_sleeping, __ATOMIC_RELAXED),
                  "the engine never went to sleep");
    fake_session_add(eng, &ranks[1], 2);
    h2 = ranks[1].base;
    ck_assert_uint_eq(__atomic_load_n(&h2->daemon_sleeping, __ATOMIC_RELAXED), 1);
    teardown(2);
}
END_TEST

/* Rank 2's process dies with rank 0's op queued: it fails with HCCL_E_REMOTE naming rank 2,
 * the comm is broken with that status, and what is posted later fails at once. */
START_TEST(test_engine_breaks_on_a_death)
{
    engine_comm_stats_t st;

    setup(3);
    post(0, DESC_ALLREDUCE, 0, 1);
    queued(1);
    engine_session_remove(eng, 3);
    cqe_t e = completion(0);
    ck_assert_int_eq(e.status, HCCL_E_REMOTE);
    ck_assert_uint_eq(e.culprit, 1 + 2);
    ck_assert_int_eq(engine_get_comm_stats(eng, COMM, &st), 0);
    ck_assert_int_eq(st.broken, 1);
    ck_assert_int_eq(st.broken_status, HCCL_E_REMOTE);
    post(1, DESC_ALLREDUCE, 0, 2);
    ck_assert_int_eq(completion(1).status, HCCL_E_REMOTE);
    teardown(3);
}
END_TEST

/* Rank 1 leaves cleanly (HcclCommDestroy) while rank 0 waits for it: rank 0's op fails with
 * HCCL_E_REMOTE, but the comm is not broken (no rank misbehaved). */
START_TEST(test_engine_rank_leaves)
{
    engine_comm_stats_t st;

    setup(2);
    post(0, DESC_ALLREDUCE, 0, 1);
    queued(1);
    engine_comm_leave(eng, COMM, 1);
    ck_assert_int_eq(completion(0).status, HCCL_E_REMOTE);
    ck_assert_int_eq(engine_get_comm_stats(eng, COMM, &st), 0);
    ck_assert_int_eq(st.broken, 0);
    teardown(2);
}
END_TEST

/* Ranks post different collectives for one sequence: both fail with HCCL_E_PARA, and so does
 * the comm from then on. */
START_TEST(test_engine_mismatch)
{
    engine_comm_stats_t st;

    setup(2);
    post(0, DESC_ALLREDUCE, 0, 1);
    post(1, DESC_BROADCAST, 0, 2);
    ck_assert_int_eq(completion(0).status, HCCL_E_PARA);
    ck_assert_int_eq(completion(1).status, HCCL_E_PARA);
    ck_assert_int_eq(engine_get_comm_stats(eng, COMM, &st), 0);
    ck_assert_int_eq(st.broken, 1);
    ck_assert_int_eq(st.broken_status, HCCL_E_PARA);
    teardown(2);
}
END_TEST

/* The fake span layer: scripted events, a record of what the engine handed down. */
/* A comm registered again after a restart (engine_resume_t): rank 1 completed collective
 * pieces below 3, every rank posted those below 5, and rank 0 had sent its peer 2 pieces. A
 * piece some rank completed completes at once for the other, unrun (its output untouched);
 * piece 3 runs again; piece 4, in place on one rank, fails on both; piece 5 runs; the sends
 * below 2 complete at once, the third matches its receive and moves the data. */
START_TEST(test_engine_resume)
{
    const uint64_t p2p[4] = {0, 2, 0, 0}; /* rank 0 -> 1: 2 done */
    engine_resume_t er = {.done_below = 3, .maybe_started = 5, .p2p_done = p2p};

    setup(2);
    ck_assert_int_eq(engine_comm_resume(eng, COMM, &er), 0);
    for (uint32_t i = 0; i < COUNT; i++) {
        block(0, 0)[i] = 1.0f;
        block(1, 0)[i] = (float)i;
        block(0, COUNT * sizeof(float))[i] = -7.0f; /* "written before the restart" */
    }
    post_f(0, DESC_ALLREDUCE, 2, 12, 0, 0);
    cqe_t e = completion(0);
    ck_assert_uint_eq(e.tag, 12);
    ck_assert_int_eq(e.status, HCCL_SUCCESS);
    ck_assert_float_eq(block(0, COUNT * sizeof(float))[5], -7.0f);
    queued(0);
    for (uint64_t seq = 3; seq < 6; seq++) {
        post_f(0, DESC_ALLREDUCE, seq, 20 + seq, seq == 4 ? DESC_F_OVERWRITES : 0, 0);
        post_f(1, DESC_ALLREDUCE, seq, 30 + seq, 0, 0);
        for (uint32_t r = 0; r < 2; r++) {
            e = completion(r);
            ck_assert_uint_eq(e.tag, (r ? 30 : 20) + seq);
            ck_assert_int_eq(e.status, seq == 4 ? HCCL_E_REMOTE : HCCL_SUCCESS);
        }
        for (uint32_t i = 0; seq != 4 && i < COUNT; i++)
            ck_assert_float_eq(block(1, COUNT * sizeof(float))[i], 1.0f + (float)i);
    }
    for (uint64_t seq = 0; seq < 2; seq++) {
        post_f(0, DESC_SEND, seq, 40 + seq, 0, 1);
        e = completion(0);
        ck_assert_uint_eq(e.tag, 40 + seq);
        ck_assert_int_eq(e.status, HCCL_SUCCESS);
    }
    for (uint32_t i = 0; i < COUNT; i++)
        block(0, 0)[i] = 3.0f + (float)i;
    post_f(1, DESC_RECV, 2, 52, 0, 0);
    post_f(0, DESC_SEND, 2, 42, 0, 1);
    ck_assert_uint_eq(completion(0).tag, 42);
    ck_assert_uint_eq(completion(1).tag, 52);
    for (uint32_t i = 0; i < COUNT; i++)
        ck_assert_float_eq(block(1, COUNT * sizeof(float))[i], 3.0f + (float)i);
    teardown(2);
}
END_TEST

static struct fake_span {
    int busy, started, posted, notified, notice, left_local, freed;
    desc_t coll, p2p;
    l0_rank_t r0;
    uint32_t p2p_local;
    void *p2p_buf;
    uint32_t notice_rank;
    span_ev_t q[16];
    unsigned qh, qn;
} fs;

static span_state_t fs_state(const span_comm_t *sc)
{
    (void)sc;
    return SPAN_READY;
}

static int fs_progress(span_comm_t *sc, int broken)
{
    (void)sc;
    (void)broken;
    return 0;
}

static int fs_event(span_comm_t *sc, span_ev_t *ev)
{
    (void)sc;
    if (fs.qn == 0)
        return 0;
    *ev = fs.q[fs.qh++ % 16];
    fs.qn--;
    return 1;
}

static int fs_busy(const span_comm_t *sc)
{
    (void)sc;
    return fs.busy;
}

static int fs_coll_start(span_comm_t *sc, const desc_t *d, const l0_rank_t *rk)
{
    (void)sc;
    fs.coll = *d;
    fs.r0 = rk[0];
    fs.started++;
    fs.busy = 1;
    return 0;
}

static int fs_p2p_post(span_comm_t *sc, uint32_t l, const desc_t *d, uint64_t t_in, void *buf)
{
    (void)sc;
    (void)t_in;
    fs.p2p = *d;
    fs.p2p_local = l;
    fs.p2p_buf = buf;
    fs.posted++;
    return 1;
}

static void fs_push(const span_ev_t *ev)
{
    fs.q[(fs.qh + fs.qn++) % 16] = *ev;
}

static unsigned fs_p2p_cancel(span_comm_t *sc, HcclResult status)
{
    (void)sc;
    if (fs.posted == 0)
        return 0;
    fs_push(&(span_ev_t){
        .kind = SPAN_EV_P2P_DONE, .status = status, .local = fs.p2p_local, .tag = fs.p2p.tag});
    fs.posted = 0;
    return 1;
}

static void fs_notify(span_comm_t *sc, uint32_t rank, int what, uint64_t limit)
{
    (void)sc;
    (void)limit;
    fs.notified++;
    fs.notice = what;
    fs.notice_rank = rank;
}

static int fs_rank_left(span_comm_t *sc, uint32_t l)
{
    (void)sc;
    fs.left_local = (int)l;
    return 0;
}

static int fs_waits(const span_comm_t *sc, int broken)
{
    (void)sc;
    (void)broken;
    return 0;
}

static int fs_qos_active(const span_comm_t *sc, uint64_t now)
{
    (void)sc;
    (void)now;
    return 0;
}

static int fs_poll_fds(const span_comm_t *sc, int broken, struct pollfd *pfd, int max)
{
    (void)sc;
    (void)broken;
    (void)pfd;
    (void)max;
    return 0;
}

static void fs_stats(const span_comm_t *sc, span_stats_t *st, char (*link)[SPAN_LINK_MAX],
                     uint32_t max, uint32_t *nnodes)
{
    (void)sc;
    (void)link;
    (void)max;
    *st = (span_stats_t){.algo = -1, .on_wire = fs.busy};
    *nnodes = 0;
}

static uint32_t fs_links(const span_comm_t *sc, char (*addrs)[SPAN_ADDR_MAX], uint32_t max)
{
    (void)sc;
    (void)addrs;
    (void)max;
    return 0;
}

static void fs_free(span_comm_t *sc)
{
    (void)sc;
    fs.freed++;
}

static const span_ops_t fake_span_ops = {
    .state = fs_state,
    .progress = fs_progress,
    .event = fs_event,
    .busy = fs_busy,
    .coll_start = fs_coll_start,
    .p2p_post = fs_p2p_post,
    .p2p_cancel = fs_p2p_cancel,
    .notify = fs_notify,
    .rank_left = fs_rank_left,
    .waits = fs_waits,
    .qos_active = fs_qos_active,
    .poll_fds = fs_poll_fds,
    .stats = fs_stats,
    .links = fs_links,
    .free = fs_free,
};

/* The comm of setup(2) as this node's half of 4 ranks (global 0 and 1 here, 2 and 3 on
 * another node), spanning daemons through the fake. */
static void setup_span(void)
{
    static const uint32_t global[2] = {0, 1};

    memset(&fs, 0, sizeof(fs));
    fs.left_local = -1;
    setup(2);
    pthread_mutex_lock(&eng->lock);
    eng_comm_t *c = eng_comm_find(eng, COMM);
    ck_assert_int_eq(eng_comm_set_ranks(c, 4, global), 0);
    c->span = (span_comm_t *)&fs;
    c->sops = &fake_span_ops;
    c->qos_class = -1;
    pthread_mutex_unlock(&eng->lock);
}

/* An event reaches the engine at its next pass. */
static void fs_report(const span_ev_t *ev)
{
    uint64_t one = 1;

    pthread_mutex_lock(&eng->lock);
    fs_push(ev);
    pthread_mutex_unlock(&eng->lock);
    ck_assert_int_eq(write(engine_doorbell_fd(eng), &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* Waits until *v (read under the engine's lock) is want, within WAIT_S. */
static void fs_until(const int *v, int want)
{
    for (int i = 0; i < WAIT_S * 1000; i++) {
        pthread_mutex_lock(&eng->lock);
        int now = *v;
        pthread_mutex_unlock(&eng->lock);
        if (now == want)
            return;
        usleep(1000);
    }
    ck_abort_msg("fake span layer: %d, not %d", *v, want);
}

/* Once both local ranks posted, the collective goes down once with rank 0's buffers; its end,
 * reported as an event, completes both with its status and profile. */
START_TEST(test_engine_span_coll)
{
    setup_span();
    post(0, DESC_ALLREDUCE, 0, 1);
    queued(1);
    ck_assert_int_eq(fs.started, 0);
    post(1, DESC_ALLREDUCE, 0, 2);
    fs_until(&fs.started, 1);
    ck_assert_uint_eq(fs.coll.seq, 0);
    ck_assert_ptr_eq(fs.r0.send, ranks[0].arena);
    ck_assert_ptr_eq(fs.r0.recv, block(0, COUNT * sizeof(float)));
    pthread_mutex_lock(&eng->lock);
    fs.busy = 0;
    pthread_mutex_unlock(&eng->lock);
    fs_report(&(span_ev_t){.kind = SPAN_EV_COLL_DONE,
                           .status = HCCL_E_TCP_TRANSFER,
                           .prof = {.t_start = 1, .algo = 2}});
    for (uint32_t r = 0; r < 2; r++) {
        cqe_t e = completion(r);
        ck_assert_uint_eq(e.tag, r + 1);
        ck_assert_int_eq(e.status, HCCL_E_TCP_TRANSFER);
        ck_assert_int_eq(e.algo, 2);
    }
    ck_assert_int_eq(fs.started, 1);
    teardown(2);
    ck_assert_int_eq(fs.freed, 1);
}
END_TEST

/* BROKEN fails what is queued with its status, the comm too from then on, and tells the other
 * nodes once; a transfer in flight completes with the same status. */
START_TEST(test_engine_span_broken)
{
    engine_comm_stats_t st;

    setup_span();
    post(0, DESC_ALLREDUCE, 0, 1);
    queued(1);
    desc_t d = {.tag = 9,
                .comm_id = COMM,
                .kind = DESC_SEND,
                .dtype = HCCL_DATA_TYPE_FP32,
                .count = COUNT,
                .total = COUNT,
                .rank = 1,
                .root = 3,
                .send_off = 64};
    uint64_t one = 1;
    ck_assert_int_eq(ring_push(&ranks[1].sq, &d), 0);
    ck_assert_int_eq(write(engine_doorbell_fd(eng), &one, sizeof(one)), (ssize_t)sizeof(one));
    fs_until(&fs.posted, 1);
    ck_assert_uint_eq(fs.p2p_local, 1);
    ck_assert_uint_eq(fs.p2p.root, 3);
    ck_assert_ptr_eq(fs.p2p_buf, (char *)ranks[1].arena + 64);
    fs_report(&(span_ev_t){.kind = SPAN_EV_BROKEN,
                           .status = HCCL_E_TIMEOUT,
                           .culprit = UINT32_MAX,
                           .why = "HCCL_CONNECT_TIMEOUT"});
    ck_assert_int_eq(completion(0).status, HCCL_E_TIMEOUT);
    cqe_t e = completion(1);
    ck_assert_uint_eq(e.tag, 9);
    ck_assert_int_eq(e.status, HCCL_E_TIMEOUT);
    ck_assert_int_eq(engine_get_comm_stats(eng, COMM, &st), 0);
    ck_assert_int_eq(st.broken, 1);
    ck_assert_int_eq(st.broken_status, HCCL_E_TIMEOUT);
    ck_assert_int_eq(fs.notified, 1);
    ck_assert_int_eq(fs.notice, SPAN_NOTICE_BROKE);
    post(1, DESC_ALLREDUCE, 0, 3);
    ck_assert_int_eq(completion(1).status, HCCL_E_TIMEOUT);
    teardown(2);
}
END_TEST

/* Another node's rank 3 left before piece 0: rank 0's queued piece fails with HCCL_E_REMOTE
 * naming it, the comm stays whole, nothing goes back to the other nodes. A local rank that
 * leaves is told to the span layer. */
START_TEST(test_engine_span_rank_left)
{
    engine_comm_stats_t st;

    setup_span();
    post(0, DESC_ALLREDUCE, 0, 1);
    queued(1);
    fs_report(&(span_ev_t){.kind = SPAN_EV_RANK_LEFT, .culprit = 3, .limit = 0});
    cqe_t e = completion(0);
    ck_assert_int_eq(e.status, HCCL_E_REMOTE);
    ck_assert_uint_eq(e.culprit, 3 + 1);
    ck_assert_int_eq(engine_get_comm_stats(eng, COMM, &st), 0);
    ck_assert_int_eq(st.broken, 0);
    ck_assert_int_eq(fs.notified, 0);
    engine_comm_leave(eng, COMM, 1);
    ck_assert_int_eq(fs.left_local, 1);
    teardown(2);
}
END_TEST

Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_matches_ranks);
    tcase_add_test(tc, test_engine_new_session_told_to_ring);
    tcase_add_test(tc, test_engine_breaks_on_a_death);
    tcase_add_test(tc, test_engine_rank_leaves);
    tcase_add_test(tc, test_engine_mismatch);
    tcase_add_test(tc, test_engine_resume);
    suite_add_tcase(s, tc);
    tc = tcase_create("span");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_span_coll);
    tcase_add_test(tc, test_engine_span_broken);
    tcase_add_test(tc, test_engine_span_rank_left);
    suite_add_tcase(s, tc);
    return s;
}
