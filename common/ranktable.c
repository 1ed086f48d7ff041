#include "ranktable.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hccl/hccl.h"

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return HCCL_E_PARA;
}

int hostport_normalize(const char *s, unsigned defport, char *out, size_t cap)
{
    const char *colon = strchr(s, ':');
    size_t hl = colon != NULL ? (size_t)(colon - s) : strlen(s);
    char host[INET_ADDRSTRLEN];
    unsigned long port = defport;
    struct in_addr a;
    char *end;

    if (hl == 0 || hl >= sizeof(host))
        return -EINVAL;
    memcpy(host, s, hl);
    host[hl] = '\0';
    if (inet_pton(AF_INET, host, &a) != 1)
        return -EINVAL;
    if (colon != NULL) {
        if (colon[1] < '0' || colon[1] > '9')
            return -EINVAL;
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (errno != 0 || *end != '\0')
            return -EINVAL;
    }
    if (port == 0 || port > 65535)
        return -EINVAL;
    inet_ntop(AF_INET, &a, host, sizeof(host));
    if ((size_t)snprintf(out, cap, "%s:%lu", host, port) >= cap)
        return -EINVAL;
    return 0;
}

/* A non-negative integer given as a decimal string (HCCL's way) or a JSON integer. */
static int get_uint(const json_t *v, uint32_t *out)
{
    unsigned long long x = 0;

    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 || i > UINT32_MAX)
            return -EINVAL;
        *out = (uint32_t)i;
        return 0;
    }
    if (!json_is_string(v))
        return -EINVAL;
    const char *s = json_string_value(v);
    size_t n = strlen(s);
    if (n == 0 || n > 10)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        x = x * 10 + (unsigned)(s[i] - '0');
    }
    if (x > UINT32_MAX)
        return -EINVAL;
    *out = (uint32_t)x;
    return 0;
}

static int check_header(const json_t *root, size_t *nservers, char *err, size_t cap)
{
    const json_t *ver = json_object_get(root, "version"), *st = json_object_get(root, "status");
    const json_t *list = json_object_get(root, "server_list");
    uint32_t count;

    if (!(json_is_string(ver) && strcmp(json_string_value(ver), "1.0") == 0) &&
        !(json_is_real(ver) && json_real_value(ver) == 1.0))
        return fail(err, cap, "\"version\" must be \"1.0\"");
    if (st != NULL && !(json_is_string(st) && strcmp(json_string_value(st), "completed") == 0))
        return fail(err, cap, "\"status\" is not \"completed\" (the table is not final)");
    if (!json_is_array(list) || json_array_size(list) == 0)
        return fail(err, cap, "\"server_list\" must be a non-empty array");
    if (get_uint(json_object_get(root, "server_count"), &count) != 0)
        return fail(err, cap, "\"server_count\" is missing or not a non-negative integer");
    if (count != json_array_size(list))
        return fail(err, cap, "\"server_count\" is %u but \"server_list\" has %zu servers", count,
                    json_array_size(list));
    *nservers = json_array_size(list);
    return HCCL_SUCCESS;
}

/* Devices of every server; each server must have a non-empty "device" array. */
static int count_devices(const json_t *list, uint32_t *n_p, char *err, size_t cap)
{
    size_t n = 0, i;
    const json_t *srv;

    json_array_foreach(list, i, srv)
    {
        const json_t *dev = json_object_get(srv, "device");
        if (!json_is_object(srv))
            return fail(err, cap, "server %zu of \"server_list\" is not an object", i);
        if (!json_is_array(dev) || json_array_size(dev) == 0)
            return fail(err, cap, "server %zu has no \"device\" array (or an empty one)", i);
        n += json_array_size(dev);
        if (n > RT_MAX_RANKS)
            return fail(err, cap, "more than %d devices", RT_MAX_RANKS);
    }
    *n_p = (uint32_t)n;
    return HCCL_SUCCESS;
}

static int server_id(const json_t *srv, size_t i, ranktable_t *rt, char *err, size_t cap)
{
    const json_t *id = json_object_get(srv, "server_id");

    if (!json_is_string(id) || hostport_normalize(json_string_value(id), RT_DEFAULT_PORT,
                                                  rt->servers[i], sizeof(rt->servers[i])) != 0)
        return fail(err, cap, "server %zu: \"server_id\" must be \"IPv4\" or \"IPv4:PORT\"", i);
    for (size_t k = 0; k < i; k++)
        if (strcmp(rt->servers[k], rt->servers[i]) == 0)
            return fail(err, cap, "server %s is listed twice", rt->servers[i]);
    return HCCL_SUCCESS;
}

static int server_devices(const json_t *srv, uint32_t si, ranktable_t *rt, char *err, size_t cap)
{
    const json_t *dev = json_object_get(srv, "device"), *d;
    const char *name = rt->servers[si];
    size_t k;

    json_array_foreach(dev, k, d)
    {
        uint32_t rank, did, other;
        const json_t *dv = json_object_get(d, "device_id");
        if (!json_is_object(d))
            return fail(err, cap, "server %s: device %zu is not an object", name, k);
        if (get_uint(json_object_get(d, "rank_id"), &rank) != 0)
            return fail(err, cap, "server %s: device %zu has no valid \"rank_id\"", name, k);
        if (dv != NULL && get_uint(dv, &did) != 0)
            return fail(err, cap, "server %s: device %zu has an invalid \"device_id\"", name, k);
        for (size_t q = 0; dv != NULL && q < k; q++)
            if (get_uint(json_object_get(json_array_get(dev, q), "device_id"), &other) == 0 &&
                other == did)
                return fail(err, cap, "server %s: device_id %u is listed twice", name, did);
        if (rank >= rt->nranks)
            return fail(err, cap, "server %s: rank_id %u is out of range (%u devices: 0..%u)", name,
                        rank, rt->nranks, rt->nranks - 1);
        if (rt->rank_server[rank] != UINT32_MAX)
            return fail(err, cap, "rank_id %u appears twice (servers %s and %s)", rank,
                        rt->servers[rt->rank_server[rank]], name);
        rt->rank_server[rank] = si;
    }
    return HCCL_SUCCESS;
}

int ranktable_parse(const char *text, size_t len, ranktable_t *rt, char *err, size_t cap)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), *list, *srv;
    size_t nservers = 0, i;
    int rc;

    memset(rt, 0, sizeof(*rt));
    if (root == NULL)
        return fail(err, cap, "not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                    jerr.column);
    if (!json_is_object(root)) {
        rc = fail(err, cap, "the top level is not a JSON object");
        goto out;
    }
    list = json_object_get(root, "server_list");
    if ((rc = check_header(root, &nservers, err, cap)) != HCCL_SUCCESS ||
        (rc = count_devices(list, &rt->nranks, err, cap)) != HCCL_SUCCESS)
        goto out;
    rt->nservers = (uint32_t)nservers;
    rt->servers = calloc(nservers, sizeof(*rt->servers));
    rt->rank_server = malloc(rt->nranks * sizeof(*rt->rank_server));
    if (rt->servers == NULL || rt->rank_server == NULL) {
        snprintf(err, cap, "out of memory");
        rc = HCCL_E_MEMORY;
        goto out;
    }
    memset(rt->rank_server, 0xff, rt->nranks * sizeof(*rt->rank_server));
    json_array_foreach(list, i, srv)
    {
        if ((rc = server_id(srv, i, rt, err, cap)) != HCCL_SUCCESS ||
            (rc = server_devices(srv, (uint32_t)i, rt, err, cap)) != HCCL_SUCCESS)
            goto out;
    }
out:
    json_decref(root);
    if (rc != HCCL_SUCCESS)
        ranktable_free(rt);
    return rc;
}

void ranktable_free(ranktable_t *rt)
{
    free(rt->servers);
    free(rt->rank_server);
    rt->servers = NULL;
    rt->rank_server = NULL;
}
