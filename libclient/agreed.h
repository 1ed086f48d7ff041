/*
 * Agreed root infos: every rank computes the same job id, key and root daemon from facts they
 * share (a rank table, a launcher's environment, a parent communicator), so no rank has to
 * send anything to the others before the communicator exists. The root daemon opens the job
 * when its first rank joins; member daemons retry until then (daemon/server/rjobs.c).
 */
#ifndef HCCLD_LIBCLIENT_AGREED_H
#define HCCLD_LIBCLIENT_AGREED_H

#include <sodium.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

#define HC_JOB_BYTES 16

/* What the ranks agree on, hashed as length-prefixed fields. */
typedef struct hc_facts {
    crypto_generichash_state st;
} hc_facts_t;

void hc_facts_init(hc_facts_t *f, const char *kind);
void hc_facts_add(hc_facts_t *f, const void *p, size_t n);
void hc_facts_str(hc_facts_t *f, const char *s);
void hc_facts_u64(hc_facts_t *f, uint64_t v);

/*
 * Ends the facts with this process's count of agreed inits (so the next comm from the same facts
 * is another job; every rank must make its agreed inits in the same order) and derives the job:
 * id = H(facts); key = H_{HCCL_JOB_KEY}(id) when HCCL_JOB_KEY is set, else H'(facts), with one
 * WARN per process saying the job is then protected only by `guard`. HCCL_E_PARA if
 * HCCL_JOB_KEY is malformed.
 */
HcclResult hc_job_derive(hc_facts_t *f, const char *guard, uint8_t *id, uint8_t *key);
/* A child of a split: from the parent's job, its split call number and the child's color. */
void hc_split_derive(const uint8_t *parent_id, const uint8_t *parent_key, uint64_t seq,
                     uint32_t color, uint8_t *id, uint8_t *key);

/* Joins rank `rank` of n to the agreed job whose root daemon advertises root ("IP:PORT"; ""
 * when every rank is on this daemon and it does not listen). parent_job: a split child's
 * parent's job id (HC_JOB_BYTES), or NULL; cfg: the comm's settings, or NULL. */
HcclResult hc_init_agreed(hc_client_t *c, const uint8_t *id, const uint8_t *key, const char *root,
                          uint32_t n, uint32_t rank, const uint8_t *parent_job,
                          const hc_comm_cfg_t *cfg, HcclComm *comm);

/* launcher.c: HcclCommInitFromEnv without HCCL_ROOT_INFO. */
HcclResult hc_launcher_init(HcclComm *comm);

/* split.c: HcclCommSplit of a comm across daemons, among its ranks. */
HcclResult hc_split_multinode(hc_comm_t *parent, uint32_t color, uint32_t key, uint64_t seq,
                              HcclComm *newComm);

#endif
