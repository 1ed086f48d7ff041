/* hccld-ctl watch (ctl_watch.h). */
#include "ctl_watch.h"

#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "uds.h"

#define RECONNECT_MS 250

static void stamp(uint64_t ms, char *buf, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    size_t n;

    localtime_r(&t, &tm);
    n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03u", (unsigned)(ms % 1000));
}

static void print_json(const Hccld__Event *e, const char *when)
{
    json_t *o = json_pack("{s:s, s:I, s:s, s:s}", "time", when, "time_ms", (json_int_t)e->time_ms,
                          "kind", e->kind, "text", e->text);

    if (e->comm)
        json_object_set_new(o, "comm", json_integer(e->comm));
    if (e->job[0])
        json_object_set_new(o, "job", json_string(e->job));
    if (e->pid)
        json_object_set_new(o, "pid", json_integer(e->pid));
    if (strcmp(e->kind, "client_connected") == 0 || strcmp(e->kind, "client_left") == 0)
        json_object_set_new(o, "uid", json_integer(e->uid));
    if (e->peer[0])
        json_object_set_new(o, "peer", json_string(e->peer));
    if (e->n_ranks > 0 || strcmp(e->kind, "op_stalled") == 0) {
        json_t *a = json_array();
        for (size_t i = 0; i < e->n_ranks; i++)
            json_array_append_new(a, json_integer(e->ranks[i]));
        json_object_set_new(o, "ranks", a);
    }
    if (e->reason[0])
        json_object_set_new(o, "reason", json_string(e->reason));
    if (strcmp(e->kind, "op_stalled") == 0) {
        json_object_set_new(o, "seq", json_integer((json_int_t)e->seq));
        json_object_set_new(o, "waited_s", json_real(e->waited_s));
    }
    if (e->qos_class[0])
        json_object_set_new(o, "qos_class", json_string(e->qos_class));
    if (strcmp(e->kind, "comm_broken") == 0)
        json_object_set_new(o, "result", json_integer(e->result));
    json_dumpf(o, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(o);
}

static void print_event(const Hccld__Event *e, int json)
{
    char when[40];

    stamp(e->time_ms, when, sizeof(when));
    if (json)
        print_json(e, when);
    else
        printf("%s %-16s %s\n", when, e->kind, e->text);
}

/* One connection's stream: returns when it ends (the reason in why). */
static void stream(int fd, int json, uint32_t stall_ms, char *why, size_t cap)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *got;
    Hccld__WatchReq req = HCCLD__WATCH_REQ__INIT;
    uds_conn_t conn;
    int rc;

    uds_conn_init(&conn, fd);
    req.stall_ms = stall_ms;
    m.req_id = 1;
    m.body_case = HCCLD__MSG__BODY_WATCH_REQ;
    m.watch_req = &req;
    if ((rc = uds_send(fd, &m, NULL, 0)) != 0) {
        snprintf(why, cap, "%s", strerror(-rc));
        uds_conn_close(&conn);
        return;
    }
    while ((rc = uds_recv(&conn, &got, -1)) == 0) {
        if (got->body_case == HCCLD__MSG__BODY_EVENT)
            print_event(got->event, json);
        frame_msg_free(got);
    }
    snprintf(why, cap, "%s", rc == -ECONNRESET ? "the daemon closed it" : strerror(-rc));
    uds_conn_close(&conn);
}

int ctl_watch(const char *path, int json, int argc, char **argv)
{
    static const struct option lo[] = {
        {"json", no_argument, 0, 'j'}, {"stall-s", required_argument, 0, 's'}, {0, 0, 0, 0}};
    double stall_s = 10;
    char why[128], *end;
    int c, said = 0;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "js:", lo, NULL)) != -1) {
        if (c == 'j') {
            json = 1;
        } else if (c == 's') {
            stall_s = strtod(optarg, &end);
            if (*end != '\0' || !(stall_s > 0 && stall_s <= 86400)) {
                fprintf(stderr, "hccld-ctl: --stall-s wants seconds in (0, 86400]: %s\n", optarg);
                return 2;
            }
        } else {
            return cli_bad_option("hccld-ctl", "watch", argv, "js:", lo);
        }
    }
    if (optind != argc)
        return cli_bad("hccld-ctl", "watch: takes no argument, got '%s'", argv[optind]);
    setvbuf(stdout, NULL, _IOLBF, 0); /* each event goes out as it comes */
    for (;;) {
        int fd = uds_connect(path);
        if (fd < 0) {
            if (!said)
                fprintf(stderr, "hccld-ctl: cannot connect to %s (%s); trying again\n", path,
                        strerror(-fd));
            said = 1;
            usleep(RECONNECT_MS * 1000);
            continue;
        }
        if (said)
            fprintf(stderr, "hccld-ctl: connected to %s again\n", path);
        said = 0;
        stream(fd, json, (uint32_t)(stall_s * 1000 + 0.5), why, sizeof(why));
        fprintf(stderr, "hccld-ctl: the connection to %s ended (%s); reconnecting\n", path, why);
        said = 1;
    }
}
