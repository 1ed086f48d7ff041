/*
 * HcclGetCommAsyncError: the first error of the comm's operations, or, with nothing of this
 * rank's in flight, whether the comm broke meanwhile: a member died or left (its control block
 * says so, on one node), a peer daemon was lost or a rank on another node died (the daemon says
 * so, asked at most every HEALTH_EVERY_NS). A break found so is kept as the comm's async error.
 * The same question tells a comm's lanes when its daemons are ready (hc_comm_wait_ready).
 */
#include <unistd.h>

#include "client.h"
#include "futex.h"

#define HEALTH_EVERY_NS (10ull * 1000000ull)
#define HEALTH_TIMEOUT_MS 5000

/* The daemon's word on the comm: HCCL_SUCCESS, or what its ops now fail with. A daemon that
 * cannot answer is the error (HCCL_E_UNAVAIL: nothing runs without it). */
static HcclResult ask_daemon(hc_comm_t *c)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__CommHealthReq req = HCCLD__COMM_HEALTH_REQ__INIT;
    HcclResult rc;

    if (__atomic_load_n(&c->rejoin_failed, __ATOMIC_ACQUIRE))
        return HCCL_E_REMOTE;
    if (hc_client_away(c->c))
        return HCCL_SUCCESS; /* no news while the daemon restarts */
    req.comm_id = c->id;
    req.rank = c->rank;
    m.body_case = HCCLD__MSG__BODY_COMM_HEALTH_REQ;
    m.comm_health_req = &req;
    rc = hc_ctl_call(c->c, &m, &resp, HEALTH_TIMEOUT_MS);
    if (rc != HCCL_SUCCESS)
        return hc_client_dead(c->c) ? HCCL_E_UNAVAIL : HCCL_SUCCESS;
    if (resp->body_case == HCCLD__MSG__BODY_COMM_HEALTH_RESP)
        rc = (HcclResult)resp->comm_health_resp->result;
    frame_msg_free(resp);
    return rc;
}

HcclResult hc_comm_wait_ready(hc_comm_t *c, uint64_t deadline)
{
    Hccld__CommHealthReq req = HCCLD__COMM_HEALTH_REQ__INIT;
    useconds_t pause_us = 200;

    req.comm_id = c->id;
    req.rank = c->rank;
    for (;;) {
        Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
        m.body_case = HCCLD__MSG__BODY_COMM_HEALTH_REQ;
        m.comm_health_req = &req;
        HcclResult rc = hc_ctl_call(c->c, &m, &resp, HEALTH_TIMEOUT_MS);
        if (rc != HCCL_SUCCESS)
            return rc;
        int ready = 0;
        if (resp->body_case != HCCLD__MSG__BODY_COMM_HEALTH_RESP)
            rc = HCCL_E_INTERNAL;
        else
            rc = (HcclResult)resp->comm_health_resp->result, ready = resp->comm_health_resp->ready;
        frame_msg_free(resp);
        if (rc != HCCL_SUCCESS || ready)
            return rc;
        if (now_ns() > deadline)
            return HCCL_E_TIMEOUT;
        usleep(pause_us);
        pause_us = pause_us < 10000 ? pause_us * 2 : pause_us;
    }
}

HcclResult hc_comm_health(hc_comm_t *c)
{
    if (c->coop != NULL && hc_coop_aborted(c))
        return HCCL_E_REMOTE;
    if (c->coop != NULL && c->nnodes <= 1)
        return HCCL_SUCCESS; /* the control block would say so */
    uint64_t now = now_ns(), last = __atomic_load_n(&c->health_ns, __ATOMIC_ACQUIRE);
    if (now - last < HEALTH_EVERY_NS ||
        !__atomic_compare_exchange_n(&c->health_ns, &last, now, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return HCCL_SUCCESS; /* asked a moment ago, or another thread asks now */
    return ask_daemon(c);
}

HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    if (rc == HCCL_SUCCESS && asyncError == NULL)
        rc = HCCL_E_PTR;
    if (rc != HCCL_SUCCESS)
        return rc;
    if (__atomic_load_n(&c->async_err, __ATOMIC_ACQUIRE) == HCCL_SUCCESS)
        hc_comm_set_error(c, hc_comm_health(c));
    *asyncError = __atomic_load_n(&c->async_err, __ATOMIC_ACQUIRE);
    return HCCL_SUCCESS;
}
