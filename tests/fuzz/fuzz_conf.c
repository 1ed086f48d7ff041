/*
 * The configuration parsers: hccld.conf's QoS sections (qos_policy_load, which the daemon runs
 * at start and on every SIGHUP) and its [daemon] section (daemon_conf_load, at start), both on
 * every input. The input is the file; it lives in a memfd so that nothing is
 * written to disk, and inih opens it by its /proc path as it would open the real file. A policy
 * that loads must be usable: classes, default and rules in range, names terminated.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "log.h"
#include "sched/qos_conf.h"
#include "server/daemon_conf.h"
#include "server/server.h"

static int conf_fd = -1;
static char conf_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_log_level(LOG_DEBUG);
    conf_fd = memfd_create("hccld-fuzz-conf", MFD_CLOEXEC);
    if (conf_fd < 0)
        abort();
    snprintf(conf_path, sizeof(conf_path), "/proc/self/fd/%d", conf_fd);
    return 0;
}

static int terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static void check_policy(const qos_policy_t *p)
{
    static const gid_t gids[] = {0, 100, 1000};
    static const char *const jobs[] = {NULL, "", "bert-large", "nightly-42"};
    int refused;

    if (p->ncls < 1 || p->ncls > QOS_MAX_CLASSES || p->default_cls < 0 ||
        p->default_cls >= p->ncls || p->nrules < 0 || p->nrules > QOS_MAX_RULES ||
        !terminated(p->admin_group, QOS_NAME_MAX))
        abort();
    for (int i = 0; i < p->ncls; i++)
        if (!terminated(p->cls[i].name, QOS_NAME_MAX) || p->cls[i].dscp < -1 ||
            p->cls[i].dscp > 63 || qos_class_find(p, p->cls[i].name) != i)
            abort();
    for (int i = 0; i < p->nrules; i++)
        if (p->rules[i].cls < 0 || p->rules[i].cls >= p->ncls ||
            !terminated(p->rules[i].job, sizeof(p->rules[i].job)))
            abort();
    /* Tenants the rules may name: each must get a class, and grants stay in range. */
    for (size_t j = 0; j < sizeof(jobs) / sizeof(jobs[0]); j++) {
        int c = qos_classify(p, 1000, gids, 3, jobs[j]);
        if (c < 0 || c >= p->ncls)
            abort();
        for (int i = 0; i < p->ncls; i++) {
            int g = qos_grant(p, c, p->cls[i].name, &refused);
            if (g < 0 || g >= p->ncls)
                abort();
        }
    }
}

/* Whatever [daemon] holds, what loads is in the ranges the daemon accepts. */
static void check_daemon(void)
{
    daemon_conf_t d = {
        .workers = 0, .chunk = 1 << 20, .log_level = LOG_WARN, .l0_mode = FORM_L0_AUTO};
    char err[512] = "";

    if (daemon_conf_load(conf_path, &d, err, sizeof(err)) != 0) {
        if (err[0] == '\0' || !terminated(err, sizeof(err)))
            abort();
        return;
    }
    if (d.workers > 256 || d.chunk < 4096 || d.chunk > (64ull << 20) || d.chunk % 1024 != 0 ||
        d.log_level < LOG_ERROR || d.log_level > LOG_DEBUG || d.l0_mode < FORM_L0_AUTO ||
        d.l0_mode > FORM_L0_DAEMON)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static qos_policy_t p; /* 20 KiB: on the stack, ASan would poison it every time */
    char err[256] = "";

    if (ftruncate(conf_fd, 0) != 0 || pwrite(conf_fd, data, size, 0) != (ssize_t)size)
        abort();
    qos_policy_defaults(&p);
    if (qos_policy_load(conf_path, &p, err, sizeof(err)) == 0)
        check_policy(&p);
    else if (err[0] == '\0')
        abort();
    check_daemon();
    return 0;
}
