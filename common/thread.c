/* Helper threads without signals (thread.h). */
#include "thread.h"

#include <stddef.h>

/* The signals a thread raises itself (a fault, abort()) stay deliverable: blocked, the kernel
 * would kill the process without running a handler (the sanitizers' reports, gdb's stop). */
static const int synchronous[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};

void signals_block_all(sigset_t *saved)
{
    sigset_t all;

    sigfillset(&all);
    for (size_t i = 0; i < sizeof(synchronous) / sizeof(synchronous[0]); i++)
        sigdelset(&all, synchronous[i]);
    pthread_sigmask(SIG_BLOCK, &all, saved);
}

void signals_restore(const sigset_t *saved)
{
    pthread_sigmask(SIG_SETMASK, saved, NULL);
}

int thread_start(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    sigset_t saved;

    signals_block_all(&saved); /* the new thread inherits the mask */
    int rc = pthread_create(t, attr, fn, arg);
    signals_restore(&saved);
    return rc;
}
