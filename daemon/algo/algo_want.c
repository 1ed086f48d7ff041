/* HCCL_ALGO, hcclAlgo and HCCL_ALGORITHM merged into one choice per collective (algo_want.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "algo/algo.h"
#include "algo/algo_want.h"
#include "text.h"

/* The tuning guides' names; anything else is tried as an HCCL_ALGO level-1 name. */
static const struct {
    const char *name;
    int algo;
} shorthands[] = {{"RING", ALGO_RING},
                  {"MESH", ALGO_MESH},
                  {"RHD", ALGO_HDR},
                  {"TREE", ALGO_TREE},
                  {"PAIRWISE", ALGO_PAIRWISE}};

static int copy_field(char *dst, size_t cap, const char *src, const char *what, char *err,
                      size_t errlen)
{
    size_t n = src != NULL ? strlen(src) : 0;

    if (n >= cap) {
        snprintf(err, errlen, "%s is %zu characters long; at most %zu are accepted", what, n,
                 cap - 1);
        return -EINVAL;
    }
    memcpy(dst, n ? src : "", n + 1);
    return 0;
}

int algo_want_set(algo_want_t *w, const char *algo, const char *algorithm, int algo_by_config,
                  int deterministic, char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    w->algo_by_config = algo_by_config != 0;
    w->deterministic = deterministic != 0;
    if (copy_field(w->algo, sizeof(w->algo), algo, algo_by_config ? "hcclAlgo" : "HCCL_ALGO", err,
                   errlen) != 0)
        return -EINVAL;
    return copy_field(w->algorithm, sizeof(w->algorithm), algorithm, "HCCL_ALGORITHM", err, errlen);
}

static int shorthand_parse(const char *s, int *algo, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof(shorthands) / sizeof(shorthands[0]); i++)
        if (strcasecmp(s, shorthands[i].name) == 0) {
            *algo = shorthands[i].algo;
            return 0;
        }
    if ((*algo = algo_from_name(s)) >= 0)
        return 0;
    snprintf(err, errlen,
             "HCCL_ALGORITHM: unknown algorithm '%s' (RING, MESH, RHD, TREE or PAIRWISE)", s);
    return -EINVAL;
}

/* Appends "kind: A by HCCL_ALGO, B by HCCL_ALGORITHM" for the notice. */
static void notice_add(char *notice, size_t cap, size_t *n, int kind, int won, int lost)
{
    if (notice == NULL)
        return;
    text_add(notice, cap, n, "%s%s (%s, not %s)", *n ? ", " : "", algo_env_op_name(kind),
             algo_name(won), algo_name(lost));
}

int algo_want_resolve(const algo_want_t *w, algo_env_t *out, char *err, size_t errlen, char *notice,
                      size_t noticelen)
{
    int short_algo = -1;
    size_t n = 0;

    if (notice != NULL && noticelen > 0)
        notice[0] = '\0';
    if (algo_env_parse_as(w->algo_by_config ? "hcclAlgo" : "HCCL_ALGO", w->algo[0] ? w->algo : NULL,
                          out, err, errlen) != 0)
        return -EINVAL;
    if (w->algorithm[0] != '\0' && shorthand_parse(w->algorithm, &short_algo, err, errlen) != 0)
        return -EINVAL;
    for (int k = 1; k < DESC_KIND_MAX; k++) {
        if (out->level1[k] >= 0 && w->algo_by_config)
            out->src[k] = ALGO_SRC_CONFIG;
        if (short_algo < 0 || algo_env_op_name(k) == NULL || !algo_serves(short_algo, k))
            continue;
        if (out->level1[k] < 0) {
            out->level1[k] = short_algo;
            out->src[k] = ALGO_SRC_HCCL_ALGORITHM;
        } else if (out->level1[k] != short_algo) {
            notice_add(notice, noticelen, &n, k, out->level1[k], short_algo);
        }
    }
    if (n > 0 && notice != NULL)
        text_add(notice, noticelen, &n, ": %s=\"%s\" wins over HCCL_ALGORITHM=%s",
                 w->algo_by_config ? "hcclAlgo" : "HCCL_ALGO", w->algo, w->algorithm);
    return 0;
}
