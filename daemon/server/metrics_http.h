/*
 * `hccld --metrics-listen IP:PORT`: GET /metrics in Prometheus' text format (libmicrohttpd).
 * The HTTP side runs in libmicrohttpd's own thread; a scrape asks the loop thread for a fresh
 * rendering (uv_async) and waits for it at most METRICS_WAIT_MS, else serves the last one, so
 * neither a slow scraper nor a busy loop holds up the other, and the data path never waits.
 * Only GET (else 405), only /metrics (else 404), at most METRICS_MAX_CONNS connections.
 */
#ifndef HCCLD_SERVER_METRICS_HTTP_H
#define HCCLD_SERVER_METRICS_HTTP_H

#include <stddef.h>

#define METRICS_MAX_CONNS 16
#define METRICS_WAIT_MS 1000
#define METRICS_CONN_TIMEOUT_S 10

typedef struct server server_t;
typedef struct metrics_http metrics_http_t;

/* Listens on addr ("IP:PORT", port 0: any); the bound "IP:PORT" goes to bound. NULL, with
 * the reason logged, if it cannot. */
metrics_http_t *metrics_http_start(server_t *srv, const char *addr, char *bound, size_t cap);
/* Stops serving (waiting scrapes return at once) and frees m; m may be NULL. Loop thread. */
void metrics_http_stop(metrics_http_t *m);

#endif
