/* hccld-ctl: asks a running hccld over its admin socket. Exit 0 ok, 1 failed, 2 usage. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uds.h"

#define DEFAULT_ADMIN "/run/hccld/hccld-admin.sock"

static void usage(FILE *f)
{
    fprintf(f, "usage: hccld-ctl [--admin-socket PATH] status [--json]\n");
}

/* JSON through jansson: job names and paths come from clients and are escaped as they must be. */
static void print_json(const Hccld__StatusResp *r)
{
    json_t *clients = json_array(), *comms = json_array(), *o;

    for (size_t i = 0; i < r->n_clients; i++) {
        const Hccld__ClientStatus *c = r->clients[i];
        json_array_append_new(clients, json_pack("{s:I, s:i, s:i, s:s, s:I, s:I}", "id",
                                                 (json_int_t)c->client_id, "pid", (int)c->pid,
                                                 "uid", (int)c->uid, "job", c->job_name,
                                                 "submitted", (json_int_t)c->ops_submitted,
                                                 "completed", (json_int_t)c->ops_completed));
    }
    for (size_t i = 0; i < r->n_comms; i++) {
        const Hccld__CommStatus *c = r->comms[i];
        json_array_append_new(comms, json_pack("{s:i, s:s, s:i, s:i, s:s, s:I, s:i}", "id",
                                               (int)c->comm_id, "job", c->job_id, "nranks",
                                               (int)c->nranks, "joined", (int)c->joined, "level0",
                                               c->level0, "ops_done", (json_int_t)c->ops_done,
                                               "ops_in_flight", (int)c->ops_in_flight));
    }
    o = json_pack("{s:s, s:I, s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:o, s:o}", "version", r->version,
                  "uptime_ms", (json_int_t)r->uptime_ms, "socket", r->socket, "workers",
                  (int)r->workers, "simd", r->simd, "ops_in_flight", (json_int_t)r->ops_in_flight,
                  "ops_done", (json_int_t)r->ops_done, "net_tx_bytes", (json_int_t)r->net_tx_bytes,
                  "net_rx_bytes", (json_int_t)r->net_rx_bytes, "clients", clients, "comms", comms);
    json_object_set_new(o, "advertised", json_string(r->advertised));
    json_dumpf(o, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(o);
}

static void print_text(const Hccld__StatusResp *r)
{
    printf("hccld %s, up %llu s, socket %s, %u workers, simd %s\n", r->version,
           (unsigned long long)(r->uptime_ms / 1000), r->socket, r->workers, r->simd);
    printf("peers reach it at: %s\n", r->advertised[0] ? r->advertised : "(not listening)");
    printf("ops: %llu done, %llu in flight\n", (unsigned long long)r->ops_done,
           (unsigned long long)r->ops_in_flight);
    printf("between daemons: %llu bytes sent, %llu received\n", (unsigned long long)r->net_tx_bytes,
           (unsigned long long)r->net_rx_bytes);
    printf("clients: %zu\n", r->n_clients);
    for (size_t i = 0; i < r->n_clients; i++) {
        const Hccld__ClientStatus *c = r->clients[i];
        printf("  #%llu pid %u uid %u job '%s' submitted %llu completed %llu\n",
               (unsigned long long)c->client_id, c->pid, c->uid, c->job_name,
               (unsigned long long)c->ops_submitted, (unsigned long long)c->ops_completed);
    }
    printf("communicators: %zu\n", r->n_comms);
    for (size_t i = 0; i < r->n_comms; i++) {
        const Hccld__CommStatus *c = r->comms[i];
        printf("  comm %u job %s: %u/%u ranks, level 0 %s, %llu ops done, %u queued\n", c->comm_id,
               c->job_id, c->joined, c->nranks, c->level0, (unsigned long long)c->ops_done,
               c->ops_in_flight);
    }
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"admin-socket", required_argument, 0, 'a'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *path = getenv("HCCLD_ADMIN_SOCKET");
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__StatusReq req = HCCLD__STATUS_REQ__INIT;
    uds_conn_t conn;
    int c, json = 0, fd;

    if (path == NULL)
        path = DEFAULT_ADMIN;
    while ((c = getopt_long(argc, argv, "a:jh", lo, NULL)) != -1) {
        switch (c) {
        case 'a': path = optarg; break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc || strcmp(argv[optind], "status") != 0) {
        usage(stderr);
        return 2;
    }
    for (int i = optind + 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") != 0) {
            usage(stderr);
            return 2;
        }
        json = 1;
    }
    if ((fd = uds_connect(path)) < 0) {
        fprintf(stderr, "hccld-ctl: cannot connect to %s: %s\n", path, strerror(-fd));
        return 1;
    }
    uds_conn_init(&conn, fd);
    m.body_case = HCCLD__MSG__BODY_STATUS_REQ;
    m.status_req = &req;
    m.req_id = 1;
    if (uds_send(fd, &m, NULL, 0) != 0 || uds_recv(&conn, &resp, 5000) != 0 ||
        resp->body_case != HCCLD__MSG__BODY_STATUS_RESP) {
        fprintf(stderr, "hccld-ctl: no status from the daemon\n");
        uds_conn_close(&conn);
        return 1;
    }
    if (json)
        print_json(resp->status_resp);
    else
        print_text(resp->status_resp);
    frame_msg_free(resp);
    uds_conn_close(&conn);
    return 0;
}
