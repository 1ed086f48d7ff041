/* Op retry settings in HCCL's syntax (see retry_conf.h). */
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

#include "retry_conf.h"
#include "text.h"

#define ENABLE_FORM "\"L0:0, L1:1, L2:0\""
#define PARAMS_FORM "\"MaxCnt:3, HoldTime:5000, IntervalTime:1000\""

static const char *const level_name[RETRY_LEVELS] = {"L0", "L1", "L2"};

/* HCCL_OP_RETRY_PARAMS's values, in the order HCCL reads them. */
static const struct {
    const char *name;
    uint32_t min, max;
    const char *unit;
} param[3] = {
    {"MaxCnt", RETRY_MAX_CNT_MIN, RETRY_MAX_CNT_MAX, ""},
    {"HoldTime", 0, RETRY_TIME_MS_MAX, " ms"},
    {"IntervalTime", 0, RETRY_TIME_MS_MAX, " ms"},
};

static int is_blank(char ch)
{
    return ch == ' ' || ch == '\t';
}

static const char *skip_blanks(const char *p)
{
    while (is_blank(*p))
        p++;
    return p;
}

static int all_blank(const char *s)
{
    return s == NULL || *skip_blanks(s) == '\0';
}

/* The length of the token at p: up to a blank, a colon, a comma or the end. */
static size_t token_len(const char *p)
{
    size_t n = 0;

    while (p[n] != '\0' && !is_blank(p[n]) && p[n] != ':' && p[n] != ',')
        n++;
    return n;
}

static int token_is(const char *p, size_t n, const char *word)
{
    return n == strlen(word) && strncasecmp(p, word, n) == 0;
}

/* `what="s" is invalid: REASON (the form: FORM)` into why; returns -EINVAL. */
__attribute__((format(printf, 6, 7))) static int
fail(char *why, size_t cap, const char *what, const char *s, const char *form, const char *fmt, ...)
{
    size_t at = 0;
    va_list ap;

    text_add(why, cap, &at, "%s=\"%s\" is invalid: ", what, s);
    va_start(ap, fmt);
    text_vadd(why, cap, &at, fmt, ap);
    va_end(ap);
    text_add(why, cap, &at, " (the form: %s)", form);
    return -EINVAL;
}

void retry_conf_default(retry_conf_t *c)
{
    memset(c, 0, sizeof(*c));
    for (int l = 0; l < RETRY_LEVELS; l++)
        c->enable[l] = RETRY_ENABLE_DEFAULT;
    c->max_cnt = RETRY_MAX_CNT_DEFAULT;
    c->hold_ms = RETRY_HOLD_MS_DEFAULT;
    c->interval_ms = RETRY_INTERVAL_MS_DEFAULT;
}

/* The level a token names, or -1. */
static int level_of(const char *p, size_t n)
{
    for (int l = 0; l < RETRY_LEVELS; l++)
        if (token_is(p, n, level_name[l]))
            return l;
    return -1;
}

int retry_enable_parse(const char *what, const char *s, int enable[RETRY_LEVELS], char *why,
                       size_t cap)
{
    int got[RETRY_LEVELS] = {-1, -1, -1};
    const char *p = s;

    if (all_blank(s))
        return 0;
    for (int entry = 1;; entry++) {
        const char *key = skip_blanks(p), *val;
        size_t kn = token_len(key), vn;
        int l = level_of(key, kn);

        if (kn == 0 && (*key == ',' || *key == '\0'))
            return fail(why, cap, what, s, ENABLE_FORM, "entry %d is empty", entry);
        if (l < 0)
            return fail(why, cap, what, s, ENABLE_FORM, "unknown level \"%.*s\" (L0, L1 or L2)",
                        (int)kn, key);
        p = skip_blanks(key + kn);
        if (*p != ':')
            return fail(why, cap, what, s, ENABLE_FORM, "no ':' after %s", level_name[l]);
        val = skip_blanks(p + 1);
        vn = token_len(val);
        if (vn != 1 || (*val != '0' && *val != '1'))
            return fail(why, cap, what, s, ENABLE_FORM, "%s's value \"%.*s\" is not 0 or 1",
                        level_name[l], (int)vn, val);
        if (got[l] >= 0)
            return fail(why, cap, what, s, ENABLE_FORM, "%s is given twice", level_name[l]);
        got[l] = *val - '0';
        p = skip_blanks(val + vn);
        if (*p == '\0')
            break;
        if (*p != ',')
            return fail(why, cap, what, s, ENABLE_FORM, "unexpected \"%s\" after %s:%c", p,
                        level_name[l], *val);
        p++;
    }
    for (int l = 0; l < RETRY_LEVELS; l++)
        if (got[l] >= 0)
            enable[l] = got[l];
    return 0;
}

/* A decimal number of n digits at p (larger than any range past 11 digits); -1 if not one. */
static int number(const char *p, size_t n, uint64_t *v)
{
    *v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        if (*v < 100000000000ull)
            *v = *v * 10 + (uint64_t)(p[i] - '0');
    }
    return 0;
}

int retry_params_parse(const char *what, const char *s, retry_conf_t *c, char *why, size_t cap)
{
    uint64_t v[3];
    const char *p = s;

    if (all_blank(s))
        return 0;
    for (int i = 0; i < 3; i++) {
        const char *key, *val;
        size_t kn, vn;

        p = skip_blanks(p);
        if (i > 0 && *p != '\0' && *p != ',')
            return fail(why, cap, what, s, PARAMS_FORM, "unexpected \"%s\" after %s", p,
                        param[i - 1].name);
        if (i > 0 && *p == ',')
            p++;
        key = skip_blanks(p);
        kn = token_len(key);
        if (kn == 0 && (*key == '\0' || *key == ','))
            return fail(why, cap, what, s, PARAMS_FORM, "%s is missing", param[i].name);
        if (!token_is(key, kn, param[i].name))
            return fail(why, cap, what, s, PARAMS_FORM, "expected %s, found \"%.*s\"",
                        param[i].name, (int)kn, key);
        p = skip_blanks(key + kn);
        if (*p != ':')
            return fail(why, cap, what, s, PARAMS_FORM, "no ':' after %s", param[i].name);
        val = skip_blanks(p + 1);
        vn = token_len(val);
        if (number(val, vn, &v[i]) != 0)
            return fail(why, cap, what, s, PARAMS_FORM, "%s's value \"%.*s\" is not a number",
                        param[i].name, (int)vn, val);
        if (v[i] < param[i].min || v[i] > param[i].max)
            return fail(why, cap, what, s, PARAMS_FORM,
                        "%s's value \"%.*s\" is out of range [%u, %u]%s", param[i].name, (int)vn,
                        val, param[i].min, param[i].max, param[i].unit);
        p = val + vn;
    }
    p = skip_blanks(p);
    if (*p != '\0')
        return fail(why, cap, what, s, PARAMS_FORM, "unexpected \"%s\" after %s", p, param[2].name);
    c->max_cnt = (uint32_t)v[0];
    c->hold_ms = (uint32_t)v[1];
    c->interval_ms = (uint32_t)v[2];
    return 0;
}

int retry_conf_resolve(const char *env_enable, const char *env_params, const char *cfg_enable,
                       const char *cfg_params, retry_conf_t *out, char *why, size_t cap)
{
    retry_conf_default(out);
    if (retry_enable_parse("HCCL_OP_RETRY_ENABLE", env_enable, out->enable, why, cap) != 0 ||
        retry_params_parse("HCCL_OP_RETRY_PARAMS", env_params, out, why, cap) != 0 ||
        retry_enable_parse("hcclRetryEnable", cfg_enable, out->enable, why, cap) != 0 ||
        retry_params_parse("hcclRetryParams", cfg_params, out, why, cap) != 0)
        return -EINVAL;
    out->set = !all_blank(env_enable) || !all_blank(env_params) || !all_blank(cfg_enable) ||
               !all_blank(cfg_params);
    return 0;
}
