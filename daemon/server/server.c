/* Listening sockets, signals and orderly shutdown. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "log.h"
#include "server/events.h"
#include "server/link_mon.h"
#include "server/metrics_http.h"
#include "server/server.h"
#include "server/topo.h"
#include "uds.h"

static void on_client_conn(uv_stream_t *listener, int status)
{
    server_t *srv = listener->data;

    if (status == 0 && !srv->stopping)
        session_accept(srv, listener, SESSION_CLIENT);
}

static void on_admin_conn(uv_stream_t *listener, int status)
{
    server_t *srv = listener->data;

    if (status == 0 && !srv->stopping)
        session_accept(srv, listener, SESSION_ADMIN);
}

/* Refuses to steal the socket of a live daemon; removes a stale one. */
static int socket_claim(const char *path)
{
    int fd = uds_connect(path);

    if (fd >= 0) {
        close(fd);
        ERR("INIT", "another hccld is listening on %s", path);
        return -EADDRINUSE;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        ERR("INIT", "unlink(%s) failed: %s", path, strerror(errno));
        return -errno;
    }
    return 0;
}

static int listen_on(server_t *srv, uv_pipe_t *p, const char *path, int mode, uv_connection_cb cb)
{
    int rc;

    if ((rc = socket_claim(path)) != 0)
        return rc;
    uv_pipe_init(srv->loop, p, 0);
    p->data = srv;
    if ((rc = uv_pipe_bind(p, path)) != 0 || (rc = uv_listen((uv_stream_t *)p, 128, cb)) != 0) {
        ERR("INIT", "listening on %s failed: %s", path, uv_strerror(rc));
        return rc;
    }
    if (chmod(path, (mode_t)mode) != 0)
        WARN("INIT", "chmod(%s) failed: %s", path, strerror(errno));
    return 0;
}

static void on_signal(uv_signal_t *h, int signum)
{
    server_t *srv = h->data;

    if (signum == SIGHUP) {
        service_reload(srv);
        return;
    }
    INFO("INIT", "signal %d: shutting down", signum);
    server_stop(srv);
}

static void signal_watch(server_t *srv, uv_signal_t *h, int signum)
{
    uv_signal_init(srv->loop, h);
    h->data = srv;
    uv_signal_start(h, on_signal, signum);
}

int server_start(server_t *srv, uv_loop_t *loop, const server_config_t *cfg)
{
    int rc;

    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->cfg = *cfg;
    srv->started_ms = uv_now(loop);
    srv->eng = engine_create(cfg->workers);
    if (srv->eng == NULL)
        return -ENOMEM;
    if (sodium_init() < 0) {
        ERR("INIT", "sodium_init() failed");
        return -EIO;
    }
    if (service_load_policy(srv, &srv->qos) != 0)
        return -EINVAL;
    qos_apply(srv);
    const char *wl = getenv("HCCL_WHITELIST_FILE");
    if (wl != NULL && *wl != '\0' && whitelist_load(srv, wl) != 0)
        return -EINVAL;
    if (cfg->listen != NULL && (rc = peer_listen(srv, cfg->listen)) != 0)
        return rc;
    if (srv->advertised[0] != '\0') {
        char ip[PEER_ADDR_MAX];
        snprintf(ip, sizeof(ip), "%s", srv->advertised);
        *strrchr(ip, ':') = '\0';
        if ((rc = engine_listen(srv->eng, ip, srv->data_addr, srv->rdma_addr)) != 0)
            return rc;
    }
    if ((rc = formation_start(srv)) != 0)
        return rc;
    srv->topo = topo_load();
    if (srv->advertised[0] != '\0') {
        char ip[PEER_ADDR_MAX];
        snprintf(ip, sizeof(ip), "%s", srv->advertised);
        *strrchr(ip, ':') = '\0';
        topo_pin_near(srv->topo, ip, srv->nic, sizeof(srv->nic), srv->pinned, sizeof(srv->pinned));
    }
    engine_set_host(srv->eng, topo_host_id(srv->topo));
    /* Any local user may run jobs (tenants are told apart by SO_PEERCRED); the admin socket
     * is for root and the admin group only. */
    if ((rc = listen_on(srv, &srv->listener, cfg->socket_path, 0666, on_client_conn)) != 0)
        return rc;
    if ((rc = listen_on(srv, &srv->admin, cfg->admin_path, 0660, on_admin_conn)) != 0) {
        unlink(cfg->socket_path);
        return rc;
    }
    if (cfg->metrics_listen != NULL &&
        (srv->metrics = metrics_http_start(srv, cfg->metrics_listen, srv->metrics_addr,
                                           sizeof(srv->metrics_addr))) == NULL) {
        unlink(cfg->socket_path);
        unlink(cfg->admin_path);
        return -EADDRNOTAVAIL;
    }
    srv->links = link_mon_start(srv, &rc);
    if (rc != 0) {
        metrics_http_stop(srv->metrics);
        srv->metrics = NULL;
        unlink(cfg->socket_path);
        unlink(cfg->admin_path);
        return rc;
    }
    signal_watch(srv, &srv->sigterm, SIGTERM);
    signal_watch(srv, &srv->sigint, SIGINT);
    signal_watch(srv, &srv->sighup, SIGHUP);
    INFO("INIT", "listening on %s (admin %s), %u workers", cfg->socket_path, cfg->admin_path,
         engine_workers(srv->eng));
    sd_notify(0, "READY=1");
    service_watchdog_start(srv);
    return 0;
}

/* How long a stop waits for the comms across daemons to come to rest (span/drain.c); within
 * the unit's TimeoutStopSec. */
#define DRAIN_MAX_MS 5000

static void stop_finish(server_t *srv);

static void on_drain_tick(uv_timer_t *t)
{
    server_t *srv = t->data;
    int done = engine_drained(srv->eng);

    if (!done && uv_now(srv->loop) < srv->drain_until)
        return;
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, NULL);
    if (done)
        INFO("INIT", "comms across daemons at rest after %llu ms",
             (unsigned long long)(uv_now(srv->loop) - srv->drain_t0));
    else
        WARN("INIT", "comms across daemons not at rest after %d ms: stopping anyway", DRAIN_MAX_MS);
    stop_finish(srv);
}

void server_stop(server_t *srv)
{
    if (srv->stopping)
        return;
    srv->stopping = 1;
    sd_notify(0, "STOPPING=1");
    uv_close((uv_handle_t *)&srv->listener, NULL);
    uv_close((uv_handle_t *)&srv->admin, NULL);
    unlink(srv->cfg.socket_path);
    unlink(srv->cfg.admin_path);
    /* Comms across daemons whose ranks wait for the next daemon come to rest on every node
     * first, so that the others hold their ops and take this node back (docs/operations.md). */
    unsigned n = engine_drain(srv->eng);
    if (n > 0) {
        INFO("INIT", "bringing %u comm(s) across daemons to rest first (at most %d ms)", n,
             DRAIN_MAX_MS);
        srv->drain_t0 = uv_now(srv->loop);
        srv->drain_until = srv->drain_t0 + DRAIN_MAX_MS;
        uv_timer_init(srv->loop, &srv->drain_timer);
        srv->drain_timer.data = srv;
        uv_timer_start(&srv->drain_timer, on_drain_tick, 2, 2);
        return;
    }
    stop_finish(srv);
}

static void stop_finish(server_t *srv)
{
    /* Nothing more is written into the clients' segments: queued and running operations stay
     * as they are for a daemon started after this one, which ranks with op retry register
     * with again (docs/operations.md); the others see the socket close and fail them. */
    engine_halt(srv->eng);
    for (session_t *s = srv->sessions; s != NULL; s = s->next)
        if (s->in_engine) {
            engine_session_remove(srv->eng, s->fc.sid);
            s->in_engine = 0;
            __atomic_store_n(&((shm_hdr_t *)s->seg)->halted_cleanly, 1, __ATOMIC_RELEASE);
        }
    /* Formation first: the comms whose ranks wait for the next daemon are left as they are
     * (a client's leaving would break them), the others' ranks told. */
    formation_stop(srv);
    for (session_t *s = srv->sessions, *next; s != NULL; s = next) {
        next = s->next;
        session_close(s);
    }
    peers_stop(srv);
    uv_close((uv_handle_t *)&srv->sigterm, NULL);
    uv_close((uv_handle_t *)&srv->sigint, NULL);
    uv_close((uv_handle_t *)&srv->sighup, NULL);
    service_watchdog_stop(srv);
    metrics_http_stop(srv->metrics);
    srv->metrics = NULL;
    link_mon_stop(srv->links);
    srv->links = NULL;
    events_stop(srv);
    topo_free(srv->topo);
    srv->topo = NULL;
}
