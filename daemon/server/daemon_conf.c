#include "server/daemon_conf.h"

#include <ini.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "log.h"
#include "server/server.h"

int daemon_l0_mode_parse(const char *s)
{
    if (strcmp(s, "auto") == 0)
        return FORM_L0_AUTO;
    if (strcmp(s, "coop") == 0)
        return FORM_L0_COOP;
    if (strcmp(s, "daemon") == 0)
        return FORM_L0_DAEMON;
    return -1;
}

typedef struct load {
    daemon_conf_t *c;
    char *err;
    size_t errlen;
} load_t;

static int on_ini(void *user, const char *section, const char *name, const char *value)
{
    load_t *x = user;
    uint64_t v;

    if (strcmp(section, "daemon") != 0)
        return 1; /* the QoS sections are qos_conf.c's */
    if (strcmp(name, "workers") == 0 && parse_u64(value, &v) == 0 && v <= 256)
        x->c->workers = v;
    else if (strcmp(name, "chunk_kib") == 0 && parse_u64(value, &v) == 0 && v >= 4 && v <= 65536)
        x->c->chunk = v << 10;
    else if (strcmp(name, "log_level") == 0 && log_level_parse(value) >= 0)
        x->c->log_level = log_level_parse(value);
    else if (strcmp(name, "l0_mode") == 0 && daemon_l0_mode_parse(value) >= 0)
        x->c->l0_mode = daemon_l0_mode_parse(value);
    else if (strcmp(name, "metrics_listen") == 0 && strlen(value) < sizeof(x->c->metrics_listen))
        snprintf(x->c->metrics_listen, sizeof(x->c->metrics_listen), "%s", value);
    else {
        /* The first bad setting is the one reported. */
        if (x->err[0] == '\0')
            snprintf(x->err, x->errlen, "bad or unknown setting %s=%s in [daemon]", name, value);
        return 0;
    }
    return 1;
}

int daemon_conf_load(const char *path, daemon_conf_t *c, char *err, size_t errlen)
{
    char why[200] = "";
    load_t x = {.c = c, .err = why, .errlen = sizeof(why)};
    int rc = ini_parse(path, on_ini, &x);

    if (rc == 0)
        return 0;
    if (rc < 0)
        snprintf(err, errlen, "%s: cannot read it", path);
    else if (why[0] != '\0')
        snprintf(err, errlen, "%s line %d: %s", path, rc, why);
    else
        snprintf(err, errlen, "%s line %d: not INI syntax", path, rc);
    return -1;
}
