/*
 * hccld.conf's [daemon] section: the settings that the command line also has (workers,
 * chunk_kib, log_level, l0_mode, metrics_listen). The QoS sections are qos_conf.h's; each reader
 * ignores the other's sections.
 */
#ifndef HCCLD_SERVER_DAEMON_CONF_H
#define HCCLD_SERVER_DAEMON_CONF_H

#include <stddef.h>
#include <stdint.h>

typedef struct daemon_conf {
    uint64_t workers;        /* executor threads, 0: online CPUs */
    uint64_t chunk;          /* bytes */
    int log_level;           /* enum log_level */
    int l0_mode;             /* FORM_L0_AUTO, FORM_L0_COOP or FORM_L0_DAEMON (server.h) */
    char metrics_listen[64]; /* "IP:PORT" of the Prometheus endpoint; empty: off */
} daemon_conf_t;

/* auto|coop|daemon -> L0_*, or -1. */
int daemon_l0_mode_parse(const char *s);

/* Reads path's [daemon] section over what c holds. 0, or -1 with err naming the file and,
 * for a bad setting, its line, name and value; c may then be partly updated. */
int daemon_conf_load(const char *path, daemon_conf_t *c, char *err, size_t errlen);

#endif
