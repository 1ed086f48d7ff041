/* hccld-ctl: asks a running hccld over its admin socket. Exit 0 ok, 1 failed, 2 usage. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ctl_links.h"
#include "ctl_watch.h"
#include "env.h"
#include "metrics_text.h"
#include "text.h"
#include "uds.h"

#define DEFAULT_ADMIN "/run/hccld/hccld-admin.sock"
#define PROG "hccld-ctl"

/* Where the admin socket's path came from, for the hint when nothing answers there. */
static const char *path_from = "the default; --admin-socket or HCCLD_ADMIN_SOCKET names another";

static void usage(FILE *f)
{
    fprintf(f, "usage: hccld-ctl [--admin-socket PATH] [--json] COMMAND\n"
               "       hccld-ctl --help | --version\n"
               "  status                       daemon, clients, communicators, classes\n"
               "  topology                     packages, NUMA nodes, cores, NICs, RDMA devices\n"
               "  comms                        communicators: ranks, daemons, class, algorithm\n"
               "  metrics                      the status in Prometheus's text format\n"
               "  links                        data connections to peer daemons: bytes, rates,\n"
               "                               retransmits, round trip, per peer daemon\n"
               "  watch [--stall-s S]          events as they happen, until interrupted: clients,\n"
               "                               comms formed and broken, ranks died, peers lost,\n"
               "                               ops waiting over S seconds (10), QoS changes\n"
               "  qos list                     classes and how many clients each has\n"
               "  qos set CLASS [--max-bw RATE] [--priority N]\n"
               "                               change a class (root or the admin group)\n"
               "  qos assign (--job NAME|--uid UID) CLASS\n"
               "                               put a job or a user in a class (idem)\n"
               "RATE: 40Gbit, 800Mbit, 5GB/s, none (a bare number has no unit and is refused).\n"
               "The admin socket: --admin-socket, else HCCLD_ADMIN_SOCKET, else the one beside\n"
               "HCCLD_SOCKET (NAME.sock: NAME-admin.sock), else " DEFAULT_ADMIN ".\n"
               "Exit: 0 ok, 1 refused or failed, 2 usage.\n");
}

/* {"classes": [...], "default": NAME} */
static json_t *qos_json(const Hccld__QosResp *r)
{
    json_t *a = json_array();

    for (size_t i = 0; i < r->n_classes; i++) {
        const Hccld__QosClass *c = r->classes[i];
        json_array_append_new(a, json_pack("{s:s, s:i, s:I, s:i, s:i, s:i, s:i, s:I, s:I, s:i}",
                                           "name", c->name, "priority", (int)c->priority,
                                           "max_bw_bps", (json_int_t)c->max_bw_bps, "latency_us",
                                           (int)c->latency_us, "chunk_kib", (int)c->chunk_kib,
                                           "dscp", (int)c->dscp, "clients", (int)c->clients,
                                           "sent_bytes", (json_int_t)c->sent_bytes, "rate_bps",
                                           (json_int_t)c->rate_bps, "waiting", (int)c->waiting));
    }
    return json_pack("{s:o, s:s}", "classes", a, "default", r->default_class);
}

static void dump(json_t *o)
{
    json_dumpf(o, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(o);
}

static void print_qos(const Hccld__QosResp *r, int json)
{
    if (json) {
        dump(qos_json(r));
        return;
    }
    printf("%-10s %8s %12s %10s %9s %5s %7s %14s %12s %7s\n", "class", "priority", "max_bw",
           "latency_us", "chunk_kib", "dscp", "clients", "sent_bytes", "rate", "waiting");
    for (size_t i = 0; i < r->n_classes; i++) {
        const Hccld__QosClass *c = r->classes[i];
        char bw[32], rate[32];
        if (c->max_bw_bps == 0)
            snprintf(bw, sizeof(bw), "none");
        else
            snprintf(bw, sizeof(bw), "%.3gGbit/s", (double)c->max_bw_bps / 1e9);
        snprintf(rate, sizeof(rate), "%.3gGbit/s", (double)c->rate_bps / 1e9);
        printf("%-10s %8u %12s %10u %9u %5d %7u %14llu %12s %7u%s\n", c->name, c->priority, bw,
               c->latency_us, c->chunk_kib, c->dscp, c->clients, (unsigned long long)c->sent_bytes,
               rate, c->waiting, strcmp(c->name, r->default_class) == 0 ? "  (default)" : "");
    }
}

/* Global rank of the comm's i-th member on this daemon. */
static unsigned long long member_rank(const Hccld__CommStatus *c, size_t i)
{
    return i < c->n_ranks ? c->ranks[i] : (unsigned long long)c->rank0 + i;
}

/* JSON through jansson: job names and paths come from clients and are escaped as they must be. */
static json_t *status_json(const Hccld__StatusResp *r)
{
    json_t *clients = json_array(), *comms = json_array(), *o;

    for (size_t i = 0; i < r->n_clients; i++) {
        const Hccld__ClientStatus *c = r->clients[i];
        json_array_append_new(clients,
                              json_pack("{s:I, s:i, s:i, s:s, s:s, s:I, s:I}", "id",
                                        (json_int_t)c->client_id, "pid", (int)c->pid, "uid",
                                        (int)c->uid, "job", c->job_name, "class", c->qos_class,
                                        "submitted", (json_int_t)c->ops_submitted, "completed",
                                        (json_int_t)c->ops_completed));
    }
    for (size_t i = 0; i < r->n_comms; i++) {
        const Hccld__CommStatus *c = r->comms[i];
        json_t *posted = json_array(), *links = json_array(), *ranks = json_array();
        for (size_t k = 0; k < c->n_posted; k++) {
            json_array_append_new(posted, json_integer((json_int_t)c->posted[k]));
            json_array_append_new(ranks, json_integer((json_int_t)member_rank(c, k)));
        }
        for (size_t k = 0; k < c->n_links; k++)
            json_array_append_new(links, c->links[k][0] ? json_string(c->links[k]) : json_null());
        const Hccld__LinkFigures *f = c->link_figures;
        json_t *figs =
            f == NULL ? json_null()
                      : json_pack("{s:f, s:f, s:f, s:f, s:f}", "latency_us", f->latency_us, "gbps",
                                  f->gbps, "reduce_gbps", f->reduce_gbps, "msg_overhead_us",
                                  f->msg_overhead_us, "daemons_per_core", f->daemons_per_core);
        json_array_append_new(
            comms,
            json_pack("{s:I, s:s, s:i, s:i, s:i, s:s, s:s, s:s, s:I, s:i, s:i, s:o, s:o, s:b, s:o, "
                      "s:o, s:b}",
                      "id", (json_int_t)c->comm_id, "job", c->job_id, "nranks", (int)c->nranks,
                      "joined", (int)c->joined, "nnodes", (int)c->nnodes, "level0", c->level0,
                      "class", c->qos_class, "algo", c->algo, "ops_done", (json_int_t)c->ops_done,
                      "ops_in_flight", (int)c->ops_in_flight, "rank0", (int)c->rank0, "ranks",
                      ranks, "posted", posted, "on_wire", (int)c->on_wire, "links", links,
                      "link_figures", figs, "broken", (int)c->broken));
        json_t *last = json_array_get(comms, json_array_size(comms) - 1);
        json_object_set_new(last, "waiting_on",
                            json_string(c->waiting_on != NULL ? c->waiting_on : ""));
        json_object_set_new(last, "suspended_links", json_integer(c->suspended_links));
        json_object_set_new(last, "suspended_ms", json_integer((json_int_t)c->suspended_ms));
    }
    o = json_pack("{s:s, s:I, s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:o, s:o}", "version", r->version,
                  "uptime_ms", (json_int_t)r->uptime_ms, "socket", r->socket, "workers",
                  (int)r->workers, "simd", r->simd, "ops_in_flight", (json_int_t)r->ops_in_flight,
                  "ops_done", (json_int_t)r->ops_done, "net_tx_bytes", (json_int_t)r->net_tx_bytes,
                  "net_rx_bytes", (json_int_t)r->net_rx_bytes, "clients", clients, "comms", comms);
    json_object_set_new(o, "advertised", json_string(r->advertised));
    json_object_set_new(o, "metrics_addr", json_string(r->metrics_addr));
    json_object_set_new(o, "data_conns", json_integer(r->data_conns));
    json_object_set_new(o, "clients_rejoined", json_integer((json_int_t)r->clients_rejoined));
    json_object_set_new(o, "comms_rejoined", json_integer((json_int_t)r->comms_rejoined));
    json_t *rj = json_array();
    for (size_t i = 0; i < r->n_rejoining; i++) {
        const Hccld__CommRejoining *j = r->rejoining[i];
        json_array_append_new(rj, json_pack("{s:i, s:i, s:i, s:s, s:I, s:b}", "comm",
                                            (int)j->comm_id, "nranks", (int)j->nranks, "back",
                                            (int)j->back, "missing", j->missing, "left_ms",
                                            (json_int_t)j->left_ms, "coop", (int)j->coop));
    }
    json_object_set_new(o, "rejoining", rj);
    return o;
}

static void print_json(const Hccld__StatusResp *r, const Hccld__QosResp *qos)
{
    json_t *o = status_json(r);

    if (qos != NULL)
        json_object_set_new(o, "qos", qos_json(qos));
    dump(o);
}

/* A stuck collective names its culprits: the ranks of this daemon that have posted fewer
 * pieces than the others have not called the collective the others wait in. */
static void print_waiting(const Hccld__CommStatus *c)
{
    uint64_t hi = 0, lo = UINT64_MAX;

    for (size_t i = 0; i < c->n_posted; i++) {
        hi = c->posted[i] > hi ? c->posted[i] : hi;
        lo = c->posted[i] < lo ? c->posted[i] : lo;
    }
    if (c->n_posted > 0 && lo < hi) {
        printf("    waiting for piece %llu: posted by rank", (unsigned long long)hi);
        for (size_t i = 0; i < c->n_posted; i++)
            if (c->posted[i] == hi)
                printf(" %llu", member_rank(c, i));
        printf("; not yet by rank");
        for (size_t i = 0; i < c->n_posted; i++)
            if (c->posted[i] < hi)
                printf(" %llu (at %llu)", member_rank(c, i), (unsigned long long)c->posted[i]);
        printf("\n");
    }
    if (c->on_wire && c->waiting_on != NULL && c->waiting_on[0] != '\0')
        printf("    %s\n", c->waiting_on);
    else if (c->on_wire)
        printf("    a collective runs with the other daemons (each names its own ranks)\n");
}

static void print_comms(const Hccld__StatusResp *r)
{
    printf("communicators: %zu\n", r->n_comms);
    for (size_t i = 0; i < r->n_comms; i++) {
        const Hccld__CommStatus *c = r->comms[i];
        printf("  comm %u job %s: %u/%u ranks on %u daemon%s, level 0 %s, class %s", c->comm_id,
               c->job_id, c->joined, c->nranks, c->nnodes, c->nnodes == 1 ? "" : "s", c->level0,
               c->qos_class[0] ? c->qos_class : "-");
        if (c->algo[0])
            printf(", level 1 %s", c->algo);
        printf(", %llu ops done, %u queued\n", (unsigned long long)c->ops_done, c->ops_in_flight);
        if (c->n_links > 0) {
            printf("    data connections by node:");
            for (size_t k = 0; k < c->n_links; k++)
                printf(" %zu:%s", k, c->links[k][0] ? c->links[k] : "-");
            printf("\n");
        }
        if (c->link_figures != NULL) {
            const Hccld__LinkFigures *f = c->link_figures;
            printf("    links measured: latency %.1f us, %.2f GB/s, reduce %.2f GB/s, %.1f us per "
                   "extra message, %.2f daemons per core\n",
                   f->latency_us, f->gbps, f->reduce_gbps, f->msg_overhead_us, f->daemons_per_core);
        }
        print_waiting(c);
        if (c->suspended_links > 0)
            printf("    suspended (op retry): %u data connection%s failed, its ops wait for it to "
                   "come back (%.1f s so far)\n",
                   c->suspended_links, c->suspended_links == 1 ? "" : "s",
                   (double)c->suspended_ms / 1000);
    }
}

static void print_text(const Hccld__StatusResp *r)
{
    printf("hccld %s, up %llu s, socket %s, %u workers, simd %s\n", r->version,
           (unsigned long long)(r->uptime_ms / 1000), r->socket, r->workers, r->simd);
    printf("peers reach it at: %s\n", r->advertised[0] ? r->advertised : "(not listening)");
    if (r->metrics_addr[0] != '\0')
        printf("Prometheus metrics: http://%s/metrics\n", r->metrics_addr);
    printf("ops: %llu done, %llu in flight\n", (unsigned long long)r->ops_done,
           (unsigned long long)r->ops_in_flight);
    printf("between daemons: %llu bytes sent, %llu received, %u data connections open\n",
           (unsigned long long)r->net_tx_bytes, (unsigned long long)r->net_rx_bytes, r->data_conns);
    printf("clients: %zu\n", r->n_clients);
    for (size_t i = 0; i < r->n_clients; i++) {
        const Hccld__ClientStatus *c = r->clients[i];
        printf("  #%llu pid %u uid %u job '%s' class %s submitted %llu completed %llu\n",
               (unsigned long long)c->client_id, c->pid, c->uid, c->job_name, c->qos_class,
               (unsigned long long)c->ops_submitted, (unsigned long long)c->ops_completed);
    }
    print_comms(r);
    if (r->clients_rejoined > 0 || r->n_rejoining > 0)
        printf("after a restart: %llu clients came back, %llu comms registered again\n",
               (unsigned long long)r->clients_rejoined, (unsigned long long)r->comms_rejoined);
    for (size_t i = 0; i < r->n_rejoining; i++) {
        const Hccld__CommRejoining *j = r->rejoining[i];
        printf("  comm %u: %u/%u ranks back, waiting for rank(s) %s (%.1f s left)\n", j->comm_id,
               j->back, j->nranks, j->missing, (double)j->left_ms / 1000);
    }
}

/* One request, one answer of the expected kind (NULL on failure, reported). */
static Hccld__Msg *ask(const char *path, Hccld__Msg *m, int want)
{
    Hccld__Msg *resp = NULL;
    uds_conn_t conn;
    int fd = uds_connect(path);

    if (fd < 0) {
        fprintf(stderr, "hccld-ctl: cannot connect to %s: %s (is hccld running? the path is %s)\n",
                path, strerror(-fd), path_from);
        return NULL;
    }
    uds_conn_init(&conn, fd);
    m->req_id = 1;
    if (uds_send(fd, m, NULL, 0) != 0 || uds_recv(&conn, &resp, 5000) != 0 ||
        (int)resp->body_case != want) {
        if (resp != NULL && resp->body_case == HCCLD__MSG__BODY_WELCOME)
            fprintf(stderr, "hccld-ctl: %s refused: %s\n", path, resp->welcome->message);
        else
            fprintf(stderr, "hccld-ctl: no answer from the daemon at %s\n", path);
        if (resp != NULL)
            frame_msg_free(resp);
        resp = NULL;
    }
    uds_conn_close(&conn);
    return resp;
}

static int cmd_topology(const char *path, int json)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp;
    Hccld__TopologyReq req = HCCLD__TOPOLOGY_REQ__INIT;

    m.body_case = HCCLD__MSG__BODY_TOPOLOGY_REQ;
    m.topology_req = &req;
    if ((resp = ask(path, &m, HCCLD__MSG__BODY_TOPOLOGY_RESP)) == NULL)
        return 1;
    const Hccld__TopologyResp *r = resp->topology_resp;
    if (json) {
        json_t *devs = json_array();
        for (size_t i = 0; i < r->n_devices; i++)
            json_array_append_new(devs, json_pack("{s:s, s:s, s:s, s:s}", "name",
                                                  r->devices[i]->name, "kind", r->devices[i]->kind,
                                                  "cpuset", r->devices[i]->cpuset, "nodeset",
                                                  r->devices[i]->nodeset));
        dump(json_pack("{s:i, s:i, s:i, s:i, s:o, s:s, s:s}", "packages", (int)r->packages,
                       "numa_nodes", (int)r->numa_nodes, "cores", (int)r->cores, "pus", (int)r->pus,
                       "devices", devs, "nic", r->nic, "pinned", r->pinned));
    } else {
        printf("%u packages, %u NUMA nodes, %u cores, %u hardware threads\n", r->packages,
               r->numa_nodes, r->cores, r->pus);
        printf("NIC in use: %s; daemon threads: %s\n", r->nic[0] ? r->nic : "(none found)",
               r->pinned[0] ? r->pinned : "not pinned");
        for (size_t i = 0; i < r->n_devices; i++)
            printf("  %-5s %-12s near cores %s%s%s\n", r->devices[i]->kind, r->devices[i]->name,
                   r->devices[i]->cpuset[0] ? r->devices[i]->cpuset : "(unknown)",
                   r->devices[i]->nodeset[0] ? ", NUMA " : "", r->devices[i]->nodeset);
    }
    frame_msg_free(resp);
    return 0;
}

enum status_view { VIEW_STATUS, VIEW_METRICS, VIEW_COMMS, VIEW_LINKS };

/* status, its communicators only, or the same figures in Prometheus's text format. */
static int cmd_status(const char *path, int json, int view)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp;
    Hccld__StatusReq req = HCCLD__STATUS_REQ__INIT;

    Hccld__QosReq q = HCCLD__QOS_REQ__INIT;
    Hccld__Msg *qresp;

    m.body_case = HCCLD__MSG__BODY_STATUS_REQ;
    m.status_req = &req;
    if ((resp = ask(path, &m, HCCLD__MSG__BODY_STATUS_RESP)) == NULL)
        return 1;
    /* Per class: what it sent, its rate, its cap, the comms it holds back. */
    m.body_case = HCCLD__MSG__BODY_QOS_REQ;
    m.qos_req = &q;
    qresp = ask(path, &m, HCCLD__MSG__BODY_QOS_RESP);
    if (view == VIEW_METRICS) {
        metrics_text(stdout, resp->status_resp, qresp ? qresp->qos_resp : NULL);
    } else if (view == VIEW_COMMS && json) {
        json_t *o = status_json(resp->status_resp);
        json_t *comms = json_object_get(o, "comms");
        json_incref(comms);
        json_decref(o);
        dump(comms);
    } else if (view == VIEW_COMMS) {
        print_comms(resp->status_resp);
    } else if (view == VIEW_LINKS) {
        ctl_links_print(resp->status_resp, json);
    } else if (json) {
        print_json(resp->status_resp, qresp ? qresp->qos_resp : NULL);
    } else {
        print_text(resp->status_resp);
        if (qresp != NULL) {
            printf("QoS classes:\n");
            print_qos(qresp->qos_resp, 0);
        }
    }
    if (qresp != NULL)
        frame_msg_free(qresp);
    frame_msg_free(resp);
    return 0;
}

/* qos list | set CLASS [--max-bw RATE] [--priority N] | assign (--job NAME|--uid UID) CLASS */
static int cmd_qos(const char *path, int json, int argc, char **argv)
{
    static const struct option lo[] = {
        {"max-bw", required_argument, 0, 'b'}, {"priority", required_argument, 0, 'p'},
        {"job", required_argument, 0, 'J'},    {"uid", required_argument, 0, 'u'},
        {"json", no_argument, 0, 'j'},         {0, 0, 0, 0}};
    Hccld__Msg m = HCCLD__MSG__INIT, *resp;
    Hccld__QosReq q = HCCLD__QOS_REQ__INIT;
    uint64_t v;
    int c;

    static const char *const subs[] = {"list", "set", "assign", NULL};
    const char *near;
    char what[32];

    if (argc < 2)
        return cli_bad(PROG, "qos: which? qos list, qos set CLASS ..., qos assign ... CLASS");
    if (strcmp(argv[1], "list") == 0)
        q.op = HCCLD__QOS_REQ__OP__LIST;
    else if (strcmp(argv[1], "set") == 0)
        q.op = HCCLD__QOS_REQ__OP__SET;
    else if (strcmp(argv[1], "assign") == 0)
        q.op = HCCLD__QOS_REQ__OP__ASSIGN;
    else if ((near = cli_nearest(argv[1], subs)) != NULL)
        return cli_bad(PROG, "qos: unknown subcommand '%s' (did you mean qos %s?)", argv[1], near);
    else
        return cli_bad(PROG, "qos: unknown subcommand '%s' (list, set or assign)", argv[1]);
    /* argv[0] is now the subcommand; optind 0 makes glibc start afresh (its state from the
     * first parse, "+" mode included, would otherwise linger). */
    argc--;
    argv++;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'b':
            if (parse_rate(optarg, &q.max_bw_bps) != 0)
                return cli_bad(PROG, "qos %s: --max-bw '%s': a rate needs " RATE_UNITS, argv[0],
                               optarg);
            q.has_max_bw = 1;
            break;
        case 'p':
            if (parse_u64(optarg, &v) != 0 || v > 255)
                return cli_bad(PROG, "qos %s: --priority '%s': a whole number from 0 to 255",
                               argv[0], optarg);
            q.has_priority = 1;
            q.priority = (uint32_t)v;
            break;
        case 'J': q.job = optarg; break;
        case 'u':
            if (parse_u64(optarg, &v) != 0 || v > UINT32_MAX)
                return cli_bad(PROG, "qos %s: --uid '%s': a numeric user id", argv[0], optarg);
            q.has_uid = 1;
            q.uid = (uint32_t)v;
            break;
        case 'j': json = 1; break;
        default:
            snprintf(what, sizeof(what), "qos %s", argv[0]);
            return cli_bad_option(PROG, what, argv, "", lo);
        }
    }
    if (q.op == HCCLD__QOS_REQ__OP__LIST && optind != argc)
        return cli_bad(PROG, "qos list: takes no argument, got '%s'", argv[optind]);
    if (q.op != HCCLD__QOS_REQ__OP__LIST && optind == argc)
        return cli_bad(PROG, "qos %s: which class? (qos %s %sCLASS)", argv[0], argv[0],
                       q.op == HCCLD__QOS_REQ__OP__SET ? "[--max-bw RATE] [--priority N] "
                                                       : "(--job NAME|--uid UID) ");
    if (q.op != HCCLD__QOS_REQ__OP__LIST && optind + 1 != argc)
        return cli_bad(PROG, "qos %s: one class, got '%s' and '%s'", argv[0], argv[optind],
                       argv[optind + 1]);
    if (q.op != HCCLD__QOS_REQ__OP__LIST)
        q.cls = argv[optind];
    m.body_case = HCCLD__MSG__BODY_QOS_REQ;
    m.qos_req = &q;
    if ((resp = ask(path, &m, HCCLD__MSG__BODY_QOS_RESP)) == NULL)
        return 1;
    int rc = resp->qos_resp->result == 0 ? 0 : 1;
    if (rc != 0)
        fprintf(stderr, "hccld-ctl: refused: %s\n", resp->qos_resp->message);
    else
        print_qos(resp->qos_resp, json);
    frame_msg_free(resp);
    return rc;
}

/* The commands: those that print a view of the daemon's status or its topology take --json
 * alone; the others parse their own options. */
enum { CMD_TOPOLOGY = -1, CMD_OWN = -2 };
static const struct command {
    const char *name;
    int view; /* enum status_view, or CMD_* */
} commands[] = {{"status", VIEW_STATUS},   {"topology", CMD_TOPOLOGY}, {"comms", VIEW_COMMS},
                {"metrics", VIEW_METRICS}, {"links", VIEW_LINKS},      {"watch", CMD_OWN},
                {"qos", CMD_OWN}};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* The refusal of a command that is none of them: the nearest one, or the list. */
static int bad_command(const char *cmd)
{
    const char *names[NCOMMANDS + 1], *near;
    char list[128];
    size_t n = 0;

    /* "a, b, c" to the question, "a, b or c" in the refusal */
    for (size_t i = 0; i < NCOMMANDS; i++) {
        names[i] = commands[i].name;
        text_add(list, sizeof(list), &n, "%s%s",
                 i == 0                      ? ""
                 : i + 1 < NCOMMANDS || !cmd ? ", "
                                             : " or ",
                 names[i]);
    }
    names[NCOMMANDS] = NULL;
    if (cmd == NULL)
        return cli_bad(PROG, "which command? %s", list);
    if ((near = cli_nearest(cmd, names)) != NULL)
        return cli_bad(PROG, "unknown command '%s' (did you mean %s?)", cmd, near);
    return cli_bad(PROG, "unknown command '%s' (%s)", cmd, list);
}

/* A command whose only option is --json: 0 (*json set if given), or 2 after refusing the
 * rest. */
static int json_only(int argc, char **argv, int *json)
{
    static const char *const opts[] = {"--json", NULL};

    for (int i = 1; i < argc; i++) {
        const char *near = cli_nearest(argv[i], opts);
        if (strcmp(argv[i], "--json") == 0)
            *json = 1;
        else if (near != NULL)
            return cli_bad(PROG, "%s: unknown option '%s' (did you mean --json?)", argv[0],
                           argv[i]);
        else
            return cli_bad(PROG, "%s: takes only --json, got '%s'", argv[0], argv[i]);
    }
    return 0;
}

/* The admin socket when --admin-socket is not given (see the usage). */
static const char *admin_path(char *buf, size_t cap)
{
    const char *p = getenv("HCCLD_ADMIN_SOCKET"), *sock = getenv("HCCLD_SOCKET");

    if (p != NULL && *p != '\0') {
        path_from = "HCCLD_ADMIN_SOCKET";
        return p;
    }
    if (sock != NULL && *sock != '\0') {
        uds_admin_beside(sock, buf, cap);
        path_from = "beside HCCLD_SOCKET; --admin-socket or HCCLD_ADMIN_SOCKET names another";
        return buf;
    }
    return DEFAULT_ADMIN;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"admin-socket", required_argument, 0, 'a'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
    char buf[512];
    const char *path = admin_path(buf, sizeof(buf));
    int c, json = 0, rc;

    opterr = 0;
    /* Options before the command; the command parses its own. */
    while ((c = getopt_long(argc, argv, "+a:jh", lo, NULL)) != -1) {
        switch (c) {
        case 'a':
            path = optarg;
            path_from = "--admin-socket";
            break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': cli_version(PROG); return 0;
        default: return cli_bad_option(PROG, NULL, argv, "a:jh", lo);
        }
    }
    if (optind >= argc)
        return bad_command(NULL);
    argc -= optind;
    argv += optind;
    if (strcmp(argv[0], "metrics") == 0 && (json || (argc == 2 && !strcmp(argv[1], "--json")))) {
        fprintf(stderr, "hccld-ctl: metrics is Prometheus's text format and has no --json; "
                        "'status --json' holds the same figures\n");
        return 2;
    }
    const struct command *cmd = NULL;
    for (size_t i = 0; i < NCOMMANDS && cmd == NULL; i++)
        if (strcmp(argv[0], commands[i].name) == 0)
            cmd = &commands[i];
    if (cmd == NULL)
        return bad_command(argv[0]);
    if (cmd->view != CMD_OWN && (rc = json_only(argc, argv, &json)) != 0)
        return rc;
    if (cmd->view == CMD_TOPOLOGY)
        return cmd_topology(path, json);
    if (cmd->view != CMD_OWN)
        return cmd_status(path, json, cmd->view);
    rc = strcmp(argv[0], "watch") == 0 ? ctl_watch(path, json, argc, argv)
                                       : cmd_qos(path, json, argc, argv);
    return rc;
}
