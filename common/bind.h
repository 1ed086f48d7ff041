/* Launchers pin ranks to cores as mpirun does by default: one core per local rank while the
 * ranks fit on the cores, no pinning when they do not (then the scheduler must move them). */
#ifndef HCCLD_COMMON_BIND_H
#define HCCLD_COMMON_BIND_H

/* Pins the calling process for local rank `local` of `nlocal`, unless HCCL_BIND=none.
 * Returns the core, or -1 when it did not pin. */
int bind_local_rank(unsigned local, unsigned nlocal);

#endif
