/* A job whose root is this daemon, as job.c and membership.c share it. */
#ifndef HCCLD_FORM_JOB_H
#define HCCLD_FORM_JOB_H

#include "form/form_int.h"
#include "rootinfo.h"

struct job {
    uint8_t id[ROOTINFO_ID_BYTES];
    uint8_t key[ROOTINFO_KEY_BYTES];
    char hex[FORM_JOB_HEX];
    uint32_t nranks; /* 0 until the first rank joins */
    uint32_t joined;
    join_t *ranks;
    uint64_t deadline;  /* ms: it fails if not every rank joined by then */
    uint32_t timeout_s; /* HCCL_CONNECT_TIMEOUT of the rank that opened it */
    job_t *next;
};

/* Whether rank r is the first of j that joined over its link (a daemon is told things once). */
int form_job_first_of_link(const job_t *j, uint32_t r);
/* Every rank joined and some live on other daemons: tells each daemon the membership, sets up
 * this daemon's part of the comm, then answers its own ranks. */
void form_job_multinode(form_t *f, job_t *j);
void form_job_free(form_t *f, job_t *j);

#endif
