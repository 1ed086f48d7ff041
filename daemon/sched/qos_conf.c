/* QoS classes and rules from hccld.conf (see qos_conf.h); inih does the parsing. */
#include "sched/qos_conf.h"

#include <fnmatch.h>
#include <grp.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "env.h"
#include "text.h"

void qos_policy_defaults(qos_policy_t *p)
{
    static const qos_class_t defaults[] = {
        {"HIGH", 0, 40000000000ull, 50, 46, 1024},
        {"MEDIUM", 1, 20000000000ull, 100, 18, 2048},
        {"LOW", 2, 10000000000ull, 200, 8, 256},
    };

    memset(p, 0, sizeof(*p));
    memcpy(p->cls, defaults, sizeof(defaults));
    p->ncls = 3;
    p->default_cls = 1;
}

int qos_class_find(const qos_policy_t *p, const char *name)
{
    for (int i = 0; i < p->ncls; i++)
        if (strcasecmp(p->cls[i].name, name) == 0)
            return i;
    return -1;
}

typedef struct load_ctx {
    qos_policy_t *p;
    char *err;
    size_t cap;
    const char *default_name; /* resolved at the end: classes may come after [qos] */
    char default_buf[QOS_NAME_MAX];
    char rule_class[QOS_MAX_RULES][QOS_NAME_MAX];
} load_ctx_t;

static int fail(load_ctx_t *x, const char *section, const char *name, const char *value,
                const char *why)
{
    snprintf(x->err, x->cap, "[%s] %s = %s: %s", section, name, value, why);
    return 0;
}

static int on_class(load_ctx_t *x, const char *section, const char *name, const char *value)
{
    const char *cname = section + strlen("class.");
    qos_policy_t *p = x->p;
    int i = qos_class_find(p, cname);
    uint64_t v;

    if (i < 0) {
        if (p->ncls == QOS_MAX_CLASSES)
            return fail(x, section, name, value, "too many classes");
        if (*cname == '\0' || strlen(cname) >= QOS_NAME_MAX)
            return fail(x, section, name, value, "bad class name");
        i = p->ncls++;
        memset(&p->cls[i], 0, sizeof(p->cls[i]));
        p->cls[i].dscp = -1;
        p->cls[i].chunk_kib = 1024;
        snprintf(p->cls[i].name, sizeof(p->cls[i].name), "%s", cname);
    }
    if (strcmp(name, "priority") == 0 && parse_u64(value, &v) == 0 && v < 256)
        p->cls[i].priority = (uint32_t)v;
    else if (strcmp(name, "max_bw") == 0 && parse_rate(value, &v) == 0)
        p->cls[i].max_bw_bps = v;
    else if (strcmp(name, "max_bw") == 0)
        return fail(x, section, name, value, "a rate needs " RATE_UNITS);
    else if (strcmp(name, "latency_us") == 0 && parse_u64(value, &v) == 0 && v <= 10000000)
        p->cls[i].latency_us = (uint32_t)v;
    else if (strcmp(name, "dscp") == 0 && strcmp(value, "-1") == 0)
        p->cls[i].dscp = -1;
    else if (strcmp(name, "dscp") == 0 && parse_u64(value, &v) == 0 && v <= 63)
        p->cls[i].dscp = (int)v;
    else if (strcmp(name, "chunk_kib") == 0 && parse_u64(value, &v) == 0 && v >= 4 && v <= 65536)
        p->cls[i].chunk_kib = (uint32_t)v;
    else
        return fail(x, section, name, value, "unknown setting or bad value");
    return 1;
}

static int on_rule(load_ctx_t *x, const char *section, const char *name, const char *value)
{
    qos_policy_t *p = x->p;
    qos_rule_t *r;
    uint64_t v;

    if (p->nrules == QOS_MAX_RULES)
        return fail(x, section, name, value, "too many rules");
    if (strlen(value) >= QOS_NAME_MAX)
        return fail(x, section, name, value, "bad class name");
    r = &p->rules[p->nrules];
    memset(r, 0, sizeof(*r));
    if (strncmp(name, "uid.", 4) == 0 && parse_u64(name + 4, &v) == 0 && v <= UINT32_MAX) {
        r->kind = QOS_RULE_UID;
        r->id = (uint32_t)v;
    } else if (strncmp(name, "gid.", 4) == 0 && parse_u64(name + 4, &v) == 0 && v <= UINT32_MAX) {
        r->kind = QOS_RULE_GID;
        r->id = (uint32_t)v;
    } else if (strncmp(name, "group.", 6) == 0) {
        struct group *g = getgrnam(name + 6);
        if (g == NULL)
            return fail(x, section, name, value, "no such group");
        r->kind = QOS_RULE_GID;
        r->id = (uint32_t)g->gr_gid;
    } else if (strncmp(name, "job.", 4) == 0 && name[4] != '\0' &&
               strlen(name + 4) < sizeof(r->job)) {
        r->kind = QOS_RULE_JOB;
        snprintf(r->job, sizeof(r->job), "%s", name + 4);
    } else {
        return fail(x, section, name, value, "a rule is uid.N, gid.N, group.NAME or job.PATTERN");
    }
    snprintf(x->rule_class[p->nrules], QOS_NAME_MAX, "%s", value);
    p->nrules++;
    return 1;
}

static int on_ini(void *user, const char *section, const char *name, const char *value)
{
    load_ctx_t *x = user;

    if (strncmp(section, "class.", 6) == 0)
        return on_class(x, section, name, value);
    if (strcmp(section, "rules") == 0)
        return on_rule(x, section, name, value);
    if (strcmp(section, "qos") != 0)
        return 1; /* [daemon] and others are not ours */
    if (strcmp(name, "default") == 0 && strlen(value) < QOS_NAME_MAX) {
        snprintf(x->default_buf, sizeof(x->default_buf), "%s", value);
        x->default_name = x->default_buf;
    } else if (strcmp(name, "admin_group") == 0 && strlen(value) < QOS_NAME_MAX) {
        snprintf(x->p->admin_group, sizeof(x->p->admin_group), "%s", value);
    } else {
        return fail(x, section, name, value, "unknown setting or bad value");
    }
    return 1;
}

int qos_policy_load(const char *path, qos_policy_t *p, char *err, size_t cap)
{
    load_ctx_t *x = calloc(1, sizeof(*x));
    int rc;

    if (x == NULL) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    x->p = p;
    x->err = err;
    x->cap = cap;
    err[0] = '\0';
    rc = ini_parse(path, on_ini, x);
    if (rc < 0) {
        snprintf(err, cap, "cannot open %s", path);
    } else if (rc > 0) {
        if (err[0] == '\0')
            snprintf(err, cap, "syntax error");
        size_t n = strlen(err);
        text_add(err, cap, &n, " (%s line %d)", path, rc);
    } else {
        for (int i = 0; i < p->nrules && rc == 0; i++)
            if ((p->rules[i].cls = qos_class_find(p, x->rule_class[i])) < 0) {
                snprintf(err, cap, "rule %d names unknown class %s", i + 1, x->rule_class[i]);
                rc = 1;
            }
        if (rc == 0 && x->default_name != NULL &&
            (p->default_cls = qos_class_find(p, x->default_name)) < 0) {
            snprintf(err, cap, "[qos] default names unknown class %s", x->default_name);
            rc = 1;
        }
    }
    free(x);
    return rc == 0 ? 0 : -1;
}

int qos_classify(const qos_policy_t *p, uid_t uid, const gid_t *gids, int ngids, const char *job)
{
    for (int i = 0; i < p->nrules; i++) {
        const qos_rule_t *r = &p->rules[i];
        switch (r->kind) {
        case QOS_RULE_UID:
            if (r->id == (uint32_t)uid)
                return r->cls;
            break;
        case QOS_RULE_GID:
            for (int g = 0; g < ngids; g++)
                if (r->id == (uint32_t)gids[g])
                    return r->cls;
            break;
        default:
            if (job != NULL && fnmatch(r->job, job, 0) == 0)
                return r->cls;
            break;
        }
    }
    return p->default_cls;
}

int qos_grant(const qos_policy_t *p, int ruled, const char *asked, int *refused)
{
    int want = asked != NULL && *asked ? qos_class_find(p, asked) : -1;

    *refused = 0;
    if (asked == NULL || *asked == '\0')
        return ruled;
    if (want >= 0 && p->cls[want].priority >= p->cls[ruled].priority)
        return want;
    *refused = 1;
    return ruled;
}
