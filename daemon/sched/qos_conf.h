/*
 * QoS policy: the classes (priority, bandwidth cap, latency target) and the rules that map a
 * tenant (uid, group, job name) to a class, as hccld.conf states them:
 *
 *   [class.HIGH]              ; one section per class; HIGH, MEDIUM and LOW exist by default
 *   priority = 0              ; 0 first
 *   max_bw = 40Gbit           ; bit/s with K/M/G/T prefixes ("bit", "bps", "/s" optional),
 *                             ; or bytes/s as "5GB/s"; 0 or "none": no cap
 *   latency_us = 50
 *   dscp = 46                 ; marks its traffic between daemons (IP_TOS); defaults: HIGH 46
 *                             ; (EF), MEDIUM 18 (AF21), LOW 8 (CS1); -1: unmarked
 *   chunk_kib = 1024          ; piece size of its comms spanning daemons (4..65536): a round on
 *                             ; the wire moves one piece's share per peer, so a smaller piece
 *                             ; for a lower class bounds how long a higher one waits behind it;
 *                             ; defaults: HIGH and MEDIUM 1024, LOW 256; comms formed later
 *
 *   [qos]
 *   default = MEDIUM          ; class of a tenant no rule names
 *   admin_group = hccl-admin  ; who may change QoS with hccld-ctl (besides root)
 *
 *   [rules]                   ; first match wins, in file order
 *   uid.1000 = HIGH
 *   group.research = MEDIUM   ; a group name, or gid.NUMBER
 *   job.bert-* = LOW          ; HCCL_JOB_NAME, shell wildcards allowed (no ":" or "=")
 *
 * Parsing is inih's; this file only gives the values meaning and checks them.
 */
#ifndef HCCLD_SCHED_QOS_CONF_H
#define HCCLD_SCHED_QOS_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define QOS_MAX_CLASSES 8
#define QOS_NAME_MAX 32
#define QOS_MAX_RULES 256

typedef struct qos_class {
    char name[QOS_NAME_MAX];
    uint32_t priority;
    uint64_t max_bw_bps; /* bits per second; 0: no cap */
    uint32_t latency_us; /* target; lower classes wait this long after each of its ops */
    int dscp;            /* DSCP of its traffic between daemons (0..63), -1: unmarked */
    uint32_t chunk_kib;  /* piece size of its comms spanning daemons, decided at formation */
} qos_class_t;

enum qos_rule_kind { QOS_RULE_UID, QOS_RULE_GID, QOS_RULE_JOB };

typedef struct qos_rule {
    int kind;
    uint32_t id;                /* uid or gid */
    char job[QOS_NAME_MAX * 2]; /* pattern, for QOS_RULE_JOB */
    int cls;                    /* index into the policy's classes */
} qos_rule_t;

typedef struct qos_policy {
    qos_class_t cls[QOS_MAX_CLASSES];
    int ncls;
    int default_cls;
    qos_rule_t rules[QOS_MAX_RULES];
    int nrules;
    char admin_group[QOS_NAME_MAX];
} qos_policy_t;

/* HIGH 0 / 40 Gbit/s / 50 us, MEDIUM 1 / 20 / 100, LOW 2 / 10 / 200; default MEDIUM.
 * Pieces: HIGH and MEDIUM 1 MiB, LOW 256 KiB. */
void qos_policy_defaults(qos_policy_t *p);
/* Reads the [class.*], [qos] and [rules] sections of an INI file over the defaults (other
 * sections are ignored). 0, or -1 with a message naming the line in err. */
int qos_policy_load(const char *path, qos_policy_t *p, char *err, size_t cap);
/* The class index of a name (case-insensitive), or -1. */
int qos_class_find(const qos_policy_t *p, const char *name);
/* The class the rules give this tenant (the default if none matches). gids: its groups. */
int qos_classify(const qos_policy_t *p, uid_t uid, const gid_t *gids, int ngids, const char *job);
/*
 * The class a client gets when it asks for `asked` (HCCL_QOS_CLASS; NULL or "" for none): the
 * asked one if the rules' class for this tenant is at least as low in priority (a larger or
 * equal priority number), else the rules' class, with *refused set.
 */
int qos_grant(const qos_policy_t *p, int ruled, const char *asked, int *refused);

#endif
