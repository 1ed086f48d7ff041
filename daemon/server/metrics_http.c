/* The Prometheus endpoint (metrics_http.h). */
#include "server/metrics_http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "log.h"
#include "metrics_text.h"
#include "net_addr.h"
#include "server/server.h"
#include "server/status.h"
#include "thread.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct metrics_http {
    server_t *srv;
    struct MHD_Daemon *mhd;
    int fd;
    uv_async_t async; /* a scrape asks the loop for a rendering */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t asked, rendered; /* scrapes asked for, and the last one rendering answered */
    char *text;               /* the latest rendering, NULL before the first */
    size_t len;
    int stopping;
};

/* Loop thread: renders the status and wakes the scrapes that asked. */
static void on_render(uv_async_t *h)
{
    metrics_http_t *m = h->data;
    Hccld__QosResp q = HCCLD__QOS_RESP__INIT;
    Hccld__QosClass cls[QOS_MAX_CLASSES], *clsp[QOS_MAX_CLASSES];
    status_t st;
    char *text = NULL;
    size_t len = 0;
    uint64_t asked;
    FILE *f;

    pthread_mutex_lock(&m->lock);
    asked = m->asked;
    pthread_mutex_unlock(&m->lock);
    if (status_build(m->srv, &st) != 0)
        return;
    qos_list_fill(m->srv, &q, cls, clsp);
    f = open_memstream(&text, &len);
    if (f != NULL) {
        metrics_text(f, &st.r, &q);
        if (fclose(f) != 0) {
            free(text);
            text = NULL;
        }
    }
    status_free(&st);
    if (text == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    free(m->text);
    m->text = text;
    m->len = len;
    m->rendered = asked;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, mode);
    enum MHD_Result rc;

    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            code == MHD_HTTP_OK ? CONTENT_TYPE : "text/plain; charset=utf-8");
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET");
    rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

/* libmicrohttpd's thread: a fresh rendering, or the last one if the loop does not answer
 * within METRICS_WAIT_MS. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **state)
{
    static const char not_allowed[] = "only GET\n", not_found[] = "only /metrics\n",
                      not_yet[] = "no figures yet\n";
    metrics_http_t *m = cls;
    struct timespec until;
    uint64_t mine;
    char *copy = NULL;
    size_t len = 0;

    (void)version, (void)upload_data, (void)upload_size, (void)state;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, not_allowed, sizeof(not_allowed) - 1,
                     MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") != 0)
        return reply(c, MHD_HTTP_NOT_FOUND, not_found, sizeof(not_found) - 1,
                     MHD_RESPMEM_PERSISTENT);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += METRICS_WAIT_MS / 1000;
    until.tv_nsec += (long)(METRICS_WAIT_MS % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&m->lock);
    mine = ++m->asked;
    if (!m->stopping)
        uv_async_send(&m->async);
    while (!m->stopping && m->rendered < mine &&
           pthread_cond_timedwait(&m->cond, &m->lock, &until) == 0)
        ;
    if (m->text != NULL && (copy = malloc(m->len + 1)) != NULL) {
        memcpy(copy, m->text, m->len);
        len = m->len;
    }
    pthread_mutex_unlock(&m->lock);
    if (copy == NULL)
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, not_yet, sizeof(not_yet) - 1,
                     MHD_RESPMEM_PERSISTENT);
    return reply(c, MHD_HTTP_OK, copy, len, MHD_RESPMEM_MUST_FREE);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[256];

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    WARN("METRICS", "libmicrohttpd: %s", msg);
}

/* A listening socket on addr; its bound address goes to bound. -1 with the reason logged. */
static int listen_fd(const char *addr, char *bound, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd, one = 1;

    char any[80];
    size_t n = strlen(addr);

    /* Port 0 (any free one) is ours to allow: net_addr_parse wants a port to connect to. */
    if (n >= 2 && n < sizeof(any) && strcmp(addr + n - 2, ":0") == 0) {
        snprintf(any, sizeof(any), "%.*s:1", (int)(n - 2), addr);
        if (net_addr_parse(any, &ss, &len) == 0)
            ((struct sockaddr_in *)&ss)->sin_port = 0; /* sin6_port is at the same offset */
        else
            len = 0;
    } else if (net_addr_parse(addr, &ss, &len) != 0) {
        len = 0;
    }
    if (len == 0) {
        ERR("METRICS", "--metrics-listen %s: want IP:PORT (numeric; port 0: any free one)", addr);
        return -1;
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, METRICS_MAX_CONNS) != 0) {
        ERR("METRICS", "--metrics-listen %s: %s", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
        net_addr_format((struct sockaddr *)&ss, bound, cap) != 0)
        snprintf(bound, cap, "%s", addr);
    return fd;
}

metrics_http_t *metrics_http_start(server_t *srv, const char *addr, char *bound, size_t cap)
{
    metrics_http_t *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->srv = srv;
    if ((m->fd = listen_fd(addr, bound, cap)) < 0) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->cond, NULL);
    uv_async_init(srv->loop, &m->async, on_render);
    m->async.data = m;
    sigset_t saved;
    signals_block_all(&saved); /* its polling thread inherits the mask */
    m->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                              on_request, m, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                              MHD_OPTION_LISTEN_SOCKET, m->fd, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)METRICS_MAX_CONNS, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)METRICS_CONN_TIMEOUT_S, MHD_OPTION_END);
    signals_restore(&saved);
    if (m->mhd == NULL) {
        ERR("METRICS", "--metrics-listen %s: libmicrohttpd would not start", addr);
        metrics_http_stop(m);
        return NULL;
    }
    INFO("METRICS", "Prometheus metrics at http://%s/metrics", bound);
    return m;
}

static void on_closed(uv_handle_t *h)
{
    metrics_http_t *m = h->data;

    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    free(m->text);
    free(m);
}

void metrics_http_stop(metrics_http_t *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    m->stopping = 1;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    if (m->mhd != NULL)
        MHD_stop_daemon(m->mhd); /* it closes the listening socket too */
    else if (m->fd >= 0)
        close(m->fd);
    uv_close((uv_handle_t *)&m->async, on_closed);
}
