/* Op retry settings of a comm spanning daemons (form_int.h): what a rank asked, what the root
 * decides for every node, and the hold time a data connection gets from them. */
#include "form/form_int.h"
#include "retry_conf.h"

/* The fields are named alike in CommInitReq and CommSplitReq. */
#define RETRY_TAKE(r, req)                                                                         \
    retry_take(r, (req)->retry_set, (req)->retry_l0, (req)->retry_l1, (req)->retry_max_cnt,        \
               (req)->retry_hold_ms, (req)->retry_interval_ms)

static void retry_take(form_retry_t *r, int set, int l0, int l1, uint32_t max_cnt, uint32_t hold_ms,
                       uint32_t interval_ms)
{
    retry_conf_t d;

    retry_conf_default(&d);
    *r = (form_retry_t){.l0 = d.enable[0],
                        .l1 = d.enable[1],
                        .hold_ms = d.hold_ms,
                        .max_cnt = d.max_cnt,
                        .interval_ms = d.interval_ms};
    if (!set)
        return;
    r->l0 = l0;
    r->l1 = l1;
    /* The library checked the ranges; a client that did not gets them enforced here. */
    r->max_cnt = max_cnt < RETRY_MAX_CNT_MIN   ? RETRY_MAX_CNT_MIN
                 : max_cnt > RETRY_MAX_CNT_MAX ? RETRY_MAX_CNT_MAX
                                               : max_cnt;
    r->hold_ms = hold_ms > RETRY_TIME_MS_MAX ? RETRY_TIME_MS_MAX : hold_ms;
    r->interval_ms = interval_ms > RETRY_TIME_MS_MAX ? RETRY_TIME_MS_MAX : interval_ms;
}

void form_retry_take(form_retry_t *r, const Hccld__CommInitReq *req)
{
    RETRY_TAKE(r, req);
}

void form_retry_take_split(form_retry_t *r, const Hccld__CommSplitReq *req)
{
    RETRY_TAKE(r, req);
}

uint64_t form_retry_hold_ms(const form_retry_t *r)
{
    if (r == NULL || !r->l1)
        return 0;
    /* HCCL waits HoldTime before its first retry and IntervalTime between the next ones; a
     * link may thus be down that long before the op fails. Ours comes back as soon as the link
     * does, within the same bound. At least 1 ms: HoldTime 0 still means retry on. */
    uint64_t ms = r->hold_ms + (uint64_t)(r->max_cnt - 1) * r->interval_ms;
    return ms > 0 ? ms : 1;
}

void form_retry_put(const form_retry_t *r, Hccld__Membership *m)
{
    m->retry_l1 = r->l1;
    m->retry_hold_ms = r->hold_ms;
    m->retry_max_cnt = r->max_cnt;
    m->retry_interval_ms = r->interval_ms;
}

void form_retry_get(form_retry_t *r, const Hccld__Membership *m)
{
    *r = (form_retry_t){
        .l1 = m->retry_l1,
        .hold_ms = m->retry_hold_ms > RETRY_TIME_MS_MAX ? RETRY_TIME_MS_MAX : m->retry_hold_ms,
        .max_cnt = m->retry_max_cnt < RETRY_MAX_CNT_MIN   ? RETRY_MAX_CNT_MIN
                   : m->retry_max_cnt > RETRY_MAX_CNT_MAX ? RETRY_MAX_CNT_MAX
                                                          : m->retry_max_cnt,
        .interval_ms =
            m->retry_interval_ms > RETRY_TIME_MS_MAX ? RETRY_TIME_MS_MAX : m->retry_interval_ms};
}

uint32_t form_restart_hold_ms(const join_t *joins, uint32_t n)
{
    uint64_t least = UINT64_MAX;

    for (uint32_t q = 0; q < n; q++) {
        form_retry_t r = joins[q].retry;
        r.l1 = r.l0 || r.l1;
        uint64_t ms = form_retry_hold_ms(&r);
        if (ms < least)
            least = ms;
    }
    return least == UINT64_MAX ? 0 : (uint32_t)least;
}
