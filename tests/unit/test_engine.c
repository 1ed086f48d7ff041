/*
 * The engine core (daemon/sched) in one process, without a daemon or a client: sessions whose
 * segments are plain memory, a comm of them, descriptors posted on their submission rings as
 * libhccl posts them, completions read back from their completion rings. Matching across
 * ranks, a rank whose process dies (its session removed), a rank that leaves cleanly, ranks
 * that post different collectives.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hccl/hccl.h"
#include "ring.h"
#include "sched/engine.h"
#include "shm.h"
#include "test_list.h"

#define ARENA (1u << 20)
#define ENTRIES 64u
#define COUNT 1000u /* floats per block */
#define WAIT_S 10   /* a completion that takes longer is a hang */
#define COMM 7u

typedef struct fake {
    void *base, *arena;
    shm_layout_t l;
    ring_t sq, cq;
} fake_t;

static engine_t *eng;
static fake_t ranks[3];

/* Session sid's segment: its rings formatted as the daemon formats them. */
static void fake_add(fake_t *f, uint64_t sid)
{
    shm_layout_make(ARENA, ENTRIES, ENTRIES, &f->l);
    ck_assert_int_eq(posix_memalign(&f->base, SHM_PAGE, f->l.seg_bytes), 0);
    ck_assert_int_eq(posix_memalign(&f->arena, SHM_PAGE, f->l.arena_bytes), 0);
    memset(f->base, 0, f->l.seg_bytes);
    memset(f->arena, 0, f->l.arena_bytes);
    ring_format(shm_ring(f->base, f->l.sq_off), ENTRIES);
    ring_format(shm_ring(f->base, f->l.cq_off), ENTRIES);
    ring_attach(&f->sq, shm_ring(f->base, f->l.sq_off), ENTRIES, sizeof(desc_t));
    ring_attach(&f->cq, shm_ring(f->base, f->l.cq_off), ENTRIES, sizeof(cqe_t));
    ck_assert_int_eq(engine_session_add(eng, sid, f->base, f->arena, &f->l), 0);
}

/* An engine, n sessions (sid r + 1 for rank r) and a comm of them. */
static void setup(uint32_t n)
{
    uint64_t members[3];

    eng = engine_create(1);
    ck_assert_ptr_nonnull(eng);
    for (uint32_t r = 0; r < n; r++) {
        fake_add(&ranks[r], r + 1);
        members[r] = r + 1;
    }
    ck_assert_int_eq(engine_comm_create(eng, COMM, n, members), 0);
}

static void teardown(uint32_t n)
{
    engine_destroy(eng);
    for (uint32_t r = 0; r < n; r++) {
        free(ranks[r].base);
        free(ranks[r].arena);
    }
}

static float *block(uint32_t r, uint64_t off)
{
    return (float *)((char *)ranks[r].arena + off);
}

/* Rank r posts kind for sequence seq: COUNT floats from arena offset 0 into COUNT * 4. */
static void post(uint32_t r, uint8_t kind, uint64_t seq, uint64_t tag)
{
    desc_t d = {.tag = tag,
                .comm_id = COMM,
                .kind = kind,
                .dtype = HCCL_DATA_TYPE_FP32,
                .redop = HCCL_REDUCE_SUM,
                .seq = seq,
                .count = COUNT,
                .rank = r,
                .send_off = 0,
                .send_stride = COUNT * sizeof(float),
                .recv_off = COUNT * sizeof(float),
                .recv_stride = COUNT * sizeof(float),
                .total = COUNT};
    uint64_t one = 1;

    ck_assert_int_eq(ring_push(&ranks[r].sq, &d), 0);
    ck_assert_int_eq(write(engine_doorbell_fd(eng), &one, sizeof(one)), (ssize_t)sizeof(one));
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

Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_matches_ranks);
    tcase_add_test(tc, test_engine_breaks_on_a_death);
    tcase_add_test(tc, test_engine_rank_leaves);
    tcase_add_test(tc, test_engine_mismatch);
    suite_add_tcase(s, tc);
    return s;
}
