#include "exec/exec.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "futex.h"
#include "log.h"
#include "thread.h"

#define EXEC_SPLIT_BYTES (256u << 10) /* below this one thread is faster than a hand-off */
#define EXEC_SPIN_NS 30000ull         /* workers spin this long for the next op, then sleep */

typedef struct exec_worker {
    exec_t *ex;
    unsigned id;
    pthread_t thread;
} exec_worker_t;

struct exec {
    unsigned nworkers;
    unsigned nparts; /* parts of the current op */
    const l0_op_t *op;
    uint32_t gen;     /* bumped for each op; workers wait on it */
    uint32_t pending; /* parts not yet finished; the caller waits on it */
    int stop;
    exec_worker_t *workers;
};

static void worker_wait_gen(exec_t *ex, uint32_t seen)
{
    uint64_t until = now_ns() + EXEC_SPIN_NS;

    while (__atomic_load_n(&ex->gen, __ATOMIC_ACQUIRE) == seen) {
        if (now_ns() < until)
            cpu_relax();
        else
            futex_wait(&ex->gen, seen, -1);
    }
}

static void *worker_main(void *arg)
{
    exec_worker_t *w = arg;
    exec_t *ex = w->ex;
    uint32_t seen = 0;

    for (;;) {
        worker_wait_gen(ex, seen);
        seen = __atomic_load_n(&ex->gen, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&ex->stop, __ATOMIC_ACQUIRE))
            return NULL;
        if (w->id < ex->nparts)
            l0_run_part(ex->op, w->id, ex->nparts);
        if (__atomic_sub_fetch(&ex->pending, 1, __ATOMIC_ACQ_REL) == 0)
            futex_wake(&ex->pending, 1);
    }
}

exec_t *exec_create(unsigned nworkers)
{
    exec_t *ex = calloc(1, sizeof(*ex));

    if (ex == NULL)
        return NULL;
    if (nworkers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nworkers = n > 0 ? (unsigned)n : 1;
    }
    ex->nworkers = nworkers;
    ex->workers = calloc(nworkers, sizeof(*ex->workers));
    if (ex->workers == NULL) {
        free(ex);
        return NULL;
    }
    for (unsigned i = 1; i < nworkers; i++) {
        ex->workers[i].ex = ex;
        ex->workers[i].id = i;
        if (thread_start(&ex->workers[i].thread, NULL, worker_main, &ex->workers[i]) != 0) {
            ERR("COLL", "pthread_create() for worker %u failed; running with %u", i, i);
            ex->nworkers = i;
            break;
        }
    }
    return ex;
}

void exec_destroy(exec_t *ex)
{
    if (ex == NULL)
        return;
    __atomic_store_n(&ex->stop, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&ex->gen, 1, __ATOMIC_ACQ_REL);
    futex_wake(&ex->gen, (int)ex->nworkers);
    for (unsigned i = 1; i < ex->nworkers; i++)
        pthread_join(ex->workers[i].thread, NULL);
    free(ex->workers);
    free(ex);
}

unsigned exec_workers(const exec_t *ex)
{
    return ex->nworkers;
}

void exec_run(exec_t *ex, const l0_op_t *op)
{
    uint64_t bytes = l0_bytes(op);
    unsigned nparts = ex->nworkers;

    if (nparts == 1 || bytes < EXEC_SPLIT_BYTES) {
        l0_run_part(op, 0, 1);
        return;
    }
    if (bytes / EXEC_SPLIT_BYTES < nparts)
        nparts = (unsigned)(bytes / EXEC_SPLIT_BYTES);
    ex->op = op;
    ex->nparts = nparts;
    /* Every worker acknowledges every generation, so that none misses the next one. */
    __atomic_store_n(&ex->pending, ex->nworkers - 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&ex->gen, 1, __ATOMIC_ACQ_REL);
    futex_wake(&ex->gen, (int)ex->nworkers);
    l0_run_part(op, 0, nparts);
    uint64_t until = now_ns() + EXEC_SPIN_NS;
    for (;;) {
        uint32_t p = __atomic_load_n(&ex->pending, __ATOMIC_ACQUIRE);
        if (p == 0)
            break;
        if (now_ns() < until)
            cpu_relax();
        else
            futex_wait(&ex->pending, p, -1);
    }
}
