/*
 * Ordinary memory registered with a comm (HcclCommRegister): the buffer's whole pages are moved
 * into the arena, in place. Their content is copied into an arena block, and that block is then
 * mapped over the very same addresses (mremap of a shared mapping), so the caller's pointers keep
 * working while the daemon and the comm's peers see the pages as arena memory: a collective
 * whose piece lies on them moves no staging copy. The partial pages at either end stay the
 * caller's and are staged as before. HcclCommDeregister (or destroying the comm) copies the
 * pages back into private memory at the same addresses.
 */
#ifndef HCCLD_LIBCLIENT_REG_H
#define HCCLD_LIBCLIENT_REG_H

#include <stdint.h>

#include "client.h"

/* Whether [p, p + len) lies in the arena or on registered pages: then *off_p is its arena
 * offset. len 0 asks about the byte at p. */
int hc_mem_off(hc_client_t *c, const void *p, uint64_t len, uint64_t *off_p);

HcclResult hc_reg_add(hc_comm_t *comm, void *buf, uint64_t len, void **handle_p);
HcclResult hc_reg_remove(hc_comm_t *comm, void *handle);
/* Deregisters every buffer still registered with comm (HcclCommDestroy, HcclCommAbort). */
void hc_reg_drop_comm(hc_comm_t *comm);

#endif
