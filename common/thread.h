/*
 * Helper threads that never take the process's signals. The daemon handles its signals on the
 * event loop (libuv's uv_signal_t); a signal the kernel hands to a helper thread instead
 * interrupts that thread's system calls, and under ThreadSanitizer waits in that thread until
 * its next intercepted call: a worker asleep on a futex kept SIGTERM for good. Threads started
 * here, and libraries' threads started between signals_block_all and signals_restore, leave
 * every asynchronous signal to the threads that did not block them.
 */
#ifndef HCCLD_COMMON_THREAD_H
#define HCCLD_COMMON_THREAD_H

#include <pthread.h>
#include <signal.h>

/* Blocks every asynchronous signal in the calling thread (not the ones a fault or abort()
 * raises); *saved gets the mask it had. */
void signals_block_all(sigset_t *saved);
void signals_restore(const sigset_t *saved);
/* pthread_create (attr may be NULL) with every asynchronous signal blocked in the new thread: 0
 * or an errno. */
int thread_start(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

#endif
