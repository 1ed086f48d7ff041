/* Prometheus' text exposition format for a daemon's status (metrics_text.h). */
#include "metrics_text.h"

#include <inttypes.h>

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the format wants it: backslash, double quote and newline escaped. */
static void label_value(FILE *f, const char *s)
{
    for (; s != NULL && *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f);
        if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

static void one(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
    family(f, name, type, help);
    fprintf(f, "%s %" PRIu64 "\n", name, v);
}

typedef struct fam {
    const char *name, *type, *help;
} fam_t;

/* Per QoS class (label class), in the order of class_values. */
static const fam_t class_fams[] = {
    {"hccld_class_sent_bytes_total", "counter", "Bytes a QoS class sent to peer daemons."},
    {"hccld_class_rate_bytes_per_second", "gauge",
     "A class's rate to peer daemons over the last second."},
    {"hccld_class_max_bytes_per_second", "gauge",
     "A class's cap on its rate to peer daemons (0: none)."},
    {"hccld_class_waiting", "gauge", "Communicators a class held back in the last pass."},
    {"hccld_class_clients", "gauge", "Clients in a class."},
};
#define NCLASS_FAMS (sizeof(class_fams) / sizeof(class_fams[0]))

static void class_values(const Hccld__QosClass *c, uint64_t v[NCLASS_FAMS])
{
    /* Prometheus' base unit is the byte; the classes count bits per second. */
    v[0] = c->sent_bytes;
    v[1] = c->rate_bps / 8;
    v[2] = c->max_bw_bps / 8;
    v[3] = c->waiting;
    v[4] = c->clients;
}

/* Per communicator (labels comm, job, class), in the order of comm_values. */
static const fam_t comm_fams[] = {
    {"hccld_comm_ops_total", "counter",
     "Collective pieces a communicator completed on this daemon."},
    {"hccld_comm_ops_in_flight", "gauge", "A communicator's descriptors queued or running."},
    {"hccld_comm_ranks", "gauge", "A communicator's ranks."},
    {"hccld_comm_ranks_joined", "gauge", "A communicator's ranks still connected."},
    {"hccld_comm_broken", "gauge",
     "1 when a communicator is broken (a rank died, a peer was lost, an abort)."},
    {"hccld_comm_suspended_links", "gauge",
     "A communicator's data connections to other daemons that failed and are held for op retry "
     "(its ops wait for them)."},
};
#define NCOMM_FAMS (sizeof(comm_fams) / sizeof(comm_fams[0]))

static void comm_values(const Hccld__CommStatus *c, uint64_t v[NCOMM_FAMS])
{
    v[0] = c->ops_done;
    v[1] = c->ops_in_flight;
    v[2] = c->nranks;
    v[3] = c->joined;
    v[4] = c->broken;
    v[5] = c->suspended_links;
}

/* Per peer daemon (label peer: its data address), in the order of peer_values. */
static const fam_t peer_fams[] = {
    {"hccld_peer_sent_bytes_total", "counter",
     "Bytes of the data connections to a peer daemon that it acknowledged (TCP) or that we sent "
     "(RDMA), closed connections included."},
    {"hccld_peer_received_bytes_total", "counter",
     "Bytes received on the data connections from a peer daemon, closed ones included."},
    {"hccld_peer_retransmits_total", "counter",
     "TCP segments retransmitted on the data connections to a peer daemon."},
    {"hccld_peer_sent_segments_total", "counter",
     "TCP segments sent on the data connections to a peer daemon (retransmits included)."},
    {"hccld_peer_link_warnings_total", "counter",
     "Warnings the link monitor logged about a peer daemon's data connections (retransmits or "
     "round trip jumped, RDMA errors)."},
    {"hccld_peer_connections_lost_total", "counter",
     "Data connections to a peer daemon that failed (the peer died, a reset, a timeout)."},
    {"hccld_peer_data_connections", "gauge", "Data connections to a peer daemon open now."},
    {"hccld_peer_rtt_seconds", "gauge",
     "Smoothed TCP round trip to a peer daemon (the largest of its open connections)."},
    {"hccld_peer_send_rate_bytes_per_second", "gauge",
     "Rate to a peer daemon over the link monitor's last interval (1 s)."},
    {"hccld_peer_receive_rate_bytes_per_second", "gauge",
     "Rate from a peer daemon over the link monitor's last interval (1 s)."},
    {"hccld_peer_link_resumes_total", "counter",
     "Times a data connection to a peer daemon failed and came back under op retry (a reset or a "
     "timeout that cost no op), closed connections included."},
    {"hccld_peer_link_suspended_seconds_total", "counter",
     "Seconds the data connections to a peer daemon spent suspended under op retry, waiting to "
     "come back (their comms' ops waiting), closed connections included."},
    {"hccld_peer_links_suspended", "gauge",
     "Sockets of the data connections to a peer daemon suspended now under op retry."},
};
#define NPEER_FAMS (sizeof(peer_fams) / sizeof(peer_fams[0]))

static void peer_values(const Hccld__PeerLinks *p, double v[NPEER_FAMS])
{
    v[0] = (double)p->tx_bytes;
    v[1] = (double)p->rx_bytes;
    v[2] = (double)p->retrans;
    v[3] = (double)p->segs_out;
    v[4] = (double)p->warnings;
    v[5] = (double)p->lost;
    v[6] = p->links;
    v[7] = p->rtt_us / 1e6;
    v[8] = p->tx_bytes_per_s;
    v[9] = p->rx_bytes_per_s;
    v[10] = (double)p->resumes;
    v[11] = p->suspended_s;
    v[12] = p->suspended;
}

static void peer_families(FILE *f, const Hccld__StatusResp *r)
{
    double v[NPEER_FAMS];

    family(f, "hccld_peer_info", "gauge",
           "1 for each peer daemon whose advertised address (label daemon: what hccl-run, the "
           "control connection and peer events name it by) is known; label peer is its data "
           "address, as in the other hccld_peer_ families, to join on.");
    for (size_t i = 0; i < r->n_peer_links; i++) {
        if (r->peer_links[i]->daemon[0] == '\0')
            continue;
        fprintf(f, "hccld_peer_info{peer=\"");
        label_value(f, r->peer_links[i]->peer);
        fprintf(f, "\",daemon=\"");
        label_value(f, r->peer_links[i]->daemon);
        fprintf(f, "\"} 1\n");
    }

    for (size_t k = 0; k < NPEER_FAMS; k++) {
        family(f, peer_fams[k].name, peer_fams[k].type, peer_fams[k].help);
        for (size_t i = 0; i < r->n_peer_links; i++) {
            peer_values(r->peer_links[i], v);
            fprintf(f, "%s{peer=\"", peer_fams[k].name);
            label_value(f, r->peer_links[i]->peer);
            fprintf(f, "\"} %.17g\n", v[k]);
        }
    }
}

static void class_families(FILE *f, const Hccld__QosResp *q)
{
    uint64_t v[NCLASS_FAMS];

    for (size_t k = 0; k < NCLASS_FAMS; k++) {
        family(f, class_fams[k].name, class_fams[k].type, class_fams[k].help);
        for (size_t i = 0; i < q->n_classes; i++) {
            class_values(q->classes[i], v);
            fprintf(f, "%s{class=\"", class_fams[k].name);
            label_value(f, q->classes[i]->name);
            fprintf(f, "\"} %" PRIu64 "\n", v[k]);
        }
    }
}

static void comm_families(FILE *f, const Hccld__StatusResp *r)
{
    uint64_t v[NCOMM_FAMS];

    for (size_t k = 0; k < NCOMM_FAMS; k++) {
        family(f, comm_fams[k].name, comm_fams[k].type, comm_fams[k].help);
        for (size_t i = 0; i < r->n_comms; i++) {
            const Hccld__CommStatus *c = r->comms[i];
            comm_values(c, v);
            fprintf(f, "%s{comm=\"%u\",job=\"", comm_fams[k].name, c->comm_id);
            label_value(f, c->job_id);
            fputs("\",class=\"", f);
            label_value(f, c->qos_class);
            fprintf(f, "\"} %" PRIu64 "\n", v[k]);
        }
    }
}

void metrics_text(FILE *f, const Hccld__StatusResp *r, const Hccld__QosResp *q)
{
    uint64_t cum = 0;

    family(f, "hccld_up_seconds", "gauge", "Time since the daemon started.");
    fprintf(f, "hccld_up_seconds %.3f\n", (double)r->uptime_ms / 1000);
    one(f, "hccld_ops_total", "counter",
        "Collective pieces completed on this daemon: run by it, or by a comm's ranks among "
        "themselves in shared memory (level 0 cooperative).",
        r->ops_done);
    one(f, "hccld_ops_in_flight", "gauge", "Descriptors queued or running.", r->ops_in_flight);
    one(f, "hccld_clients", "gauge", "Connected client processes.", r->n_clients);
    one(f, "hccld_comms", "gauge", "Communicators.", r->n_comms);
    one(f, "hccld_clients_rejoined_total", "counter",
        "Client processes that came back with their segment after a restart of the daemon.",
        r->clients_rejoined);
    one(f, "hccld_comms_rejoined_total", "counter",
        "Communicators registered again after a restart of the daemon.", r->comms_rejoined);
    one(f, "hccld_comms_rejoining", "gauge",
        "Communicators whose ranks are coming back after a restart of the daemon.", r->n_rejoining);
    one(f, "hccld_net_sent_bytes_total", "counter", "Payload bytes sent to peer daemons.",
        r->net_tx_bytes);
    one(f, "hccld_net_received_bytes_total", "counter", "Payload bytes received from peer daemons.",
        r->net_rx_bytes);
    one(f, "hccld_data_connections", "gauge",
        "Data connections to peer daemons open (a split's children share their parent's).",
        r->data_conns);
    family(f, "hccld_op_duration_seconds", "histogram",
           "Collective pieces the daemon ran (inside the node or across daemons), and ops the "
           "ranks of one daemon ran among themselves (timed by their rank 0, in the bucket of "
           "the next power of 4 us), by duration.");
    for (size_t k = 0; k < r->n_lat_bucket; k++) {
        cum += r->lat_bucket[k];
        if (k + 1 < r->n_lat_bucket)
            fprintf(f, "hccld_op_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                    (double)(1ull << k) / 1e6, cum);
    }
    fprintf(f, "hccld_op_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
    fprintf(f, "hccld_op_duration_seconds_sum %.6f\n", (double)r->lat_sum_us / 1e6);
    fprintf(f, "hccld_op_duration_seconds_count %" PRIu64 "\n", r->lat_count);
    comm_families(f, r);
    peer_families(f, r);
    if (q != NULL)
        class_families(f, q);
}
