/*
 * hccld as a systemd service: watchdog pings from the control loop (only while the data-path
 * engine is alive too), and SIGHUP re-reading the QoS policy of the config file without
 * dropping a client (and reopening --log-file). Start-up (READY=1) and shutdown (STOPPING=1) live
 * in server.c.
 */
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "futex.h"
#include "log.h"
#include "server/events.h"
#include "server/server.h"

/* The engine wakes at least every second when idle; three missed seconds mean it is stuck. */
#define ENGINE_STUCK_NS (3ull * 1000000000)

static void on_watchdog(uv_timer_t *t)
{
    server_t *srv = t->data;
    uint64_t beat = engine_last_beat_ns(srv->eng);

    if (now_ns() - beat > ENGINE_STUCK_NS) {
        ERR("INIT", "the data-path engine has not run for %.1f s; not telling systemd we are alive",
            (double)(now_ns() - beat) / 1e9);
        return;
    }
    sd_notify(0, "WATCHDOG=1");
}

void service_watchdog_start(server_t *srv)
{
    uint64_t usec = 0;

    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
        return;
    /* Ping at half the interval, as sd_watchdog_enabled(3) advises. */
    uint64_t ms = usec / 2000 ? usec / 2000 : 1;
    uv_timer_init(srv->loop, &srv->watchdog);
    srv->watchdog.data = srv;
    uv_timer_start(&srv->watchdog, on_watchdog, 0, ms);
    srv->watchdog_on = 1;
    INFO("INIT", "systemd watchdog: pinging every %llu ms", (unsigned long long)ms);
}

void service_watchdog_stop(server_t *srv)
{
    if (srv->watchdog_on)
        uv_close((uv_handle_t *)&srv->watchdog, NULL);
    srv->watchdog_on = 0;
}

int service_load_policy(server_t *srv, qos_policy_t *p)
{
    char err[256];

    qos_policy_defaults(p);
    if (srv->cfg.config_path == NULL)
        return 0;
    if (qos_policy_load(srv->cfg.config_path, p, err, sizeof(err)) != 0) {
        ERR("INIT", "config: %s", err);
        return -1;
    }
    return 0;
}

void service_reload(server_t *srv)
{
    qos_policy_t *p = malloc(sizeof(*p));

    sd_notify(0, "RELOADING=1");
    /* The log first: a rotation moved it away, and what follows goes to the new one. */
    int rc = srv->cfg.log_file != NULL ? log_to_file(srv->cfg.log_file) : 0;
    if (rc != 0)
        WARN("INIT", "SIGHUP: cannot reopen the log %s (%s); it goes on where it was",
             srv->cfg.log_file, strerror(-rc));
    else if (srv->cfg.log_file != NULL)
        INFO("INIT", "SIGHUP: log reopened: %s", srv->cfg.log_file);
    if (p == NULL || service_load_policy(srv, p) != 0) {
        WARN("INIT", "SIGHUP: keeping the QoS policy in force");
    } else {
        srv->qos = *p;
        qos_reclassify(srv);
        qos_apply(srv);
        INFO("INIT", "SIGHUP: QoS policy reloaded from %s: %d classes, %d rules",
             srv->cfg.config_path ? srv->cfg.config_path : "(defaults)", p->ncls, p->nrules);
        events_say(srv, "reloaded", "SIGHUP: QoS policy reloaded from %s: %d classes, %d rules",
                   srv->cfg.config_path ? srv->cfg.config_path : "(defaults)", p->ncls, p->nrules);
    }
    free(p);
    sd_notify(0, "READY=1");
}
