/*
 * QoS in the control plane: which class each client gets (rules, then HCCL_QOS_CLASS if the
 * rules allow it), and hccld-ctl qos list / set / assign. Changes apply at once to every
 * client; a reload (SIGHUP) goes back to what the config file says.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "hccl/hccl.h"
#include "log.h"
#include "server/events.h"
#include "server/server.h"

#define QOS_MAX_GROUPS 64

/* The uid's groups (its primary gid and supplementary ones), as the passwd and group
 * databases say; just gid when the user is not in them (containers). */
static int user_groups(uid_t uid, gid_t gid, gid_t *gids, int max)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    int n = max;

    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || res == NULL ||
        getgrouplist(pw.pw_name, gid, gids, &n) < 0) {
        gids[0] = gid;
        return 1;
    }
    return n;
}

int qos_session_class(server_t *srv, session_t *s)
{
    gid_t gids[QOS_MAX_GROUPS];
    int ng = user_groups(s->fc.uid, s->gid, gids, QOS_MAX_GROUPS), refused;
    int ruled = qos_classify(&srv->qos, s->fc.uid, gids, ng, s->fc.job_name);
    int cls = qos_grant(&srv->qos, ruled, s->qos_asked, &refused);

    s->fc.ruled_class = ruled;
    if (refused)
        WARN("QOS", "client pid %d uid %d job '%s' asked for class %s; the rules give it %s",
             (int)s->fc.pid, (int)s->fc.uid, s->fc.job_name, s->qos_asked,
             srv->qos.cls[ruled].name);
    return cls;
}

void qos_apply(server_t *srv)
{
    for (int i = 0; i < srv->qos.ncls; i++)
        engine_set_class(srv->eng, i, srv->qos.cls[i].priority, srv->qos.cls[i].max_bw_bps,
                         srv->qos.cls[i].dscp, srv->qos.cls[i].latency_us);
}

void qos_reclassify(server_t *srv)
{
    for (session_t *s = srv->sessions; s != NULL; s = s->next)
        if (s->kind == SESSION_CLIENT && s->state == SESSION_READY) {
            int cls = qos_session_class(srv, s);
            if (cls != s->fc.qos_class)
                INFO("QOS", "client pid %d uid %d job '%s': class %s", (int)s->fc.pid,
                     (int)s->fc.uid, s->fc.job_name, srv->qos.cls[cls].name);
            s->fc.qos_class = cls;
        }
}

/* Root, or a member of the config's admin_group. */
static int may_change(server_t *srv, session_t *s)
{
    gid_t gids[QOS_MAX_GROUPS];
    struct group gr, *res = NULL;
    char buf[4096];

    if (s->fc.uid == 0)
        return 1;
    if (srv->qos.admin_group[0] == '\0' ||
        getgrnam_r(srv->qos.admin_group, &gr, buf, sizeof(buf), &res) != 0 || res == NULL)
        return 0;
    int ng = user_groups(s->fc.uid, s->gid, gids, QOS_MAX_GROUPS);
    for (int i = 0; i < ng; i++)
        if (gids[i] == gr.gr_gid)
            return 1;
    return 0;
}

/* A rule in front of the others, so that it wins. */
static const char *assign(qos_policy_t *p, const Hccld__QosReq *q, int cls)
{
    qos_rule_t r = {.cls = cls};

    if (q->has_uid) {
        r.kind = QOS_RULE_UID;
        r.id = q->uid;
    } else if (q->job[0] != '\0' && strlen(q->job) < sizeof(r.job)) {
        r.kind = QOS_RULE_JOB;
        snprintf(r.job, sizeof(r.job), "%s", q->job);
    } else {
        return "assign needs --job NAME or --uid UID";
    }
    if (p->nrules == QOS_MAX_RULES)
        return "too many rules";
    memmove(&p->rules[1], &p->rules[0], (size_t)p->nrules * sizeof(p->rules[0]));
    p->rules[0] = r;
    p->nrules++;
    return NULL;
}

/* Applies a set or an assign; NULL, or why not. */
static const char *change(server_t *srv, session_t *s, const Hccld__QosReq *q)
{
    int cls = qos_class_find(&srv->qos, q->cls);

    if (!may_change(srv, s))
        return "permission denied: root or the admin group only";
    if (cls < 0)
        return "no such class";
    if (q->op == HCCLD__QOS_REQ__OP__ASSIGN)
        return assign(&srv->qos, q, cls);
    if (!q->has_max_bw && !q->has_priority)
        return "set needs --max-bw or --priority";
    if (q->has_priority && q->priority > 255)
        return "priority out of range (0..255)";
    if (q->has_max_bw)
        srv->qos.cls[cls].max_bw_bps = q->max_bw_bps;
    if (q->has_priority)
        srv->qos.cls[cls].priority = q->priority;
    return NULL;
}

void qos_list_fill(server_t *srv, Hccld__QosResp *r, Hccld__QosClass *cls, Hccld__QosClass **clsp)
{
    for (int i = 0; i < srv->qos.ncls; i++) {
        const qos_class_t *c = &srv->qos.cls[i];
        hccld__qos_class__init(&cls[i]);
        cls[i].name = (char *)c->name;
        cls[i].priority = c->priority;
        cls[i].max_bw_bps = c->max_bw_bps;
        cls[i].latency_us = c->latency_us;
        cls[i].chunk_kib = c->chunk_kib;
        engine_class_stats_t st;
        engine_class_stats(srv->eng, i, &st);
        cls[i].sent_bytes = st.sent_bytes;
        cls[i].rate_bps = st.rate_Bps * 8;
        cls[i].waiting = st.waiting;
        cls[i].dscp = c->dscp;
        for (session_t *x = srv->sessions; x != NULL; x = x->next)
            cls[i].clients +=
                x->kind == SESSION_CLIENT && x->state == SESSION_READY && x->fc.qos_class == i;
        clsp[i] = &cls[i];
    }
    r->n_classes = (size_t)srv->qos.ncls;
    r->classes = clsp;
    r->default_class = srv->qos.cls[srv->qos.default_cls].name;
}

void qos_admin_handle(server_t *srv, session_t *s, uint64_t req_id, const Hccld__QosReq *q)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__QosResp r = HCCLD__QOS_RESP__INIT;
    Hccld__QosClass cls[QOS_MAX_CLASSES], *clsp[QOS_MAX_CLASSES];
    const char *why = NULL;

    if (q->op != HCCLD__QOS_REQ__OP__LIST) {
        why = change(srv, s, q);
        if (why != NULL)
            WARN("QOS", "admin pid %d uid %d: qos %s %s refused: %s", (int)s->fc.pid,
                 (int)s->fc.uid, q->op == HCCLD__QOS_REQ__OP__SET ? "set" : "assign", q->cls, why);
        else {
            INFO("QOS", "admin pid %d uid %d changed class %s", (int)s->fc.pid, (int)s->fc.uid,
                 q->cls);
            events_say(srv, "qos_changed", "admin pid %d uid %d: qos %s %s", (int)s->fc.pid,
                       (int)s->fc.uid, q->op == HCCLD__QOS_REQ__OP__SET ? "set" : "assign", q->cls);
            qos_reclassify(srv);
            qos_apply(srv);
        }
    }
    qos_list_fill(srv, &r, cls, clsp);
    r.result = why == NULL ? HCCL_SUCCESS : HCCL_E_PARA;
    r.message = (char *)(why ? why : "");
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_QOS_RESP;
    m.qos_resp = &r;
    session_send(s, &m);
}
