/*
 * Recent link measurements, by the set of daemons they were taken between. One probe when a
 * comm forms is a handful of small messages and a few bulk ones on busy hosts: its figures
 * scatter (seen on 4 loopback daemons, one exchange each: latency 12-163 us, 0.29-24 GB/s,
 * 5-1852 us per extra message from one comm to the next), and with them the cost model's
 * choice. Node 0 blends each new measurement with the recent ones of the same daemons, in the
 * same order: every figure becomes the median of this one and up to PROBE_HIST_USE earlier
 * ones no older than PROBE_HIST_MAX_AGE_NS. The comm's nodes all receive node 0's figures, so
 * they still agree. The engine thread owns it; no locking. The probe's arithmetic that the
 * history shares, or that tests want apart (medians, the bandwidth), is here too.
 */
#ifndef HCCLD_SPAN_PROBE_HIST_H
#define HCCLD_SPAN_PROBE_HIST_H

#include <stdint.h>

#define PROBE_HIST_FIGS 4 /* alpha, beta, gamma, overhead (host_load is not measured) */
#define PROBE_HIST_SLOTS 32
#define PROBE_HIST_USE 6
#define PROBE_HIST_MAX_AGE_NS (600ull * 1000000000ull)

typedef struct probe_hist {
    struct probe_hist_entry {
        uint64_t key, t_ns; /* t_ns 0: empty */
        double fig[PROBE_HIST_FIGS];
    } e[PROBE_HIST_SLOTS];
} probe_hist_t;

/* The median of n values (n <= PROBE_MEDIAN_MAX; of an even count, the mean of the middle
 * two), v left as it was: the probe's timings and the blend both go by it. */
#define PROBE_MEDIAN_MAX 16
double probe_median(const double *v, uint32_t n);

/* Inverse bandwidth (us per byte) from the median time of an exchange of a `bytes` message one
 * way and a short answer back, less the quickest of the ping round trips (half the exchange
 * if that leaves nothing). The quickest, not the median one: on a loaded host the pings can be
 * held up about as long as the whole exchange (a median round trip of 432 us against a 1 MiB
 * exchange of about 440 us, on 4 loopback daemons, read as 129 GB/s). */
double probe_beta(double exchange_us, const double *rtt_us, uint32_t npings, uint32_t bytes);

/* The key of a set of daemons: their data addresses in node order. */
uint64_t probe_hist_key(const char *addrs, uint32_t n, uint32_t stride);

/* Records fig (measured at now) under key, then replaces each figure with the median of it and
 * the most recent PROBE_HIST_USE earlier ones of key (medians of an even count: the mean of the
 * middle two). Returns how many earlier measurements went in. */
uint32_t probe_hist_blend(probe_hist_t *h, uint64_t key, uint64_t now, double fig[PROBE_HIST_FIGS]);

#endif
