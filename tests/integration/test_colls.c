/*
 * Every collective x data type x reduce op x count x placement x rank count, each result
 * compared element by element with the reference. Buffers: malloc'd (staged) out of place and
 * in place, HcclMemAlloc'd (zero copy), and (the matrix, from 1000 elements on, the quick
 * matrix's types and ops) malloc'd and registered with HcclCommRegister, out of place and in
 * place, starting mid-page.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desc_check.h"
#include "dtype.h"
#include "harness.h"
#include "ref.h"
#include "shm.h"
#include "suites.h"

/* The random cases draw from the first MODE_COUNT modes; the matrix runs them all. */
enum mode {
    MODE_OOP,
    MODE_INPLACE,
    MODE_ZEROCOPY,
    MODE_COUNT,
    MODE_REG = MODE_COUNT,
    MODE_REG_INPLACE,
    MODE_ALL
};

static const uint64_t counts[] = {0, 1, 3, 1000, 65537, 1048579};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))
#define MAXCOUNT 1048579ull

typedef struct bufs {
    uint8_t *send, *recv;   /* malloc'd, nranks * MAXCOUNT * 8 bytes each */
    uint8_t *zsend, *zrecv; /* HcclMemAlloc'd, same size */
    uint8_t *rsend, *rrecv; /* registered: inside rmem, 40 bytes past a malloc'd block's start */
    uint8_t *rmem[2];
    void *reg[2];
} bufs_t;

typedef struct ccase {
    int kind, dt, op, mode;
    uint32_t root;
    uint64_t count;
} ccase_t;

static int report(const ccase_t *c, uint32_t r, const char *what, uint64_t bad, uint64_t first)
{
    fprintf(stderr,
            "rank %u: %s %s %s count %llu mode %d root %u: %s (%llu wrong, first at %llu)\n", r,
            desc_kind_name((uint8_t)c->kind), dtype_name(c->dt), redop_name(c->op),
            (unsigned long long)c->count, c->mode, c->root, what, (unsigned long long)bad,
            (unsigned long long)first);
    return 1;
}

/* Expected value at element i of this rank's output. */
static int64_t expect(const ccase_t *c, uint32_t r, uint32_t n, uint64_t i)
{
    uint64_t cnt = c->count;

    switch (c->kind) {
    case DESC_ALLREDUCE:
    case DESC_REDUCE: return ref_reduced(c->dt, c->op, n, i);
    case DESC_BROADCAST: return ref_val(c->dt, c->op, c->root, i);
    case DESC_ALLGATHER: return ref_val(c->dt, c->op, (uint32_t)(i / cnt), i % cnt);
    case DESC_REDUCE_SCATTER: return ref_reduced(c->dt, c->op, n, r * cnt + i);
    case DESC_ALLTOALL: return ref_val(c->dt, c->op, (uint32_t)(i / cnt), r * cnt + i % cnt);
    case DESC_SCATTER: return ref_val(c->dt, c->op, c->root, r * cnt + i);
    default: return 0;
    }
}

static uint64_t out_len(const ccase_t *c, uint32_t n)
{
    return c->kind == DESC_ALLGATHER || c->kind == DESC_ALLTOALL ? n * c->count : c->count;
}

static uint64_t in_len(const ccase_t *c, uint32_t n)
{
    int multi =
        c->kind == DESC_REDUCE_SCATTER || c->kind == DESC_ALLTOALL || c->kind == DESC_SCATTER;
    return multi ? n * c->count : c->count;
}

static HcclResult call(const ccase_t *c, HcclComm comm, uint8_t *s, uint8_t *o)
{
    switch (c->kind) {
    case DESC_ALLREDUCE: return HcclAllReduce(s, o, c->count, c->dt, c->op, comm, NULL);
    case DESC_BROADCAST: return HcclBroadcast(o, c->count, c->dt, c->root, comm, NULL);
    case DESC_ALLGATHER: return HcclAllGather(s, o, c->count, c->dt, comm, NULL);
    case DESC_REDUCE_SCATTER: return HcclReduceScatter(s, o, c->count, c->dt, c->op, comm, NULL);
    case DESC_ALLTOALL: return HcclAlltoAll(s, c->count, c->dt, o, c->count, c->dt, comm, NULL);
    case DESC_REDUCE: return HcclReduce(s, o, c->count, c->dt, c->op, c->root, comm, NULL);
    case DESC_SCATTER: return HcclScatter(s, o, c->count, c->dt, c->root, comm, NULL);
    default: return HCCL_E_NOT_SUPPORT;
    }
}

/* Places input and output for the mode; in place as HCCL defines it per collective. */
static void place(const ccase_t *c, const bufs_t *b, uint32_t r, uint8_t **s_p, uint8_t **o_p)
{
    size_t es = dtype_size(c->dt);
    int reg = c->mode == MODE_REG || c->mode == MODE_REG_INPLACE;
    uint8_t *s = c->mode == MODE_ZEROCOPY ? b->zsend : reg ? b->rsend : b->send;
    uint8_t *o = c->mode == MODE_ZEROCOPY ? b->zrecv : reg ? b->rrecv : b->recv;

    if (c->mode == MODE_INPLACE || c->mode == MODE_REG_INPLACE) {
        if (c->kind == DESC_ALLGATHER)
            s = o + r * c->count * es;
        else if (c->kind == DESC_REDUCE_SCATTER)
            o = s + r * c->count * es;
        else
            o = s;
    }
    *s_p = s;
    *o_p = o;
}

static int run_case(HcclComm comm, uint32_t r, uint32_t n, const ccase_t *c, const bufs_t *b)
{
    size_t es = dtype_size(c->dt);
    uint64_t bad = 0, first = 0, olen = out_len(c, n);
    uint8_t *s, *o;
    int is_out = c->kind != DESC_REDUCE || r == c->root;

    place(c, b, r, &s, &o);
    memset(o, 0xEE, olen * es);
    if (c->kind == DESC_BROADCAST) {
        if (r == c->root)
            ref_fill(c->dt, c->op, r, o, 0, c->count);
    } else if (c->kind != DESC_SCATTER || r == c->root) {
        ref_fill(c->dt, c->op, r, s, 0, in_len(c, n));
    }
    HcclResult rc = call(c, comm, s, o);
    if (rc != HCCL_SUCCESS)
        return report(c, r, HcclGetErrorString(rc), 0, 0);
    for (uint64_t i = 0; is_out && i < olen; i++)
        if (!ref_equal(c->dt, o, i, expect(c, r, n, i)) && bad++ == 0)
            first = i;
    return bad ? report(c, r, "wrong result", bad, first) : 0;
}

static int is_reduction(int kind)
{
    return kind == DESC_ALLREDUCE || kind == DESC_REDUCE || kind == DESC_REDUCE_SCATTER;
}

/* A small deterministic generator: every rank draws the same case from the same seed. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int colls_random_case(HcclComm comm, uint32_t r, uint32_t n, uint64_t seed, uint64_t max_count,
                      int at_max)
{
    static bufs_t b;
    static uint64_t have;
    size_t bytes = (size_t)n * max_count * 8;
    static const int kinds[] = {DESC_ALLREDUCE, DESC_BROADCAST, DESC_ALLGATHER, DESC_REDUCE_SCATTER,
                                DESC_ALLTOALL,  DESC_REDUCE,    DESC_SCATTER};
    uint64_t x = mix(seed);
    ccase_t c = {.kind = kinds[x % 7]};

    if (have < bytes) {
        HcclMemFree(b.zsend);
        HcclMemFree(b.zrecv);
        free(b.send);
        free(b.recv);
        b = (bufs_t){.send = malloc(bytes), .recv = malloc(bytes)};
        if (b.send == NULL || b.recv == NULL || HcclMemAlloc((void **)&b.zsend, bytes) != 0 ||
            HcclMemAlloc((void **)&b.zrecv, bytes) != 0)
            return 1;
        have = bytes;
    }
    c.dt = (int)((x >> 8) % HCCL_DATA_TYPE_RESERVED);
    /* Products of more than a few ranks leave the small types' exact range. */
    c.op = is_reduction(c.kind) ? (int)((x >> 16) % HCCL_REDUCE_RESERVED) : 0;
    if (c.op == HCCL_REDUCE_PROD && n > 4)
        c.op = HCCL_REDUCE_MAX;
    c.mode = (int)((x >> 24) % MODE_COUNT);
    if (c.mode == MODE_INPLACE &&
        (c.kind == DESC_ALLTOALL || c.kind == DESC_SCATTER || c.kind == DESC_BROADCAST))
        c.mode = MODE_OOP;
    /* Mostly small, now and then up to max_count. */
    c.count = at_max ? max_count : (x >> 32) % ((x >> 28) % 8 == 0 ? max_count + 1 : 1025);
    c.root = (uint32_t)((x >> 40) % n);
    return run_case(comm, r, n, &c, &b);
}

/* The quick matrix (several daemons over TCP): a few dtypes, ops and counts. */
static const int quick_dtypes[] = {HCCL_DATA_TYPE_INT8, HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_FP32,
                                   HCCL_DATA_TYPE_INT64};

static int case_wanted(int quick, int dt, int op, size_t k)
{
    int dt_ok = 0;

    if (!quick)
        return 1;
    for (size_t i = 0; i < sizeof(quick_dtypes) / sizeof(quick_dtypes[0]); i++)
        dt_ok |= quick_dtypes[i] == dt;
    /* counts 0, 1, 3, 1000, 65537 (not 1M+3); ops SUM and MAX */
    return dt_ok && (op == HCCL_REDUCE_SUM || op == HCCL_REDUCE_MAX) && k + 1 < NCOUNTS;
}

/* Registered buffers of `bytes` each that start mid-page, so that their first and last pages
 * stay the caller's; 0, or -1 if registering failed. */
static int reg_bufs(HcclComm comm, bufs_t *b, size_t bytes)
{
    for (int i = 0; i < 2; i++) {
        b->rmem[i] = malloc(bytes + 4096);
        if (b->rmem[i] == NULL)
            return -1;
    }
    b->rsend = b->rmem[0] + 40;
    b->rrecv = b->rmem[1] + 40;
    if (HcclCommRegister(comm, b->rsend, bytes, &b->reg[0]) != HCCL_SUCCESS ||
        HcclCommRegister(comm, b->rrecv, bytes, &b->reg[1]) != HCCL_SUCCESS)
        return -1;
    return 0;
}

int colls_all_cases(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const colls_arg_t *a = arg;
    int kind = a->kind, failed = 0;
    size_t bytes = n * MAXCOUNT * 8;
    bufs_t b = {.send = malloc(bytes), .recv = malloc(bytes)};

    /* The registered cases' largest count: the quick matrix stops below 1M+3. */
    size_t reg_bytes = n * (a->quick ? counts[NCOUNTS - 2] : MAXCOUNT) * 8;

    if (b.send == NULL || b.recv == NULL || HcclMemAlloc((void **)&b.zsend, bytes) != 0 ||
        HcclMemAlloc((void **)&b.zrecv, bytes) != 0 || reg_bufs(comm, &b, reg_bytes) != 0)
        return 10;
    for (int dt = 0; dt < HCCL_DATA_TYPE_RESERVED; dt++)
        for (int op = 0; op < (is_reduction(kind) ? HCCL_REDUCE_RESERVED : 1); op++)
            for (size_t k = 0; k < NCOUNTS; k++)
                for (int mode = 0; mode < MODE_ALL; mode++) {
                    int inplace = mode == MODE_INPLACE || mode == MODE_REG_INPLACE;
                    if ((inplace && (kind == DESC_ALLTOALL || kind == DESC_SCATTER ||
                                     kind == DESC_BROADCAST)) ||
                        (mode >= MODE_REG && (counts[k] < 1000 || !case_wanted(1, dt, op, 0))) ||
                        !case_wanted(a->quick, dt, op, k))
                        continue;
                    /* The root moves around so that every rank serves as one. */
                    ccase_t c = {.kind = kind,
                                 .dt = dt,
                                 .op = op,
                                 .mode = mode,
                                 .count = counts[k],
                                 .root = (uint32_t)(dt + k) % n};
                    failed += run_case(comm, r, n, &c, &b);
                    if (failed > 5)
                        return 1;
                }
    if (HcclCommDeregister(comm, b.reg[0]) != HCCL_SUCCESS ||
        HcclCommDeregister(comm, b.reg[1]) != HCCL_SUCCESS)
        failed++;
    HcclMemFree(b.zsend);
    HcclMemFree(b.zrecv);
    free(b.send);
    free(b.recv);
    free(b.rmem[0]);
    free(b.rmem[1]);
    return failed ? 1 : 0;
}

/* Both level-0 paths: ranks cooperating among themselves, and the daemon's executor
 * (HCCLD_TEST_QUICK=1: the quick matrix); then the cooperative path once more with every output
 * written by streaming stores (HCCLD_STREAM_MIN=1), on the quick matrix. */
static void run_kind(int kind)
{
    static const char *const modes[] = {"coop", "daemon", "coop"};
    static const char *const stream_min[] = {NULL, NULL, "1"};

    for (int m = 0; m < 3; m++)
        for (uint32_t n = m == 2 ? 2 : 1; n <= 4; n++) {
            setenv("HCCL_L0_MODE", modes[m], 1);
            if (stream_min[m] != NULL)
                setenv("HCCLD_STREAM_MIN", stream_min[m], 1);
            else
                unsetenv("HCCLD_STREAM_MIN");
            colls_arg_t a = {.kind = kind, .quick = harness_quick() || stream_min[m] != NULL};
            int failed = harness_run_ranks(n, colls_all_cases, &a, 240);
            ck_assert_msg(failed == 0, "%s with %u ranks (%s%s): %d ranks failed",
                          desc_kind_name(kind), n, modes[m],
                          stream_min[m] != NULL ? ", streaming stores" : "", failed);
        }
    unsetenv("HCCLD_STREAM_MIN");
}

START_TEST(test_allreduce)
{
    run_kind(DESC_ALLREDUCE);
}
END_TEST
START_TEST(test_broadcast)
{
    run_kind(DESC_BROADCAST);
}
END_TEST
START_TEST(test_allgather)
{
    run_kind(DESC_ALLGATHER);
}
END_TEST
START_TEST(test_reducescatter)
{
    run_kind(DESC_REDUCE_SCATTER);
}
END_TEST
START_TEST(test_alltoall)
{
    run_kind(DESC_ALLTOALL);
}
END_TEST
START_TEST(test_reduce)
{
    run_kind(DESC_REDUCE);
}
END_TEST
START_TEST(test_scatter)
{
    run_kind(DESC_SCATTER);
}
END_TEST

Suite *colls_suite(void)
{
    Suite *s = suite_create("collectives");
    TCase *tc = tcase_create("matrix");

    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, test_allreduce);
    tcase_add_test(tc, test_broadcast);
    tcase_add_test(tc, test_allgather);
    tcase_add_test(tc, test_reducescatter);
    tcase_add_test(tc, test_alltoall);
    tcase_add_test(tc, test_reduce);
    tcase_add_test(tc, test_scatter);
    suite_add_tcase(s, tc);
    return s;
}
