/* hccld-ctl links: the data connections to peer daemons and their health (ctl_links.h). */
#include "ctl_links.h"

#include <jansson.h>
#include <stdio.h>

/* "12.3 MB" style: four significant figures at most, decimal units as the rates use. */
static const char *si(double v, char *buf, size_t cap)
{
    static const char *unit[] = {"", "k", "M", "G", "T", "P"};
    int u = 0;

    while (v >= 1000 && u < 5) {
        v /= 1000;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %sB" : "%.0f %sB", v, unit[u]);
    return buf;
}

static json_t *link_json(const Hccld__DataLink *l)
{
    return json_pack(
        "{s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:i, s:i, s:f, s:f, "
        "s:f, s:b, s:I, s:I, s:s, s:I}",
        "peer", l->peer, "daemon", l->daemon, "transport", l->transport, "comm", (int)l->comm,
        "users", (int)l->users, "nlinks", (int)l->nlinks, "tx_bytes", (json_int_t)l->tx_bytes,
        "rx_bytes", (json_int_t)l->rx_bytes, "segs_out", (json_int_t)l->segs_out, "retrans",
        (json_int_t)l->retrans, "spurious", (json_int_t)l->spurious, "rtt_us", (int)l->rtt_us,
        "rttvar_us", (int)l->rttvar_us, "tx_bytes_per_s", l->tx_bytes_per_s, "rx_bytes_per_s",
        l->rx_bytes_per_s, "retrans_per_s", l->retrans_per_s, "qp_state_bad", (int)l->qp_state_bad,
        "port_errors", (json_int_t)l->port_errors, "port_retries", (json_int_t)l->port_retries,
        "problem", l->problem, "serial", (json_int_t)l->serial);
}

static json_t *peer_json(const Hccld__PeerLinks *p)
{
    return json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:f, s:f}", "peer",
                     p->peer, "daemon", p->daemon, "links", (int)p->links, "tx_bytes",
                     (json_int_t)p->tx_bytes, "rx_bytes", (json_int_t)p->rx_bytes, "retrans",
                     (json_int_t)p->retrans, "segs_out", (json_int_t)p->segs_out, "warnings",
                     (json_int_t)p->warnings, "lost", (json_int_t)p->lost, "rtt_us", (int)p->rtt_us,
                     "tx_bytes_per_s", p->tx_bytes_per_s, "rx_bytes_per_s", p->rx_bytes_per_s);
}

static void print_json(const Hccld__StatusResp *r)
{
    json_t *links = json_array(), *peers = json_array(), *o;

    for (size_t i = 0; i < r->n_data_links; i++)
        json_array_append_new(links, link_json(r->data_links[i]));
    for (size_t i = 0; i < r->n_peer_links; i++)
        json_array_append_new(peers, peer_json(r->peer_links[i]));
    o = json_pack("{s:o, s:o}", "links", links, "peers", peers);
    json_dumpf(o, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(o);
}

static void print_text(const Hccld__StatusResp *r)
{
    char a[32], b[32], c[32], d[32];

    printf("data connections (%zu):\n", r->n_data_links);
    if (r->n_data_links > 0)
        printf("  %-22s %-22s %-14s %5s %10s %10s %10s %10s %8s %7s %8s  %s\n", "daemon",
               "data address", "transport", "comm", "sent", "received", "send/s", "recv/s",
               "retrans", "retr/s", "rtt ms", "problem");
    for (size_t i = 0; i < r->n_data_links; i++) {
        const Hccld__DataLink *l = r->data_links[i];
        printf("  %-22s %-22s %-14s %5u %10s %10s %10s %10s %8llu %7.1f %8.3f  %s\n",
               l->daemon[0] ? l->daemon : "-", l->peer, l->transport, l->comm,
               si((double)l->tx_bytes, a, sizeof(a)), si((double)l->rx_bytes, b, sizeof(b)),
               si(l->tx_bytes_per_s, c, sizeof(c)), si(l->rx_bytes_per_s, d, sizeof(d)),
               (unsigned long long)l->retrans, l->retrans_per_s, l->rtt_us / 1e3,
               l->problem[0] ? l->problem : "-");
    }
    printf("peer daemons (%zu), closed connections included:\n", r->n_peer_links);
    if (r->n_peer_links > 0)
        printf("  %-22s %-22s %5s %10s %10s %8s %8s %5s %8s\n", "daemon", "data address", "open",
               "sent", "received", "retrans", "warnings", "lost", "rtt ms");
    for (size_t i = 0; i < r->n_peer_links; i++) {
        const Hccld__PeerLinks *p = r->peer_links[i];
        printf("  %-22s %-22s %5u %10s %10s %8llu %8llu %5llu %8.3f\n",
               p->daemon[0] ? p->daemon : "-", p->peer, p->links,
               si((double)p->tx_bytes, a, sizeof(a)), si((double)p->rx_bytes, b, sizeof(b)),
               (unsigned long long)p->retrans, (unsigned long long)p->warnings,
               (unsigned long long)p->lost, p->rtt_us / 1e3);
    }
}

void ctl_links_print(const Hccld__StatusResp *r, int json)
{
    if (json)
        print_json(r);
    else
        print_text(r);
}
