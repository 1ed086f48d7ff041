/*
 * reduce_n's dispatch: the portable kernels (below, from reduce_impl.h), the choice between
 * them and the AVX2 / AVX-512 ones (reduce_avx2.c, reduce_avx512.c), and the selection state.
 */
#include "reduce.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dtype.h"

/* 16-byte vectors: SSE2 on x86-64, whatever the target has (or scalar code) elsewhere. */
#define REDUCE_VB 16
#define REDUCE_SFX(name) name##_generic
#include "reduce_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define REDUCE_X86 1
#endif

struct reduce_isa_desc {
    const char *name;
    const reduce_kernel_fn (*table)[HCCL_REDUCE_RESERVED];
    const reduce_kernel_fn (*table_nt)[HCCL_REDUCE_RESERVED];
    unsigned vb; /* vector bytes: where the streaming kernels want dst aligned */
    int (*supported)(void);
};

static int cpu_has_generic(void)
{
    return 1;
}

#ifdef REDUCE_X86
/* CPUID leaf 1 directly: not every compiler's __builtin_cpu_supports knows "f16c". */
static int cpu_has_f16c(void)
{
    unsigned eax, ebx, ecx, edx;

    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

/* What reduce_avx2.c is compiled for. __builtin_cpu_supports also checks that the OS saves the
 * YMM / ZMM registers (XGETBV), so a "yes" means the instructions really work. */
static int cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

static int cpu_has_avx512(void)
{
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq");
}
#endif

/* From worst to best, so the best supported one is the last supported one. */
static const struct reduce_isa_desc isas[] = {
    {"generic", reduce_table_generic, reduce_table_nt_generic, 16, cpu_has_generic},
#ifdef REDUCE_X86
    {"avx2", reduce_table_avx2, reduce_table_nt_avx2, 32, cpu_has_avx2},
    {"avx512", reduce_table_avx512, reduce_table_nt_avx512, 64, cpu_has_avx512},
#endif
};
#define NISAS (sizeof(isas) / sizeof(isas[0]))

/* Read and written atomically: threads may reduce while another one switches kernels. */
static const struct reduce_isa_desc *selected;
static pthread_once_t select_once = PTHREAD_ONCE_INIT;

static const struct reduce_isa_desc *isa_by_name(const char *name)
{
    for (size_t i = 0; i < NISAS; i++)
        if (strcasecmp(name, isas[i].name) == 0)
            return &isas[i];
    return NULL;
}

static const struct reduce_isa_desc *isa_best(void)
{
    for (size_t i = NISAS; i-- > 1;)
        if (isas[i].supported())
            return &isas[i];
    return &isas[0];
}

static void isa_set(const struct reduce_isa_desc *d)
{
    __atomic_store_n(&selected, d, __ATOMIC_RELEASE);
}

/* The default choice: $HCCLD_SIMD if it names a usable ISA, else the best one. */
static int select_default(void)
{
    const char *env = getenv("HCCLD_SIMD");

    if (env != NULL && env[0] != '\0' && strcasecmp(env, "auto") != 0) {
        const struct reduce_isa_desc *d = isa_by_name(env);
        if (d != NULL && d->supported()) {
            isa_set(d);
            return 0;
        }
        isa_set(isa_best());
        return -1;
    }
    isa_set(isa_best());
    return 0;
}

static void select_default_once(void)
{
    (void)select_default();
}

int reduce_select(const char *isa)
{
    /* Make the lazy default happen first, so that it can never override this choice. */
    pthread_once(&select_once, select_default_once);
    if (isa == NULL)
        return select_default();

    const struct reduce_isa_desc *d = isa_by_name(isa);
    if (d == NULL || !d->supported())
        return -1;
    isa_set(d);
    return 0;
}

static const struct reduce_isa_desc *isa_current(void)
{
    const struct reduce_isa_desc *d = __atomic_load_n(&selected, __ATOMIC_ACQUIRE);

    if (__builtin_expect(d == NULL, 0)) {
        pthread_once(&select_once, select_default_once);
        d = __atomic_load_n(&selected, __ATOMIC_ACQUIRE);
    }
    return d;
}

const char *reduce_isa(void)
{
    return isa_current()->name;
}

void reduce_n(HcclDataType dt, HcclReduceOp op, void *dst, const void *const *srcs, unsigned nsrc,
              size_t count)
{
    if (!dtype_valid((int)dt) || !redop_valid((int)op) || nsrc == 0 || count == 0)
        return;
    if (nsrc == 1) {
        /* A copy, bit for bit; memcpy must not get the same buffer twice. */
        if (dst != srcs[0])
            memcpy(dst, srcs[0], count * dtype_size((int)dt));
        return;
    }
    isa_current()->table[dt][op](dst, srcs, nsrc, count);
}

void reduce_n_stream(HcclDataType dt, HcclReduceOp op, void *dst, const void *const *srcs,
                     unsigned nsrc, size_t count)
{
    const struct reduce_isa_desc *isa = isa_current();
    const void *rest[REDUCE_STREAM_MAX_SRCS];
    size_t es, head;

    if (!dtype_valid((int)dt) || !redop_valid((int)op) || nsrc == 0 || count == 0)
        return;
    es = dtype_size((int)dt);
    head = (isa->vb - (uintptr_t)dst % isa->vb) % isa->vb;
    if (nsrc > REDUCE_STREAM_MAX_SRCS || head % es != 0 || (nsrc == 1 && dst == srcs[0])) {
        reduce_n(dt, op, dst, srcs, nsrc, count);
        return;
    }
    /* The elements before dst's first aligned vector go the usual way. */
    head /= es;
    if (head >= count) {
        reduce_n(dt, op, dst, srcs, nsrc, count);
        return;
    }
    if (head > 0)
        reduce_n(dt, op, dst, srcs, nsrc, head);
    for (unsigned k = 0; k < nsrc; k++)
        rest[k] = (const uint8_t *)srcs[k] + head * es;
    if (nsrc == 1) /* a copy: bytes streamed whatever the type, bit for bit */
        isa->table_nt[HCCL_DATA_TYPE_UINT8][HCCL_REDUCE_SUM]((uint8_t *)dst + head * es, rest, 1,
                                                             (count - head) * es);
    else
        isa->table_nt[dt][op]((uint8_t *)dst + head * es, rest, nsrc, count - head);
#ifdef REDUCE_X86
    /* Streaming stores are weakly ordered: they must reach memory before whatever the caller
     * publishes next (a release store does not order them). */
    _mm_sfence();
#endif
}
