/* Recent link measurements by set of daemons (see probe_hist.h). */
#include "span/probe_hist.h"

#include <stdlib.h>
#include <string.h>

uint64_t probe_hist_key(const char *addrs, uint32_t n, uint32_t stride)
{
    uint64_t h = 0xcbf29ce484222325ull ^ n; /* FNV-1a */

    for (uint32_t i = 0; i < n; i++) {
        const char *a = addrs + (size_t)i * stride;
        for (size_t k = 0; k < stride && a[k] != '\0'; k++)
            h = (h ^ (uint8_t)a[k]) * 0x100000001b3ull;
        h = (h ^ 0xff) * 0x100000001b3ull; /* "ab","c" is not "a","bc" */
    }
    return h != 0 ? h : 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

_Static_assert(PROBE_HIST_USE + 1 <= PROBE_MEDIAN_MAX, "a blend's medians fit probe_median()");

double probe_median(const double *v, uint32_t n)
{
    double s[PROBE_MEDIAN_MAX];

    if (n == 0)
        return 0;
    n = n < PROBE_MEDIAN_MAX ? n : PROBE_MEDIAN_MAX;
    memcpy(s, v, n * sizeof(*v));
    qsort(s, n, sizeof(*s), cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

double probe_beta(double exchange_us, const double *rtt_us, uint32_t npings, uint32_t bytes)
{
    double quickest = npings ? rtt_us[0] : 0, t;

    for (uint32_t i = 1; i < npings; i++)
        quickest = rtt_us[i] < quickest ? rtt_us[i] : quickest;
    t = exchange_us - quickest;
    return (t > 0 ? t : exchange_us / 2) / bytes;
}

/* The slot a new measurement takes: an empty one, else the oldest. */
static struct probe_hist_entry *slot_for(probe_hist_t *h)
{
    struct probe_hist_entry *best = &h->e[0];

    for (uint32_t i = 0; i < PROBE_HIST_SLOTS; i++) {
        if (h->e[i].t_ns == 0)
            return &h->e[i];
        if (h->e[i].t_ns < best->t_ns)
            best = &h->e[i];
    }
    return best;
}

uint32_t probe_hist_blend(probe_hist_t *h, uint64_t key, uint64_t now, double fig[PROBE_HIST_FIGS])
{
    const struct probe_hist_entry *use[PROBE_HIST_USE];
    uint32_t n = 0;

    /* The most recent earlier ones of this key, newest first (insertion by time). */
    for (uint32_t i = 0; i < PROBE_HIST_SLOTS; i++) {
        const struct probe_hist_entry *e = &h->e[i];
        if (e->t_ns == 0 || e->key != key || e->t_ns > now || now - e->t_ns > PROBE_HIST_MAX_AGE_NS)
            continue;
        uint32_t at = n < PROBE_HIST_USE ? n++ : PROBE_HIST_USE;
        while (at > 0 && use[at - 1]->t_ns < e->t_ns) {
            if (at < PROBE_HIST_USE)
                use[at] = use[at - 1];
            at--;
        }
        if (at < PROBE_HIST_USE)
            use[at] = e;
    }
    double fresh[PROBE_HIST_FIGS];
    memcpy(fresh, fig, sizeof(fresh));
    for (uint32_t f = 0; f < PROBE_HIST_FIGS; f++) {
        double v[PROBE_HIST_USE + 1];
        v[0] = fresh[f];
        for (uint32_t k = 0; k < n; k++)
            v[k + 1] = use[k]->fig[f];
        fig[f] = probe_median(v, n + 1);
    }
    /* Last: the slot taken may be one of those just read. */
    struct probe_hist_entry *s = slot_for(h);
    s->key = key;
    s->t_ns = now != 0 ? now : 1;
    memcpy(s->fig, fresh, sizeof(s->fig));
    return n;
}
