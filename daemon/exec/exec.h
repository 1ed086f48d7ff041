/*
 * The executor: runs a matched operation on the daemon's worker threads. The calling thread
 * is worker 0; the others sleep on a futex when idle, so an idle daemon uses no CPU.
 */
#ifndef HCCLD_EXEC_EXEC_H
#define HCCLD_EXEC_EXEC_H

#include "l0.h"

typedef struct exec exec_t;

/* nworkers counts the caller; 0 picks the number of online CPUs. */
exec_t *exec_create(unsigned nworkers);
void exec_destroy(exec_t *ex);
unsigned exec_workers(const exec_t *ex);
/* Runs op to completion, split across the workers when it is large enough to pay off. */
void exec_run(exec_t *ex, const l0_op_t *op);

#endif
