#include "env.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "text.h"

int parse_u64(const char *s, uint64_t *val_p)
{
    char *end;
    unsigned long long v;

    if (s == NULL || !isdigit((unsigned char)s[0]))
        return -EINVAL;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -EINVAL;
    *val_p = v;
    return 0;
}

int parse_size(const char *s, uint64_t *val_p)
{
    char *end;
    unsigned long long v;
    uint64_t mult = 1;

    if (s == NULL || !isdigit((unsigned char)s[0]))
        return -EINVAL;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return -EINVAL;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K':
        mult = 1ull << 10;
        end++;
        break;
    case 'M':
        mult = 1ull << 20;
        end++;
        break;
    case 'G':
        mult = 1ull << 30;
        end++;
        break;
    default: return -EINVAL;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || __builtin_mul_overflow((uint64_t)v, mult, val_p))
        return -EINVAL;
    return 0;
}

int arg_size(const char *s, size_t *out)
{
    uint64_t v;

    if (parse_size(s, &v) != 0 || v > SIZE_MAX)
        return 0;
    *out = (size_t)v;
    return 1;
}

int arg_int(const char *s, int min, int max, int *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return 0;
    *out = (int)v;
    return 1;
}

int arg_factor(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || !(v > 1.0))
        return 0;
    *out = v;
    return 1;
}

int env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *val_p)
{
    const char *s = getenv(name);
    uint64_t v;

    if (s == NULL || *s == '\0') {
        *val_p = def;
        return 0;
    }
    if (parse_u64(s, &v) != 0 || v < min || v > max) {
        ERR("INIT", "%s=\"%s\" is invalid: expected an integer in [%llu, %llu]", name, s,
            (unsigned long long)min, (unsigned long long)max);
        return -EINVAL;
    }
    *val_p = v;
    return 0;
}

int mb_check(const char *what, const char *s, uint64_t max, uint64_t *mb_p, char *why, size_t cap)
{
    uint64_t v, size;
    size_t n = 0;

    text_add(why, cap, &n, "%s=\"%s\" is invalid: the unit is MB, an integer in [1, %llu]", what, s,
             (unsigned long long)max);
    if (parse_u64(s, &v) == 0 && v >= 1 && v <= max) {
        *mb_p = v;
        return 0;
    }
    if (parse_u64(s, &v) != 0 && parse_size(s, &size) == 0 && size >= (1u << 20))
        text_add(why, cap, &n, "; write the number of MB alone, e.g. %s=%llu", what,
                 (unsigned long long)((size + (1u << 20) - 1) >> 20));
    else if (parse_u64(s, &v) == 0 && v > max && v >= (1u << 20) &&
             (v + (1u << 20) - 1) >> 20 <= max)
        text_add(why, cap, &n, "; %llu looks like a byte count: that is %s%llu MB, %s=%llu",
                 (unsigned long long)v, v % (1u << 20) ? "about " : "",
                 (unsigned long long)((v + (1u << 20) - 1) >> 20), what,
                 (unsigned long long)((v + (1u << 20) - 1) >> 20));
    return -EINVAL;
}

int env_mb(const char *name, uint64_t def, uint64_t max, uint64_t *mb_p)
{
    const char *s = getenv(name);
    char why[256];

    if (s == NULL || *s == '\0') {
        *mb_p = def;
        return 0;
    }
    if (mb_check(name, s, max, mb_p, why, sizeof(why)) == 0)
        return 0;
    ERR("INIT", "%s", why);
    return -EINVAL;
}

void hex_encode(const void *data, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = data;

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

long hex_decode(const char *hex, void *out, size_t cap)
{
    size_t len = strlen(hex);
    unsigned char *p = out;

    if (len % 2 != 0 || len / 2 > cap)
        return -EINVAL;
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        p[i] = (unsigned char)(hi << 4 | lo);
    }
    return (long)(len / 2);
}

int parse_rate(const char *s, uint64_t *bps_p)
{
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"bit", 1},    {"bps", 1},  {"K", 1e3},    {"Kbit", 1e3}, {"M", 1e6},
                 {"Mbit", 1e6}, {"G", 1e9},  {"Gbit", 1e9}, {"T", 1e12},   {"Tbit", 1e12},
                 {"B", 8},      {"KB", 8e3}, {"MB", 8e6},   {"GB", 8e9},   {"TB", 8e12}};
    char unit[16];
    double v;
    char *end;
    size_t n;

    if (s == NULL)
        return -1;
    if (strcasecmp(s, "none") == 0) {
        *bps_p = 0;
        return 0;
    }
    v = strtod(s, &end);
    if (end == s || !(v >= 0) || v > 1e15)
        return -1;
    n = strlen(end);
    if (n >= 2 && strcmp(end + n - 2, "/s") == 0)
        n -= 2;
    if (n >= sizeof(unit))
        return -1;
    memcpy(unit, end, n);
    unit[n] = '\0';
    if (n == 0 && v == 0) {
        *bps_p = 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(unit, units[i].unit) == 0) {
            /* 1 Pbit/s is beyond any link; above it a rate is a typo, not "no cap". */
            if (v * units[i].mult > 1e15)
                return -1;
            *bps_p = (uint64_t)llround(v * units[i].mult);
            return 0;
        }
    return -1;
}
