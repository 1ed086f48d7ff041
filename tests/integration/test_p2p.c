/* Send/Recv and AlltoAllV, compared element by element with the reference. */
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

Suite *p2p_suite(void)
{
    Suite *s = suite_create("p2p");
    TCase *tc = tcase_create("p2p");

    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_ring);
    tcase_add_test(tc, test_alltoallv);
    suite_add_tcase(s, tc);
    return s;
}
