/* Futex wait/wake on words in memory shared between processes (never FUTEX_PRIVATE). */
#ifndef HCCLD_COMMON_FUTEX_H
#define HCCLD_COMMON_FUTEX_H

#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *addr == val, at most timeout_ns (< 0: forever). Spurious returns are fine. */
static inline void futex_wait(uint32_t *addr, uint32_t val, int64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;

    if (timeout_ns >= 0) {
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        tsp = &ts;
    }
    syscall(SYS_futex, addr, FUTEX_WAIT, val, tsp, NULL, 0);
}

static inline void futex_wake(uint32_t *addr, int n)
{
    syscall(SYS_futex, addr, FUTEX_WAKE, n, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* HCCLD_COMMON_FUTEX_H */
