/* HcclCommRegister / HcclCommDeregister: exact results for bad input, content kept through
 * both, collectives on registered buffers skip staging and stay right, and what a user gets
 * wrong (freeing first, a full arena) is logged and still computed right. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../libclient/client.h"
#include "../../libclient/reg.h"
#include "harness.h"
#include "suites.h"

#define FP32 HCCL_DATA_TYPE_FP32
#define SUM HCCL_REDUCE_SUM
#define EXPECT(call, want)                                                                         \
    do {                                                                                           \
        HcclResult got_ = (call);                                                                  \
        if (got_ != (want)) {                                                                      \
            fprintf(stderr, "%s:%d: %s: got %d, want %d\n", __FILE__, __LINE__, #call, got_,       \
                    (int)(want));                                                                  \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                             \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

static size_t page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* The permissions of the mapping that holds p ("rw-p", "rw-s"), or "" if none does. */
static void perms_at(const void *p, char out[8])
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uintptr_t s, e, q = (uintptr_t)p;

    out[0] = '\0';
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%lx-%lx %7s", &s, &e, out) == 3 && s <= q && q < e)
            break;
        else
            out[0] = '\0';
    if (f != NULL)
        fclose(f);
}

static int perms_are(const void *p, const char *want)
{
    char got[8];

    perms_at(p, got);
    if (strcmp(got, want) == 0)
        return 1;
    fprintf(stderr, "mapping at %p is %s, want %s\n", p, got[0] ? got : "(none)", want);
    return 0;
}

static uint64_t arena_off(HcclComm comm, const void *p, uint64_t len)
{
    uint64_t off;

    return hc_mem_off(((hc_comm_t *)comm)->c, p, len, &off) ? off : UINT64_MAX;
}

static void fill(float *a, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (float)((i * 7 + seed * 13) % 1000);
}

static int same_fill(const float *a, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != (float)((i * 7 + seed * 13) % 1000)) {
            fprintf(stderr, "element %zu is %g, want %g\n", i, a[i],
                    (float)((i * 7 + seed * 13) % 1000));
            return 0;
        }
    return 1;
}

/* Sum over ranks 0..n-1 of fill(seed = rank) at i. */
static float want_sum(size_t i, uint32_t n)
{
    float s = 0;

    for (uint32_t r = 0; r < n; r++)
        s += (float)((i * 7 + r * 13) % 1000);
    return s;
}

static int allreduce_right(HcclComm comm, float *send, float *recv, size_t count, uint32_t r,
                           uint32_t n)
{
    int fails = 0;

    fill(send, count, r);
    EXPECT(HcclAllReduce(send, recv, count, FP32, SUM, comm, NULL), HCCL_SUCCESS);
    for (size_t i = 0; i < count && fails == 0; i++)
        if (recv[i] != want_sum(i, n)) {
            fprintf(stderr, "rank %u: element %zu of %zu is %g, want %g\n", r, i, count, recv[i],
                    want_sum(i, n));
            fails++;
        }
    return fails;
}

static int bad_input(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    size_t ps = page(), len = 6 * ps;
    uint8_t *a = malloc(len + ps), *file_map, *ro;
    void *h = NULL, *h2 = NULL, *h3 = NULL;
    char path[] = "/tmp/hccld-reg-XXXXXX";
    int fails = 0, fd;

    (void)r, (void)n, (void)arg;
    memset(a, 0x5a, len + ps);
    EXPECT(HcclCommRegister(NULL, a, len, &h), HCCL_E_PTR);
    EXPECT(HcclCommRegister(comm, NULL, len, &h), HCCL_E_PTR);
    EXPECT(HcclCommRegister(comm, a, len, NULL), HCCL_E_PTR);
    EXPECT(HcclCommRegister(comm, a, 0, &h), HCCL_E_PARA);
    EXPECT(HcclCommRegister(comm, a, UINT64_MAX, &h), HCCL_E_PARA);
    EXPECT(HcclCommDeregister(comm, NULL), HCCL_E_PTR);
    EXPECT(HcclCommDeregister(NULL, a), HCCL_E_PTR);
    EXPECT(HcclCommDeregister(comm, a), HCCL_E_PARA); /* not a handle: never dereferenced */

    /* Only private anonymous memory: a file's shared pages and read-only pages are refused,
     * and left as they were. */
    fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)(4 * ps)) == 0);
    unlink(path);
    file_map = mmap(NULL, 4 * ps, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(file_map != MAP_FAILED);
    memset(file_map, 7, 4 * ps);
    EXPECT(HcclCommRegister(comm, file_map, 4 * ps, &h), HCCL_E_PARA);
    CHECK(file_map[ps] == 7 && perms_are(file_map + ps, "rw-s"));
    munmap(file_map, 4 * ps);
    close(fd);
    ro = mmap(NULL, 4 * ps, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(ro != MAP_FAILED);
    EXPECT(HcclCommRegister(comm, ro, 4 * ps, &h), HCCL_E_PARA);
    CHECK(perms_are(ro + ps, "r--p"));
    munmap(ro, 4 * ps);

    /* The same pages twice: one registration, counted; pages shared with another: refused. */
    EXPECT(HcclCommRegister(comm, a, len, &h), HCCL_SUCCESS);
    CHECK(perms_are(a + ps, "rw-s"));
    EXPECT(HcclCommRegister(comm, a, len, &h2), HCCL_SUCCESS);
    CHECK(h2 == h);
    EXPECT(HcclCommRegister(comm, a + 2 * ps, 2 * ps, &h3), HCCL_E_PARA);
    EXPECT(HcclCommRegister(comm, a + len - 2 * ps, 2 * ps, &h3), HCCL_E_PARA);
    EXPECT(HcclCommDeregister(comm, h), HCCL_SUCCESS);
    CHECK(perms_are(a + ps, "rw-s")); /* one reference left */
    EXPECT(HcclCommDeregister(comm, h2), HCCL_SUCCESS);
    CHECK(perms_are(a + ps, "rw-p"));
    EXPECT(HcclCommDeregister(comm, h), HCCL_E_PARA); /* gone */
    for (size_t i = 0; i < len + ps; i++)
        if (a[i] != 0x5a) {
            fprintf(stderr, "byte %zu changed to %#x\n", i, a[i]);
            fails++;
            break;
        }

    /* Less than a whole page, or memory from HcclMemAlloc: nothing to move, still a handle. */
    EXPECT(HcclCommRegister(comm, a + 10, 100, &h), HCCL_SUCCESS);
    CHECK(perms_are(a + 10, "rw-p"));
    EXPECT(HcclCommDeregister(comm, h), HCCL_SUCCESS);
    void *m = NULL;
    EXPECT(HcclMemAlloc(&m, len), HCCL_SUCCESS);
    EXPECT(HcclCommRegister(comm, m, len, &h), HCCL_SUCCESS);
    EXPECT(HcclCommDeregister(comm, h), HCCL_SUCCESS);
    EXPECT(HcclMemFree(m), HCCL_SUCCESS);
    free(a);
    return fails;
}

START_TEST(test_bad_input)
{
    ck_assert_int_eq(harness_run_ranks(2, bad_input, NULL, 60), 0);
}
END_TEST

/*
 * Buffers that start and end mid-page (as malloc gives them), registered: the interior pages
 * are arena memory (hc_mem_off finds them, the partial end pages not), content is the same
 * before and after, in place and out of place allreduce and allgather agree with the sums, and
 * the pages are private again after HcclCommDeregister, or after the comm that held them is
 * destroyed. On both level-0 paths: the ranks' own (coop) and the daemon's.
 */
static int registered_ops(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    size_t count = (size_t)(uintptr_t)arg, bytes = count * sizeof(float), ps = page();
    uint8_t *raw_s = malloc(bytes + 64), *raw_r = malloc(bytes * n + 64);
    float *s = (float *)(raw_s + 40), *rv = (float *)(raw_r + 40);
    void *hs = NULL, *hr = NULL;
    HcclComm sub = NULL;
    int fails = 0;
    uint8_t *inner = (uint8_t *)(((uintptr_t)s + ps - 1) / ps * ps);

    fill(s, count, r + 100);
    EXPECT(HcclCommRegister(comm, s, bytes, &hs), HCCL_SUCCESS);
    EXPECT(HcclCommRegister(comm, rv, bytes * n, &hr), HCCL_SUCCESS);
    CHECK(same_fill(s, count, r + 100));
    CHECK(perms_are(inner, "rw-s"));
    CHECK(arena_off(comm, inner, ps) != UINT64_MAX);
    CHECK(arena_off(comm, s, bytes) == UINT64_MAX); /* its first page is partial */

    for (int round = 0; round < 3; round++) {
        fails += allreduce_right(comm, s, rv, count, r, n);
        fails += allreduce_right(comm, rv, rv, count, r, n);
    }
    fill(s, count, r);
    EXPECT(HcclAllGather(s, rv, count, FP32, comm, NULL), HCCL_SUCCESS);
    for (uint32_t k = 0; k < n && fails == 0; k++)
        CHECK(same_fill(rv + k * count, count, k));

    fill(s, count, r + 200);
    EXPECT(HcclCommDeregister(comm, hs), HCCL_SUCCESS);
    CHECK(perms_are(inner, "rw-p"));
    CHECK(arena_off(comm, inner, ps) == UINT64_MAX);
    CHECK(same_fill(s, count, r + 200));
    fails += allreduce_right(comm, s, rv, count, r, n); /* staged again, receive still not */

    /* A comm destroyed with buffers still registered gives their pages back. */
    EXPECT(HcclCommSplit(comm, 0, r, &sub), HCCL_SUCCESS);
    EXPECT(HcclCommRegister(sub, s, bytes, &hs), HCCL_SUCCESS);
    fails += allreduce_right(sub, s, s, count, r, n);
    CHECK(perms_are(inner, "rw-s"));
    EXPECT(HcclCommDestroy(sub), HCCL_SUCCESS);
    CHECK(perms_are(inner, "rw-p"));
    CHECK(arena_off(comm, inner, ps) == UINT64_MAX);
    for (size_t i = 0; i < count && fails == 0; i++)
        CHECK(s[i] == want_sum(i, n));

    EXPECT(HcclCommDeregister(comm, hr), HCCL_SUCCESS);
    free(raw_s);
    free(raw_r);
    return fails;
}

START_TEST(test_registered_ops)
{
    /* 1 MiB and 3 pieces' worth (several pieces, a registered middle and staged ends). */
    static const uintptr_t counts[] = {262144 + 17, 393216 * 2 + 5};
    static const char *const modes[] = {"coop", "daemon"};

    for (size_t m = 0; m < 2; m++) {
        setenv("HCCL_L0_MODE", modes[m], 1);
        for (uint32_t n = 1; n <= 3; n++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                ck_assert_msg(harness_run_ranks(n, registered_ops, (void *)counts[k], 120) == 0,
                              "%s, %u ranks, count %zu", modes[m], n, (size_t)counts[k]);
    }
}
END_TEST

/* An arena too small for the buffer: HCCL_E_MEMORY, the buffer untouched and still usable. */
static int arena_full(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    size_t count = (24u << 20) / sizeof(float);
    float *s = malloc(count * sizeof(float)), *rv = malloc(count * sizeof(float));
    void *h = NULL;
    int fails = 0;

    (void)arg;
    fill(s, count, r);
    EXPECT(HcclCommRegister(comm, s, count * sizeof(float), &h), HCCL_E_MEMORY);
    CHECK(same_fill(s, count, r));
    CHECK(perms_are(s + count / 2, "rw-p"));
    fails += allreduce_right(comm, s, rv, count, r, n);
    free(s);
    free(rv);
    return fails;
}

START_TEST(test_arena_full)
{
    setenv("HCCL_BUFFSIZE", "16", 1);
    ck_assert_int_eq(harness_run_ranks(2, arena_full, NULL, 120), 0);
}
END_TEST

/*
 * The user's mistake: memory unmapped and mapped again at the same place while registered. The
 * op sees the new bytes (staged, with a WARN), and HcclCommDeregister says what happened and
 * returns HCCL_SUCCESS.
 */
static int freed_first(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    size_t ps = page(), bytes = 64 * ps, count = bytes / sizeof(float);
    float *s = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *rv = malloc(bytes);
    void *h = NULL;
    int fails = 0;

    (void)arg;
    CHECK(s != MAP_FAILED);
    fill(s, count, r + 50);
    EXPECT(HcclCommRegister(comm, s, bytes, &h), HCCL_SUCCESS);
    CHECK(arena_off(comm, s, bytes) != UINT64_MAX);
    munmap(s, bytes);
    CHECK(mmap(s, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
          s);
    fails += allreduce_right(comm, s, rv, count, r, n);
    CHECK(arena_off(comm, s, bytes) == UINT64_MAX);
    EXPECT(HcclCommDeregister(comm, h), HCCL_SUCCESS);
    CHECK(perms_are(s, "rw-p"));
    fails += allreduce_right(comm, s, rv, count, r, n);
    munmap(s, bytes);
    free(rv);
    return fails;
}

START_TEST(test_freed_first)
{
    char log[256];
    int saved;

    setenv("HCCL_DEBUG", "WARN", 1);
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(harness_run_ranks(2, freed_first, NULL, 60), 0);
    ck_assert(harness_stderr_back_has(saved, log, "no longer holds the registered pages"));
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(harness_run_ranks(2, freed_first, NULL, 60), 0);
    ck_assert(harness_stderr_back_has(saved, log, "was unmapped before it was deregistered"));
}
END_TEST

Suite *reg_suite(void)
{
    Suite *s = suite_create("reg");
    TCase *tc = tcase_create("reg");

    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_registered_ops);
    tcase_add_test(tc, test_arena_full);
    tcase_add_test(tc, test_freed_first);
    suite_add_tcase(s, tc);
    return s;
}
