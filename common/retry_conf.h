/*
 * Op retry settings in HCCL's syntax, with HCCL's ranges and defaults:
 *   HCCL_OP_RETRY_ENABLE, HcclCommConfig's hcclRetryEnable   "L0:0, L1:1, L2:0"
 *       per level, 0 (off) or 1 (on); a level not named keeps what it had.
 *   HCCL_OP_RETRY_PARAMS, HcclCommConfig's hcclRetryParams   "MaxCnt:3, HoldTime:5000,
 *       IntervalTime:1000": the three, in this order (as HCCL reads them).
 * Levels: L0 within a server, L1 between servers (for hcclD: between daemons), L2 between super
 * nodes. hcclD honours L1 for its data connections, and L0 or L1 for a restart of the rank's own
 * daemon; L2 is accepted, as HCCL accepts it, and ignored. Keys in any
 * case; blanks (spaces, tabs) around keys, values, colons and commas are ignored. NULL, "" or
 * blanks alone set nothing. Pure: the caller reads the environment and logs the reasons.
 */
#ifndef HCCLD_COMMON_RETRY_CONF_H
#define HCCLD_COMMON_RETRY_CONF_H

#include <stddef.h>
#include <stdint.h>

#define RETRY_LEVELS 3 /* L0, L1, L2 */
/* Whether op retry is on at a level nothing names: off, as in HCCL. Measured with no fault, it
 * costs 4-14% of busbw across daemons here (every byte sent is copied once more for the replay;
 * bench/RESULTS.md, "Op retry with no fault"), over issue 37's budget of 3%. The one place that
 * decides it. */
#define RETRY_ENABLE_DEFAULT 0
#define RETRY_MAX_CNT_MIN 1
#define RETRY_MAX_CNT_MAX 10
#define RETRY_MAX_CNT_DEFAULT 1
#define RETRY_TIME_MS_MAX 60000 /* HoldTime and IntervalTime: 0..this */
#define RETRY_HOLD_MS_DEFAULT 5000
#define RETRY_INTERVAL_MS_DEFAULT 1000

typedef struct retry_conf {
    int set;                  /* a variable or a config field gave some value */
    int enable[RETRY_LEVELS]; /* per level: 0 or 1 */
    uint32_t max_cnt;         /* retries of a failed op at most (MaxCnt) */
    uint32_t hold_ms;         /* from the failure to the first retry (HoldTime) */
    uint32_t interval_ms;     /* between two retries of an op (IntervalTime) */
} retry_conf_t;

/* Fills c with the defaults above; c->set is 0. */
void retry_conf_default(retry_conf_t *c);
/* Parses s, a value of HCCL_OP_RETRY_ENABLE's syntax that messages call `what`, into enable[] for
 * the levels it names. 0; or -EINVAL with the reason in why (a NUL-terminated string of at most
 * cap bytes), enable[] untouched. */
int retry_enable_parse(const char *what, const char *s, int enable[RETRY_LEVELS], char *why,
                       size_t cap);
/* Parses s, a value of HCCL_OP_RETRY_PARAMS's syntax, into c's max_cnt, hold_ms, interval_ms.
 * 0; or -EINVAL with the reason in why, c untouched. */
int retry_params_parse(const char *what, const char *s, retry_conf_t *c, char *why, size_t cap);
/* A comm's settings into *out: the defaults, then the variables HCCL_OP_RETRY_ENABLE and
 * HCCL_OP_RETRY_PARAMS (env_enable, env_params; NULL when unset), then its config's
 * hcclRetryEnable and hcclRetryParams (cfg_enable, cfg_params; NULL or "" when not set), each
 * winning over what comes before for what it names. 0; or -EINVAL with the reason in why, naming
 * the variable or field at fault. */
int retry_conf_resolve(const char *env_enable, const char *env_params, const char *cfg_enable,
                       const char *cfg_params, retry_conf_t *out, char *why, size_t cap);

#endif
