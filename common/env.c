#include "env.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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
