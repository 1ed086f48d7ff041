#include "fault_inject.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_loop.h"
#include "frame.h"
#include "harness.h"

static int spawn(fi_daemons_t *d, unsigned k)
{
    harness_daemon_opts_t o = {.dir = d->dirs[k], .listen = d->listen[k], .die_with_parent = 1};

    d->pids[k] = harness_daemon_spawn_opts(&o, d->socks[k], sizeof(d->socks[k]));
    if (d->pids[k] <= 0) {
        d->pids[k] = 0;
        return -1;
    }
    return 0;
}

int fi_start(fi_daemons_t *d, unsigned n)
{
    memset(d, 0, sizeof(*d));
    d->n = n;
    for (unsigned k = 0; k < n; k++) {
        char addr[64];
        snprintf(d->dirs[k], sizeof(d->dirs[k]), "/tmp/hccld-fault-XXXXXX");
        snprintf(d->listen[k], sizeof(d->listen[k]), "127.0.0.1:0");
        if (mkdtemp(d->dirs[k]) == NULL || spawn(d, k) != 0 ||
            harness_daemon_addr(d->socks[k], addr, sizeof(addr)) != 0) {
            fprintf(stderr, "fault: daemon %u did not start\n", k);
            fi_stop(d);
            return -1;
        }
        snprintf(d->listen[k], sizeof(d->listen[k]), "%s", addr);
    }
    setenv("HCCLD_SOCKET", d->socks[0], 1);
    return 0;
}

int fi_restart(fi_daemons_t *d, unsigned k)
{
    return d->pids[k] == 0 ? spawn(d, k) : -1;
}

int fi_signal(fi_daemons_t *d, unsigned k, int sig, unsigned timeout_s)
{
    int rc = 0;

    if (d->pids[k] == 0)
        return -1;
    if (sig == SIGTERM) {
        rc = harness_daemon_stop_within(d->pids[k], timeout_s) == 0 ? 0 : -1;
    } else {
        kill(d->pids[k], sig);
        waitpid(d->pids[k], NULL, 0);
    }
    d->pids[k] = 0;
    return rc;
}

int fi_stop(fi_daemons_t *d)
{
    int bad = 0;

    for (unsigned k = 0; k < d->n; k++) {
        char path[300];
        if (d->pids[k] != 0 && !harness_alive(d->pids[k]))
            bad++; /* it died, and was reaped just now */
        else if (d->pids[k] != 0)
            bad += harness_daemon_stop_within(d->pids[k], 20) != 0;
        d->pids[k] = 0;
        if (d->dirs[k][0] == '\0')
            continue;
        /* A daemon that was killed left its sockets. */
        snprintf(path, sizeof(path), "%s/hccld.sock", d->dirs[k]);
        unlink(path);
        snprintf(path, sizeof(path), "%s/hccld-admin.sock", d->dirs[k]);
        unlink(path);
        rmdir(d->dirs[k]);
    }
    setenv("HCCLD_SOCKET", harness_socket(), 1);
    return bad;
}

int fi_answers(const fi_daemons_t *d, unsigned k)
{
    Hccld__Msg *st = d->pids[k] != 0 ? harness_daemon_status(d->socks[k]) : NULL;

    if (st != NULL)
        frame_msg_free(st);
    return st != NULL;
}

/* A figure of daemon k's links to its peers, summed over them (status), or -1 if it does not
 * answer. */
static int peer_sum(const fi_daemons_t *d, unsigned k, uint64_t (*of)(const Hccld__PeerLinks *))
{
    Hccld__Msg *st = d->pids[k] != 0 ? harness_daemon_status(d->socks[k]) : NULL;
    uint64_t sum = 0;

    if (st == NULL)
        return -1;
    for (size_t i = 0; i < st->status_resp->n_peer_links; i++)
        sum += of(st->status_resp->peer_links[i]);
    frame_msg_free(st);
    return (int)sum;
}

static uint64_t lost_of(const Hccld__PeerLinks *p)
{
    return p->lost;
}

static uint64_t resumes_of(const Hccld__PeerLinks *p)
{
    return p->resumes;
}

int fi_links_lost(const fi_daemons_t *d, unsigned k)
{
    return peer_sum(d, k, lost_of);
}

int fi_links_resumed(const fi_daemons_t *d, unsigned k)
{
    return peer_sum(d, k, resumes_of);
}

/* Appends " or sport = :P or dport = :P" for the port of addr ("IP:PORT"). */
static void add_port(char *f, size_t cap, const char *addr)
{
    const char *colon = strrchr(addr, ':');
    size_t len = strlen(f);

    if (colon != NULL && atoi(colon + 1) > 0)
        snprintf(f + len, cap - len, "%ssport = :%d or dport = :%d", len > 0 ? " or " : "",
                 atoi(colon + 1), atoi(colon + 1));
}

/* The filter of every control and data port, once each daemon lists a data connection. */
static int link_filter(const fi_daemons_t *d, char *f, size_t cap)
{
    f[0] = '\0';
    for (unsigned k = 0; k < d->n; k++) {
        Hccld__Msg *st = d->pids[k] != 0 ? harness_daemon_status(d->socks[k]) : NULL;
        size_t links = st != NULL ? st->status_resp->n_data_links : 0;
        if (st != NULL) {
            add_port(f, cap, st->status_resp->advertised);
            for (size_t i = 0; i < links; i++)
                add_port(f, cap, st->status_resp->data_links[i]->peer);
            frame_msg_free(st);
        }
        if (links == 0)
            return -1;
    }
    return 0;
}

int fi_reset_links(const fi_daemons_t *d, double timeout_s, double *at)
{
    char filter[2048], cmd[2300], out[8192];
    double until = fl_now() + timeout_s;
    int n = 0;

    while (link_filter(d, filter, sizeof(filter)) != 0)
        if (fl_now() > until)
            return -1;
        else
            usleep(50 * 1000);
    /* Both ends are ours: a port of a daemon's listener on 127.0.0.1, to or from 127.0.0.1. */
    snprintf(cmd, sizeof(cmd),
             "timeout 10 ss -K -H -t -n src 127.0.0.1 and dst 127.0.0.1 and '( %s )'", filter);
    *at = fl_now();
    if (harness_sh(0, out, sizeof(out), cmd) != 0)
        return -1;
    for (const char *p = out; (p = strchr(p, '\n')) != NULL; p++)
        n++;
    /* Killing one end resets the other, which is then gone before ss reaches it. */
    if (getenv("HCCLD_TEST_REPORT") != NULL)
        fprintf(stderr, "fault: %s\n%s", cmd, out);
    return n;
}

int fi_reset_ranks(const pid_t *pids, unsigned n)
{
    char out[65536], filter[4096] = "", cmd[4400], local[64], want[32];
    int found = 0;

    if (harness_sh(0, out, sizeof(out), "ss -H -t -n -p src 127.0.0.1 and dst 127.0.0.1") != 0)
        return -1;
    for (char *line = out, *end; *line != '\0'; line = end + 1) {
        if ((end = strchr(line, '\n')) == NULL)
            break;
        *end = '\0';
        for (unsigned r = 0; r < n; r++) {
            snprintf(want, sizeof(want), "pid=%d,", (int)pids[r]);
            if (strstr(line, want) != NULL && sscanf(line, "%*s %*s %*s %63s", local) == 1) {
                add_port(filter, sizeof(filter), local);
                found++;
                break;
            }
        }
    }
    if (found == 0)
        return 0;
    snprintf(cmd, sizeof(cmd),
             "timeout 10 ss -K -H -t -n src 127.0.0.1 and dst 127.0.0.1 and '( %s )'", filter);
    if (harness_sh(0, out, sizeof(out), cmd) != 0)
        return -1;
    if (getenv("HCCLD_TEST_REPORT") != NULL)
        fprintf(stderr, "fault: %s\n%s", cmd, out);
    return found;
}
