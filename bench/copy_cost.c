/*
 * What the copies of a plain-buffer allreduce cost on this machine (issue 23, goal 1): the
 * figures behind bench/RESULTS.md's "Why plain buffers at 1-4 MiB stay at MPI's speed".
 *
 *   staging   one thread copies SIZE bytes into a shared buffer that a thread on the other core
 *             then reads, again and again (what a staged cooperative piece does), against the same
 *             copy into a buffer that the other core never reads;
 *   cma       process_vm_readv of SIZE bytes from another process (what MPI's single copy does)
 *             against memcpy of the same bytes in one process.
 *
 *   copy_cost [SIZE_KIB]      (default 1024; built and run by bench/copy_cost.sh)
 *
 * Prints microseconds per copy, the median of ROUNDS rounds of ITERS copies each.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"

#define ITERS 200
#define ROUNDS 5

static void pin(int cpu)
{
    cpu_set_t s;

    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

/* The staging case (take_turns): a writer copies src into shared, a reader then copies shared
 * out (or a buffer of its own, `private_read`), taking turns. */
typedef struct {
    size_t n;
    char *src, *shared, *other, *dst;
    int private_read;
    atomic_int turn;
    double write_us;
} stage_t;

/* One side of the staging case: side 0 copies src into shared and is timed, side 1 then copies
 * shared (or its own buffer) out; each waits for its turn. */
typedef struct {
    stage_t *s;
    int me;
} side_t;

static void *take_turns(void *arg)
{
    const side_t *x = arg;
    stage_t *s = x->s;
    char *to = x->me ? s->dst : s->shared;
    const char *from = x->me ? (s->private_read ? s->other : s->shared) : s->src;

    pin(x->me);
    for (int i = 0; i < ITERS; i++) {
        while (atomic_load(&s->turn) != x->me)
            sched_yield();
        double t = now_us();
        memcpy(to, from, s->n);
        if (x->me == 0)
            s->write_us += now_us() - t;
        atomic_store(&s->turn, !x->me);
    }
    return NULL;
}

static double staging_us(size_t n, int private_read)
{
    stage_t s = {.n = n, .private_read = private_read};
    side_t w = {&s, 0}, r = {&s, 1};
    pthread_t a, b;

    s.src = malloc(n);
    s.shared = malloc(n);
    s.other = malloc(n);
    s.dst = malloc(n);
    if (!s.src || !s.shared || !s.other || !s.dst) {
        fprintf(stderr, "copy_cost: out of memory\n");
        exit(1);
    }
    memset(s.src, 1, n);
    memset(s.shared, 2, n);
    memset(s.other, 3, n);
    memset(s.dst, 4, n);
    pthread_create(&a, NULL, take_turns, &w);
    pthread_create(&b, NULL, take_turns, &r);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    free(s.src);
    free(s.shared);
    free(s.other);
    free(s.dst);
    return s.write_us / ITERS;
}

/* process_vm_readv from a child that holds the source, against memcpy in this process. */
static void cma_us(size_t n, double *cma, double *plain)
{
    char *src = malloc(n), *dst = malloc(n);
    pid_t child;

    if (src == NULL || dst == NULL) {
        fprintf(stderr, "copy_cost: out of memory\n");
        exit(1);
    }
    memset(src, 1, n);
    memset(dst, 0, n);
    if ((child = fork()) == 0) {
        memset(src, 5, n); /* the child's own pages, not the parent's copy-on-write ones */
        pause();
        _exit(0);
    }
    usleep(100000);
    double t = now_us();
    for (int i = 0; i < ITERS; i++) {
        struct iovec l = {dst, n}, r = {src, n};
        if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)n) {
            perror("copy_cost: process_vm_readv");
            kill(child, SIGKILL);
            exit(1);
        }
    }
    *cma = (now_us() - t) / ITERS;
    t = now_us();
    for (int i = 0; i < ITERS; i++) {
        memcpy(dst, src, n);
        __asm__ volatile("" ::"r"(dst) : "memory");
    }
    *plain = (now_us() - t) / ITERS;
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    free(src);
    free(dst);
}

int main(int argc, char **argv)
{
    size_t n = (argc > 1 ? strtoull(argv[1], NULL, 10) : 1024) << 10;
    double shared[ROUNDS], private[ROUNDS], cma[ROUNDS], plain[ROUNDS];

    if (n == 0) {
        fprintf(stderr, "usage: copy_cost [SIZE_KIB]\n");
        return 2;
    }
    for (int r = 0; r < ROUNDS; r++) {
        shared[r] = staging_us(n, 0);
        private[r] = staging_us(n, 1);
        cma_us(n, &cma[r], &plain[r]);
    }
    printf("%zu KiB, us per copy, median of %d rounds of %d:\n", n >> 10, ROUNDS, ITERS);
    printf("  memcpy into a buffer the other core reads after each copy  %8.1f\n",
           sort_median(shared, ROUNDS));
    printf("  memcpy into a buffer the other core never reads            %8.1f\n",
           sort_median(private, ROUNDS));
    printf("  process_vm_readv from another process                      %8.1f\n",
           sort_median(cma, ROUNDS));
    printf("  memcpy in one process                                      %8.1f\n",
           sort_median(plain, ROUNDS));
    return 0;
}
