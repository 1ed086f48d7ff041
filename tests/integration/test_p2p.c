/* Send/Recv, HcclBatchSendRecv and AlltoAllV, compared element by element with the reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "harness.h"
#include "ref.h"
#include "suites.h"

static const uint64_t counts[] = {1, 3, 1000, 65537, 1048579};

/* A ring: even ranks send first, odd ranks receive first, so blocking calls pair up. */
int p2p_ring_case(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    int dt = HCCL_DATA_TYPE_FP32;
    uint32_t to = (r + 1) % n, from = (r + n - 1) % n;

    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        uint64_t cnt = counts[k];
        float *s = malloc(cnt * 4), *o = malloc(cnt * 4);
        HcclResult a, b;
        ref_fill(dt, HCCL_REDUCE_SUM, r, s, 0, cnt);
        memset(o, 0xEE, cnt * 4);
        if (r % 2 == 0) {
            a = HcclSend(s, cnt, dt, to, comm, NULL);
            b = HcclRecv(o, cnt, dt, from, comm, NULL);
        } else {
            b = HcclRecv(o, cnt, dt, from, comm, NULL);
            a = HcclSend(s, cnt, dt, to, comm, NULL);
        }
        if (a != HCCL_SUCCESS || b != HCCL_SUCCESS) {
            fprintf(stderr, "rank %u: send %d recv %d\n", r, a, b);
            return 1;
        }
        for (uint64_t i = 0; i < cnt; i++)
            if (!ref_equal(dt, o, i, ref_val(dt, HCCL_REDUCE_SUM, from, i))) {
                fprintf(stderr, "rank %u: count %llu: wrong at %llu\n", r, (unsigned long long)cnt,
                        (unsigned long long)i);
                return 1;
            }
        free(s);
        free(o);
    }
    return 0;
}

/* Checks count elements of buf against rank `from`'s values from element first on. */
static int batch_check(const float *buf, uint64_t count, uint32_t from, uint64_t first, uint32_t r,
                       const char *what)
{
    for (uint64_t i = 0; i < count; i++)
        if (!ref_equal(HCCL_DATA_TYPE_FP32, buf, i,
                       ref_val(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, from, first + i))) {
            fprintf(stderr, "rank %u: batch %s of %llu: wrong at %llu\n", r, what,
                    (unsigned long long)count, (unsigned long long)i);
            return 1;
        }
    return 0;
}

/*
 * HcclBatchSendRecv: every rank sends to both neighbours and receives from both, sends listed
 * first (the order that deadlocks with blocking HcclSend/HcclRecv), with different counts each
 * way; an empty item does nothing. With 2 ranks both neighbours are one peer: the k-th send to
 * it pairs with the k-th receive from it.
 */
int p2p_batch_case(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    int dt = HCCL_DATA_TYPE_FP32;
    uint32_t next = (r + 1) % n, prev = (r + n - 1) % n;

    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        uint64_t c1 = counts[k], c2 = counts[k] + 7;
        float *s1 = malloc(c1 * 4), *s2 = malloc(c2 * 4), *o1 = malloc(c1 * 4),
              *o2 = malloc(c2 * 4);
        ref_fill(dt, HCCL_REDUCE_SUM, r, s1, 0, c1);
        ref_fill(dt, HCCL_REDUCE_SUM, r, s2, 5, c2);
        memset(o1, 0xEE, c1 * 4);
        memset(o2, 0xEE, c2 * 4);
        HcclSendRecvItem items[] = {
            {HCCL_SEND, s1, c1, HCCL_DATA_TYPE_FP32, next},
            {HCCL_SEND, s2, c2, HCCL_DATA_TYPE_FP32, prev},
            {HCCL_RECV, NULL, 0, HCCL_DATA_TYPE_FP32, next},
            {HCCL_RECV, o1, c1, HCCL_DATA_TYPE_FP32, prev},
            {HCCL_RECV, o2, c2, HCCL_DATA_TYPE_FP32, next},
        };
        HcclResult rc = HcclBatchSendRecv(items, 5, comm, NULL);
        int bad = rc != HCCL_SUCCESS;
        if (bad)
            fprintf(stderr, "rank %u: batch of %llu: %s\n", r, (unsigned long long)c1,
                    HcclGetErrorString(rc));
        bad = bad || batch_check(o1, c1, prev, 0, r, "from prev") ||
              batch_check(o2, c2, next, 5, r, "from next");
        free(s1);
        free(s2);
        free(o1);
        free(o2);
        if (bad)
            return 1;
    }
    return 0;
}

/* A batch of k sends and k receives of cnt floats each way. */
typedef struct big_batch {
    int k;
    uint64_t cnt;
} big_batch_t;

/* A batch whose staging does not fit the arena at full depth (HCCL_BUFFSIZE is 12 MiB here;
 * 16 items of 1 MiB from malloc want 32 MiB of slots, 256 items of 256 KiB at one piece each
 * want 64 MiB) runs with fewer pieces in flight, then smaller ones, instead of failing with
 * HCCL_E_MEMORY, and everything arrives. */
static int p2p_batch_short_arena(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const big_batch_t *b = arg;
    const int K = b->k;
    const uint64_t CNT = b->cnt;
    uint32_t next = (r + 1) % n, prev = (r + n - 1) % n;
    float **s = calloc(K, sizeof(*s)), **o = calloc(K, sizeof(*o));
    HcclSendRecvItem *items = calloc(2 * K, sizeof(*items));
    int bad = 0;

    for (int k = 0; k < K; k++) {
        s[k] = malloc(CNT * 4);
        o[k] = malloc(CNT * 4);
        ref_fill(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, r, s[k], (uint64_t)k * CNT, CNT);
        memset(o[k], 0xEE, CNT * 4);
        items[k] = (HcclSendRecvItem){HCCL_SEND, s[k], CNT, HCCL_DATA_TYPE_FP32, next};
        items[K + k] = (HcclSendRecvItem){HCCL_RECV, o[k], CNT, HCCL_DATA_TYPE_FP32, prev};
    }
    HcclResult rc = HcclBatchSendRecv(items, 2 * K, comm, NULL);
    if (rc != HCCL_SUCCESS) {
        fprintf(stderr, "rank %u: batch in a short arena: %s\n", r, HcclGetErrorString(rc));
        bad = 1;
    }
    for (int k = 0; k < K; k++) {
        bad = bad || batch_check(o[k], CNT, prev, (uint64_t)k * CNT, r, "in a short arena");
        free(s[k]);
        free(o[k]);
    }
    free(s);
    free(o);
    free(items);
    return bad;
}

/* Bad batches fail with the exact error before anything moves; many small items in one batch
 * (the most a batch takes) all arrive; on a stream the batch runs as one call. */
static int p2p_batch_edges(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    enum { M = HCCL_BATCH_SEND_RECV_MAX / 2 };
    uint32_t peer = (r + 1) % n;
    int32_t out[M], in[M];
    HcclSendRecvItem items[2 * M];
    HcclStream st;
    int bad = 0;

    HcclSendRecvItem bad_type = {HCCL_SEND_RECV_RESERVED, out, 1, HCCL_DATA_TYPE_INT32, peer};
    HcclSendRecvItem bad_rank = {HCCL_SEND, out, 1, HCCL_DATA_TYPE_INT32, n};
    HcclSendRecvItem bad_buf = {HCCL_RECV, NULL, 1, HCCL_DATA_TYPE_INT32, peer};
    bad |= HcclBatchSendRecv(NULL, 1, comm, NULL) != HCCL_E_PTR;
    bad |= HcclBatchSendRecv(NULL, 0, comm, NULL) != HCCL_SUCCESS;
    bad |= HcclBatchSendRecv(&bad_type, 1, comm, NULL) != HCCL_E_PARA;
    bad |= HcclBatchSendRecv(&bad_rank, 1, comm, NULL) != HCCL_E_PARA;
    bad |= HcclBatchSendRecv(&bad_buf, 1, comm, NULL) != HCCL_E_PTR;
    bad |= HcclBatchSendRecv(items, HCCL_BATCH_SEND_RECV_MAX + 1, comm, NULL) != HCCL_E_PARA;
    if (bad) {
        fprintf(stderr, "rank %u: a bad batch got another result than expected\n", r);
        return 1;
    }
    /* Item i carries one element, i + 1000 * rank, to the next rank: M sends, then M receives
     * from the previous rank, on a stream. */
    for (int i = 0; i < M; i++) {
        out[i] = (int32_t)(i + 1000 * r);
        in[i] = -1;
        items[i] = (HcclSendRecvItem){HCCL_SEND, &out[i], 1, HCCL_DATA_TYPE_INT32, peer};
        items[M + i] =
            (HcclSendRecvItem){HCCL_RECV, &in[i], 1, HCCL_DATA_TYPE_INT32, (r + n - 1) % n};
    }
    if (HcclStreamCreate(&st) != HCCL_SUCCESS || HcclBatchSendRecv(items, 2 * M, comm, st) ||
        HcclStreamSynchronize(st) != HCCL_SUCCESS || HcclStreamDestroy(st) != HCCL_SUCCESS) {
        fprintf(stderr, "rank %u: a batch of %d on a stream failed\n", r, 2 * M);
        return 1;
    }
    for (int i = 0; i < M; i++)
        if (in[i] != (int32_t)(i + 1000 * ((r + n - 1) % n))) {
            fprintf(stderr, "rank %u: item %d of the big batch holds %d\n", r, i, in[i]);
            return 1;
        }
    return 0;
}

/* How many elements rank a sends to rank b: varied, sometimes zero. */
static uint64_t vcount(uint32_t a, uint32_t b, uint64_t base)
{
    return ((a * 5 + b * 3) % 4) * base + (a == b ? 1 : 0);
}

int p2p_alltoallv_case(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    uint64_t base = *(uint64_t *)arg;
    int dt = HCCL_DATA_TYPE_INT32;
    uint64_t sc[8] = {0}, sd[8] = {0}, rc[8] = {0}, rd[8] = {0}, st = 0, rt = 0;

    for (uint32_t j = 0; j < n; j++) {
        sc[j] = vcount(r, j, base);
        rc[j] = vcount(j, r, base);
        sd[j] = st + 2; /* gaps between blocks must stay untouched */
        rd[j] = rt + 3;
        st = sd[j] + sc[j];
        rt = rd[j] + rc[j];
    }
    int32_t *s = calloc(st + 1, 4), *o = malloc((rt + 1) * 4);
    for (uint32_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < sc[j]; i++)
            s[sd[j] + i] = (int32_t)(r * 100000 + j * 1000 + i % 1000);
    memset(o, 0xEE, (rt + 1) * 4);
    HcclResult res = HcclAlltoAllV(s, sc, sd, dt, o, rc, rd, dt, comm, NULL);
    if (res != HCCL_SUCCESS) {
        fprintf(stderr, "rank %u: alltoallv: %s\n", r, HcclGetErrorString(res));
        return 1;
    }
    for (uint32_t j = 0; j < n; j++) {
        for (uint64_t i = 0; i < rc[j]; i++)
            if (o[rd[j] + i] != (int32_t)(j * 100000 + r * 1000 + i % 1000)) {
                fprintf(stderr, "rank %u: from %u wrong at %llu\n", r, j, (unsigned long long)i);
                return 1;
            }
        if (o[rd[j] - 1] != (int32_t)0xEEEEEEEE) {
            fprintf(stderr, "rank %u: alltoallv wrote into a gap\n", r);
            return 1;
        }
    }
    free(s);
    free(o);
    return 0;
}

/* Elements of rank q's block in the V collectives: varied, some zero. */
static uint64_t vblock(uint32_t q, uint64_t base)
{
    return ((q * 7 + 3) % 5) * base + (q == 1);
}

int v_colls_case(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    uint64_t base = *(uint64_t *)arg, cnt[8] = {0}, dsp[8] = {0}, total = 0;
    int32_t *mine, *all, *src, *out;
    int bad = 0;

    for (uint32_t q = 0; q < n; q++) {
        cnt[q] = vblock(q, base);
        dsp[q] = total + 2; /* gaps stay untouched */
        total = dsp[q] + cnt[q];
    }
    /* AllGatherV: every rank gets every rank's block where recvDispls puts it. */
    mine = malloc((cnt[r] + 1) * 4);
    all = malloc((total + 1) * 4);
    for (uint64_t i = 0; i < cnt[r]; i++)
        mine[i] = (int32_t)(r * 100000 + i % 1000);
    memset(all, 0xEE, (total + 1) * 4);
    HcclResult rc = HcclAllGatherV(mine, cnt[r], all, cnt, dsp, HCCL_DATA_TYPE_INT32, comm, NULL);
    for (uint32_t q = 0; q < n && rc == HCCL_SUCCESS && !bad; q++) {
        for (uint64_t i = 0; i < cnt[q] && !bad; i++)
            bad = all[dsp[q] + i] != (int32_t)(q * 100000 + i % 1000);
        bad = bad || all[dsp[q] - 1] != (int32_t)0xEEEEEEEE;
    }
    if (rc != HCCL_SUCCESS || bad)
        fprintf(stderr, "rank %u: allgatherv base %llu: %s%s\n", r, (unsigned long long)base,
                HcclGetErrorString(rc), bad ? ", a wrong element" : "");
    /* ReduceScatterV: rank r sends r * 1000 + q * 10 + i % 7 for q's block; q gets the sum. */
    src = malloc((total + 1) * 4);
    out = malloc((cnt[r] + 1) * 4);
    for (uint32_t q = 0; q < n; q++)
        for (uint64_t i = 0; i < cnt[q]; i++)
            src[dsp[q] + i] = (int32_t)(r * 1000 + q * 10 + i % 7);
    memset(out, 0xEE, (cnt[r] + 1) * 4);
    HcclResult rc2 = HcclReduceScatterV(src, cnt, dsp, out, cnt[r], HCCL_DATA_TYPE_INT32,
                                        HCCL_REDUCE_SUM, comm, NULL);
    for (uint64_t i = 0; i < cnt[r] && rc2 == HCCL_SUCCESS && !bad; i++)
        bad = out[i] != (int32_t)(1000 * n * (n - 1) / 2 + n * (r * 10 + i % 7));
    bad = bad || out[cnt[r]] != (int32_t)0xEEEEEEEE;
    if (rc2 != HCCL_SUCCESS || bad)
        fprintf(stderr, "rank %u: reducescatterv base %llu: %s%s\n", r, (unsigned long long)base,
                HcclGetErrorString(rc2), bad ? ", a wrong element" : "");
    /* The same two on a stream, after an allreduce queued there: both in order, the arrays free
     * to go once the calls return (ReduceScatterV waits for the stream, then runs). */
    if (!bad && rc == HCCL_SUCCESS && rc2 == HCCL_SUCCESS) {
        HcclStream st;
        int32_t one = 1, sum = 0;
        uint64_t scnt[8], sdsp[8];
        memcpy(scnt, cnt, sizeof(scnt));
        memcpy(sdsp, dsp, sizeof(sdsp));
        memset(all, 0xEE, (total + 1) * 4);
        memset(out, 0xEE, (cnt[r] + 1) * 4);
        bad = HcclStreamCreate(&st) != HCCL_SUCCESS ||
              HcclAllReduce(&one, &sum, 1, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, st) ||
              HcclAllGatherV(mine, cnt[r], all, scnt, sdsp, HCCL_DATA_TYPE_INT32, comm, st) ||
              HcclReduceScatterV(src, scnt, sdsp, out, cnt[r], HCCL_DATA_TYPE_INT32,
                                 HCCL_REDUCE_SUM, comm, st);
        memset(scnt, 0xFF, sizeof(scnt)); /* the calls took their copies */
        bad = bad || HcclStreamSynchronize(st) != HCCL_SUCCESS ||
              HcclStreamDestroy(st) != HCCL_SUCCESS || sum != (int32_t)n;
        for (uint32_t q = 0; q < n && !bad; q++)
            for (uint64_t i = 0; i < cnt[q] && !bad; i++)
                bad = all[dsp[q] + i] != (int32_t)(q * 100000 + i % 1000);
        for (uint64_t i = 0; i < cnt[r] && !bad; i++)
            bad = out[i] != (int32_t)(1000 * n * (n - 1) / 2 + n * (r * 10 + i % 7));
        if (bad)
            fprintf(stderr, "rank %u: the V calls on a stream went wrong\n", r);
    }
    /* A rank's own count that differs from the arrays': refused here, before anything moves. */
    bad = bad || HcclAllGatherV(mine, cnt[r] + 1, all, cnt, dsp, HCCL_DATA_TYPE_INT32, comm,
                                NULL) != HCCL_E_PARA;
    bad = bad || HcclReduceScatterV(src, cnt, dsp, out, cnt[r] + 1, HCCL_DATA_TYPE_INT32,
                                    HCCL_REDUCE_SUM, comm, NULL) != HCCL_E_PARA;
    free(mine);
    free(all);
    free(src);
    free(out);
    return bad || rc != HCCL_SUCCESS || rc2 != HCCL_SUCCESS;
}

START_TEST(test_ring)
{
    for (uint32_t n = 2; n <= 4; n++)
        ck_assert_int_eq(harness_run_ranks(n, p2p_ring_case, NULL, 120), 0);
}
END_TEST

START_TEST(test_alltoallv)
{
    uint64_t bases[] = {0, 1, 777, 300000};

    for (uint32_t n = 1; n <= 4; n++)
        for (size_t b = 0; b < 4; b++)
            ck_assert_msg(harness_run_ranks(n, p2p_alltoallv_case, &bases[b], 120) == 0,
                          "alltoallv %u ranks base %llu", n, (unsigned long long)bases[b]);
}
END_TEST

START_TEST(test_v_colls)
{
    uint64_t bases[] = {0, 1, 777, 300000};

    for (uint32_t n = 1; n <= 4; n++)
        for (size_t b = 0; b < 4; b++)
            ck_assert_msg(harness_run_ranks(n, v_colls_case, &bases[b], 120) == 0,
                          "allgatherv and reducescatterv, %u ranks base %llu", n,
                          (unsigned long long)bases[b]);
}
END_TEST

/* From 1 rank on: a comm of one rank sends to itself (the daemon once wrote past its per-rank
 * table there, and died when the comm was destroyed; the next run would then fail). */
START_TEST(test_batch)
{
    for (uint32_t n = 1; n <= 4; n++) {
        ck_assert_msg(harness_run_ranks(n, p2p_batch_case, NULL, 120) == 0, "batch, %u ranks", n);
        ck_assert_msg(harness_run_ranks(n, p2p_batch_edges, NULL, 120) == 0,
                      "batch edges, %u ranks", n);
    }
}
END_TEST

START_TEST(test_batch_short_arena)
{
    big_batch_t few = {8, 262147}, most = {HCCL_BATCH_SEND_RECV_MAX / 2, 65541};

    setenv("HCCL_BUFFSIZE", "12", 1);
    for (uint32_t n = 2; n <= 3; n++) {
        int rc = harness_run_ranks(n, p2p_batch_short_arena, &few, 120);
        ck_assert_msg(rc == 0, "batch in a short arena, %u ranks", n);
        rc = harness_run_ranks(n, p2p_batch_short_arena, &most, 120);
        ck_assert_msg(rc == 0, "batch of %d in a short arena, %u ranks", 2 * most.k, n);
    }
    unsetenv("HCCL_BUFFSIZE");
}
END_TEST

Suite *p2p_suite(void)
{
    Suite *s = suite_create("p2p");
    TCase *tc = tcase_create("p2p");

    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_ring);
    tcase_add_test(tc, test_alltoallv);
    tcase_add_test(tc, test_v_colls);
    tcase_add_test(tc, test_batch);
    tcase_add_test(tc, test_batch_short_arena);
    suite_add_tcase(s, tc);
    return s;
}
