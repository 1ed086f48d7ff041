/*
 * What the stand-alone bench programs (copy_cost.c, zc_ceiling.c) share: a clock and sorting of
 * their per-round figures.
 */
#ifndef HCCLD_BENCH_TIME_H
#define HCCLD_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

static inline double now_us(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Sorts v and returns its median (the upper one of an even count). */
static inline double sort_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

#endif
