/* The HCCL_ALGO parser (syntax in algo_env.h). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "algo/algo.h"
#include "algo/algo_env.h"
#include "text.h"

#define NOT_SET (-2) /* an item without level1 leaves its collective as it was */

static const char *const op_names[DESC_KIND_MAX] = {
    [DESC_ALLREDUCE] = "allreduce", [DESC_BROADCAST] = "broadcast",
    [DESC_ALLGATHER] = "allgather", [DESC_REDUCE_SCATTER] = "reducescatter",
    [DESC_ALLTOALL] = "alltoall",   [DESC_REDUCE] = "reduce",
    [DESC_SCATTER] = "scatter",     [DESC_BARRIER] = "barrier",
};

/* HCCL's level-1 algorithms that hcclD does not have, and the one that runs in their place
 * (algo_env_t.instead says so): NHR for NHR_V1 (its older version); H-D_R for AHC; ring, which
 * pipelines its pieces, for pipeline. */
static const struct {
    const char *name;
    int as;
} hccl_only[] = {
    {"NHR_V1", ALGO_NHR},
    {"AHC", ALGO_HDR},
    {"pipeline", ALGO_RING},
};

typedef struct parser {
    const char *name; /* the setting's name, first in every message */
    char *err;
    size_t errlen;
    algo_env_t *out; /* its instead text */
} parser_t;

static int perr(parser_t *p, const char *fmt, ...)
{
    va_list ap;
    size_t n = 0;

    if (p->err != NULL) {
        text_add(p->err, p->errlen, &n, "%s: ", p->name);
        va_start(ap, fmt);
        text_vadd(p->err, p->errlen, &n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

const char *algo_env_op_name(int kind)
{
    return kind > 0 && kind < DESC_KIND_MAX ? op_names[kind] : NULL;
}

static int op_from_name(const char *s)
{
    for (int k = 1; k < DESC_KIND_MAX; k++)
        if (op_names[k] != NULL && strcasecmp(s, op_names[k]) == 0)
            return k;
    return -1;
}

/* Trims blanks in place at both ends. */
static char *trim(char *s)
{
    char *e;

    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Cuts s at the first `sep`: returns the rest after it, or NULL if there is none. */
static char *cut(char *s, char sep)
{
    char *at = strchr(s, sep);

    if (at == NULL)
        return NULL;
    *at = '\0';
    return at + 1;
}

static int level0_value(parser_t *p, const char *v)
{
    if (strcasecmp(v, "NA") == 0 || strcasecmp(v, "ESS") == 0 || strcasecmp(v, "fullmesh") == 0)
        return 0;
    return perr(p, "unknown level0 algorithm '%s' (NA, ESS or fullmesh)", v);
}

static int level1_value(parser_t *p, const char *v, int *algo)
{
    if (strcasecmp(v, "NA") == 0) {
        *algo = -1;
        return 0;
    }
    *algo = algo_from_name(v);
    if (*algo >= 0)
        return 0;
    for (size_t i = 0; i < sizeof(hccl_only) / sizeof(hccl_only[0]); i++)
        if (strcasecmp(v, hccl_only[i].name) == 0) {
            char *t = p->out->instead, said[24];
            size_t n = strlen(t);
            *algo = hccl_only[i].as;
            snprintf(said, sizeof(said), "%s as ", hccl_only[i].name);
            if (strstr(t, said) == NULL)
                text_add(t, sizeof(p->out->instead), &n, "%s%s as %s", n ? ", " : "",
                         hccl_only[i].name, algo_name(*algo));
            return 0;
        }
    return perr(p,
                "unknown level1 algorithm '%s' (ring, H-D_R, fullmesh, tree, "
                "pairwise, NB, NHR or NA)",
                v);
}

/* One "levelN:name" setting; level1's algorithm goes to *algo. */
static int parse_level(parser_t *p, char *tok, int *seen, int *algo)
{
    char *val = cut(tok, ':'), *key = trim(tok);
    int lvl;

    if (val == NULL)
        return perr(p, "'%s' is not levelN:algorithm", key);
    val = trim(val);
    if (strcasecmp(key, "level0") == 0)
        lvl = 0;
    else if (strcasecmp(key, "level1") == 0)
        lvl = 1;
    else
        return perr(p, "unknown level '%s' (level0 or level1)", key);
    if (seen[lvl]++)
        return perr(p, "'%s' given twice in one item", key);
    if (*val == '\0')
        return perr(p, "no algorithm after '%s:'", key);
    return lvl == 0 ? level0_value(p, val) : level1_value(p, val, algo);
}

/* "level0:x;level1:y" (either part optional, at least one); *algo stays NOT_SET without
 * level1. */
static int parse_levels(parser_t *p, char *s, int *algo)
{
    int seen[2] = {0, 0}, rc;

    *algo = NOT_SET;
    while (s != NULL) {
        char *rest = cut(s, ';'), *tok = trim(s);
        if (*tok != '\0' && (rc = parse_level(p, tok, seen, algo)) != 0)
            return rc;
        s = rest;
    }
    if (seen[0] + seen[1] == 0)
        return perr(p, "no levelN:algorithm setting");
    return 0;
}

/* The global setting: each collective the algorithm serves. */
static void apply_global(algo_env_t *env, int algo)
{
    for (int k = 1; k < DESC_KIND_MAX; k++)
        if (op_names[k] != NULL && (algo < 0 || algo_serves(algo, k)))
            env->level1[k] = algo;
}

static int parse_item(parser_t *p, char *item, algo_env_t *per_op, int *global, int *nglobal)
{
    char *levels = strchr(item, '=') ? cut(item, '=') : NULL;
    int algo, kind = -1, rc;

    if (levels != NULL) {
        char *op = trim(item);
        if ((kind = op_from_name(op)) < 0)
            return perr(p, "unknown collective '%s'", op);
        if (per_op->level1[kind] != NOT_SET)
            return perr(p, "collective '%s' given twice", op);
    } else {
        levels = item;
    }
    if ((rc = parse_levels(p, levels, &algo)) != 0)
        return rc;
    if (kind < 0) {
        if ((*nglobal)++)
            return perr(p, "more than one setting for every collective");
        *global = algo;
        return 0;
    }
    if (algo >= 0 && !algo_serves(algo, kind))
        return perr(p, "'%s' cannot run %s", algo_name(algo), op_names[kind]);
    per_op->level1[kind] = algo == NOT_SET ? -1 : algo;
    return 0;
}

static int parse_all(parser_t *p, char *s, algo_env_t *out)
{
    algo_env_t per_op;
    int global = NOT_SET, nglobal = 0, rc;

    for (int k = 0; k < DESC_KIND_MAX; k++)
        per_op.level1[k] = NOT_SET;
    while (s != NULL) {
        char *rest = cut(s, '/'), *item = trim(s);
        if (*item != '\0' && (rc = parse_item(p, item, &per_op, &global, &nglobal)) != 0)
            return rc;
        s = rest;
    }
    if (global != NOT_SET)
        apply_global(out, global);
    for (int k = 0; k < DESC_KIND_MAX; k++)
        if (per_op.level1[k] != NOT_SET)
            out->level1[k] = per_op.level1[k];
    return 0;
}

int algo_env_parse(const char *s, algo_env_t *out, char *err, size_t errlen)
{
    return algo_env_parse_as("HCCL_ALGO", s, out, err, errlen);
}

int algo_env_parse_as(const char *name, const char *s, algo_env_t *out, char *err, size_t errlen)
{
    parser_t p = {name, err, errlen, out};
    char *copy;
    int rc;

    memset(out, 0, sizeof(*out)); /* src: ALGO_SRC_MODEL; padding too, for memcmp */
    for (int k = 0; k < DESC_KIND_MAX; k++)
        out->level1[k] = -1;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (s == NULL)
        return 0;
    if ((copy = strdup(s)) == NULL)
        return perr(&p, "out of memory");
    rc = parse_all(&p, copy, out);
    free(copy);
    for (int k = 0; k < DESC_KIND_MAX; k++) {
        if (rc != 0)
            out->level1[k] = -1;
        out->src[k] = out->level1[k] >= 0 ? ALGO_SRC_HCCL_ALGO : ALGO_SRC_MODEL;
    }
    return rc;
}
