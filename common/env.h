/* Environment variables: parsed in one place, bad values reported once and rejected. */
#ifndef HCCLD_COMMON_ENV_H
#define HCCLD_COMMON_ENV_H

#include <stddef.h>
#include <stdint.h>

/* Reads an unsigned integer in [min, max]; unset or empty gives def. 0, or -EINVAL (logged). */
int env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *val_p);
/* A size in MB (HCCL_BUFFSIZE's unit), 1..max: 0, or -EINVAL with a reason in why that names
 * the unit and, for what looks like a byte count, the MB value meant. what names the setting. */
int mb_check(const char *what, const char *s, uint64_t max, uint64_t *mb_p, char *why, size_t cap);
/* An MB variable: def when unset or empty; else as mb_check, logging the reason. */
int env_mb(const char *name, uint64_t def, uint64_t max, uint64_t *mb_p);
/* Parses "123", "4K", "16M", "1G" (binary units); -EINVAL if malformed or overflowing. */
int parse_size(const char *s, uint64_t *val_p);
/* A rate in bits/s: "40Gbit", "10G", "2.5Gbit/s" (K/M/G/T prefixes; "bit", "bps", "/s"
 * optional), bytes/s as "5GB/s", "0" or "none" (no cap). A bare number other than 0 has no
 * unit and is refused (5 would be 5 bit/s, never what was meant). 0, or -1 if malformed. */
int parse_rate(const char *s, uint64_t *bps_p);
/* What parse_rate takes, for messages that refuse a rate. */
#define RATE_UNITS                                                                                 \
    "a number with a unit: 40Gbit, 500M, 2.5Gbit/s (bit/s: bit, K, M, G, T), 5GB/s (bytes/s: "     \
    "B, KB, MB, GB, TB), or none"
/* Parses a decimal unsigned integer that must consume all of s. */
int parse_u64(const char *s, uint64_t *val_p);
/* Command-line helpers for the tools: 1 on success, 0 on a bad value (their callers' style). */
int arg_size(const char *s, size_t *out);
int arg_int(const char *s, int min, int max, int *out);
int arg_factor(const char *s, double *out); /* a real number > 1 */
/* Hex encoding for root infos in the environment. out needs 2*n+1 bytes. */
void hex_encode(const void *data, size_t n, char *out);
/* Returns the number of bytes decoded, or -EINVAL. */
long hex_decode(const char *hex, void *out, size_t cap);

#endif
