/*
 * The rank table parser (RANK_TABLE_FILE, HcclCommInitClusterInfo): JSON written by hand or by
 * another tool. A table it accepts must be consistent: every rank on a listed server, server
 * addresses normalized, every server holding at least one rank (any number, any ids).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hccl/hccl.h"
#include "ranktable.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* jansson seeds its hash from /dev/urandom; a fixed seed keeps runs repeatable. */
    json_object_seed(1);
    return 0;
}

static void check_table(const ranktable_t *rt)
{
    char again[RT_ADDR_MAX];
    uint32_t *held;

    if (rt->nranks == 0 || rt->nranks > RT_MAX_RANKS || rt->nservers == 0 ||
        rt->nservers > rt->nranks)
        abort();
    for (uint32_t i = 0; i < rt->nservers; i++) {
        const char *s = rt->servers[i];
        if (memchr(s, '\0', RT_ADDR_MAX) == NULL ||
            hostport_normalize(s, RT_DEFAULT_PORT, again, sizeof(again)) != 0 ||
            strcmp(again, s) != 0)
            abort();
    }
    if ((held = calloc(rt->nservers, sizeof(*held))) == NULL)
        abort();
    for (uint32_t r = 0; r < rt->nranks; r++) {
        if (rt->rank_server[r] >= rt->nservers)
            abort();
        held[rt->rank_server[r]]++;
    }
    for (uint32_t i = 0; i < rt->nservers; i++)
        if (held[i] == 0)
            abort();
    free(held);
}

/* Short inputs double as a server_id, which the parser hands to hostport_normalize. */
static void check_hostport(const uint8_t *data, size_t size)
{
    char s[64], out[RT_ADDR_MAX], again[RT_ADDR_MAX];

    if (size >= sizeof(s))
        return;
    memcpy(s, data, size);
    s[size] = '\0';
    if (hostport_normalize(s, RT_DEFAULT_PORT, out, sizeof(out)) == 0 &&
        (hostport_normalize(out, RT_DEFAULT_PORT, again, sizeof(again)) != 0 ||
         strcmp(out, again) != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ranktable_t rt;
    char err[256] = "";
    int rc = ranktable_parse((const char *)data, size, &rt, err, sizeof(err));

    if (rc == HCCL_SUCCESS)
        check_table(&rt);
    else if (err[0] == '\0' || rt.servers != NULL || rt.rank_server != NULL)
        abort();
    ranktable_free(&rt);
    check_hostport(data, size);
    return 0;
}
