/* Strict priority and a token bucket per class (see qos_sched.h). */
#include "sched/qos_sched.h"

static void refill(qos_bucket_t *b, uint64_t now)
{
    double cap;

    if (b->rate_Bps == 0 || now <= b->last_ns) {
        b->last_ns = now > b->last_ns ? now : b->last_ns;
        return;
    }
    b->tokens += (double)b->rate_Bps * (double)(now - b->last_ns) / 1e9;
    cap = (double)b->rate_Bps * (double)QOS_BURST_NS / 1e9;
    if (b->tokens > cap)
        b->tokens = cap;
    b->last_ns = now;
}

void qos_sched_set(qos_sched_t *q, int i, uint32_t priority, uint64_t max_bw_bps, int dscp,
                   uint64_t now)
{
    qos_bucket_t *b;

    if (i < 0 || i >= QOS_SCHED_CLASSES)
        return;
    b = &q->cls[i];
    refill(b, now);
    b->priority = priority;
    b->rate_Bps = max_bw_bps / 8;
    b->dscp = dscp;
    if (b->last_ns == 0)
        b->last_ns = now;
    if (i >= q->ncls)
        q->ncls = i + 1;
}

void qos_sched_set_hold(qos_sched_t *q, int i, uint64_t hold_ns)
{
    if (i >= 0 && i < QOS_SCHED_CLASSES)
        q->cls[i].hold_ns = hold_ns;
}

void qos_sched_pass(qos_sched_t *q, uint64_t now)
{
    for (int i = 0; i < q->ncls; i++) {
        qos_bucket_t *b = &q->cls[i];
        b->active = b->hold_ns != 0 && b->last_busy_ns != 0 && now - b->last_busy_ns < b->hold_ns;
        q->cls[i].waiting = q->cls[i].waiting_now;
        q->cls[i].waiting_now = 0;
    }
}

/* One-second windows of admitted bytes give the class's recent rate. */
static void account(qos_bucket_t *b, uint64_t bytes, uint64_t now)
{
    if (now - b->win_start_ns >= 1000000000ull) {
        b->recent_Bps =
            now - b->win_start_ns < 2000000000ull
                ? (uint64_t)((double)b->win_bytes * 1e9 / (double)(now - b->win_start_ns))
                : 0;
        b->win_start_ns = now;
        b->win_bytes = 0;
    }
    b->win_bytes += bytes;
}

uint64_t qos_recent_rate(const qos_bucket_t *b, uint64_t now)
{
    return now - b->win_start_ns < 2000000000ull ? b->recent_Bps : 0;
}

void qos_active(qos_sched_t *q, int i, uint64_t now)
{
    if (i >= 0 && i < q->ncls) {
        q->cls[i].active++;
        q->cls[i].last_busy_ns = now;
    }
}

int qos_admit(qos_sched_t *q, int i, uint64_t bytes, uint64_t now)
{
    qos_bucket_t *b;

    if (i < 0 || i >= q->ncls)
        return 1;
    b = &q->cls[i];
    for (int k = 0; k < q->ncls; k++)
        if (q->cls[k].priority < b->priority && q->cls[k].active > 0) {
            b->waiting_now++;
            return 0;
        }
    refill(b, now);
    if (b->rate_Bps != 0 && b->tokens < 0) {
        b->waiting_now++;
        return 0;
    }
    if (b->rate_Bps != 0)
        b->tokens -= (double)bytes;
    b->sent_bytes += bytes;
    account(b, bytes, now);
    return 1;
}
