/* The formation layer's front (form.h): its state, the dispatch of peer daemons' messages and
 * of links, and time. */
#include <stdlib.h>

#include "form/form_int.h"
#include "log.h"

form_t *form_new(const form_env_t *env, const form_ops_t *ops, void *ctx)
{
    form_t *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    f->env = *env;
    f->ops = ops;
    f->ctx = ctx;
    f->next_comm_id = env->comm_id_base;
    return f;
}

void form_free(form_t *f)
{
    if (f == NULL)
        return;
    form_jobs_stop(f);
    form_rjobs_stop(f);
    form_splits_stop(f);
    form_comms_stop(f);
    form_rejoins_stop(f);
    free(f);
}

void form_client_gone(form_t *f, const form_client_t *c)
{
    form_rjobs_client_gone(f, c);
    form_splits_client_gone(f, c);
    form_jobs_client_gone(f, c);
    form_comms_client_gone(f, c);
    form_rejoins_client_gone(f, c);
}

int form_key_for(const form_t *f, const uint8_t *job_id, uint8_t *key)
{
    return form_jobs_key_for(f, job_id, key) == 0 ? 0 : form_rjobs_key_for(f, job_id, key);
}

void form_peer_msg(form_t *f, void *link, const char *addr, const uint8_t *job_id,
                   const Hccld__Msg *m, uint64_t now)
{
    if (m->body_case == HCCLD__MSG__BODY_JOIN_REQ)
        form_remote_join(f, link, addr, job_id, m->join_req, now);
    else if (m->body_case == HCCLD__MSG__BODY_MEMBERSHIP)
        form_rjobs_membership(f, link, m->membership);
    else
        WARN("NET", "daemon %s sent an unexpected message (%d)", addr, (int)m->body_case);
}

void form_link_ready(form_t *f, void *link, HcclResult result, uint64_t now)
{
    form_rjobs_link_ready(f, link, result, now);
}

/* A link serves one job while it forms; it closes once the membership is out (the other daemon
 * frees its side). Only a close while a job still needs it loses a peer. */
void form_link_gone(form_t *f, void *link, const char *addr)
{
    int forming = form_jobs_link_gone(f, link);

    if (form_rjobs_link_gone(f, link))
        forming = 1;
    if (forming)
        f->ops->peer_lost(f->ctx, addr, "its control connection closed");
}

uint64_t form_next_deadline(const form_t *f)
{
    uint64_t d = form_jobs_deadline(f), r = form_rjobs_deadline(f), s = form_splits_deadline(f);
    uint64_t j = form_rejoins_deadline(f);

    d = r < d ? r : d;
    d = j < d ? j : d;
    return s < d ? s : d;
}

void form_expire(form_t *f, uint64_t now)
{
    form_jobs_expire(f, now);
    form_rjobs_expire(f, now);
    form_splits_expire(f, now);
    form_rejoins_expire(f, now);
}

const form_comm_t *form_comms(const form_t *f)
{
    return f->comms;
}
