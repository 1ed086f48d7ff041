/* The admin socket: hccld-ctl asks, the daemon answers (status here, qos in qos_admin.c). */
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "coop.h"
#include "log.h"
#include "reduce.h"
#include "server/server.h"
#include "server/topo.h"

/* Pieces every rank has posted: the ranks' own count of collectives run among themselves. */
static uint64_t coop_pieces_done(const coop_ctl_t *ctl)
{
    uint64_t low = UINT64_MAX;

    for (uint32_t q = 0; q < ctl->nranks; q++) {
        uint64_t v = coop_posted(&ctl->slot[q]);
        low = v < low ? v : low;
    }
    return low == UINT64_MAX ? 0 : low;
}

static uint64_t now_ms(server_t *srv)
{
    return uv_now(srv->loop);
}

static void fill_clients(server_t *srv, Hccld__StatusResp *r, Hccld__ClientStatus *cs,
                         Hccld__ClientStatus **csp)
{
    size_t n = 0;

    for (session_t *s = srv->sessions; s != NULL; s = s->next) {
        engine_session_stats_t st = {0};
        if (s->kind != SESSION_CLIENT || s->state != SESSION_READY)
            continue;
        engine_get_session_stats(srv->eng, s->sid, &st);
        hccld__client_status__init(&cs[n]);
        cs[n].client_id = s->sid;
        cs[n].pid = (uint32_t)s->pid;
        cs[n].uid = (uint32_t)s->uid;
        cs[n].job_name = s->job_name;
        cs[n].ops_submitted = st.submitted;
        cs[n].ops_completed = st.completed;
        cs[n].qos_class = srv->qos.cls[s->qos_class].name;
        csp[n] = &cs[n];
        n++;
    }
    r->n_clients = n;
    r->clients = csp;
}

/* Pieces each rank of a coop comm posted in the control block. */
static void coop_posted_all(const coop_ctl_t *ctl, engine_comm_stats_t *st)
{
    st->nlocal = ctl->nranks < ENGINE_STATS_RANKS ? ctl->nranks : ENGINE_STATS_RANKS;
    for (uint32_t q = 0; q < st->nlocal; q++) {
        st->posted[q] = coop_posted(&ctl->slot[q]);
        st->ranks[q] = q;
    }
}

/* posted, ranks, links and link_txt: ENGINE_STATS_RANKS entries per comm, for the answer's
 * per-rank progress and per-node connections. */
static void fill_comms(server_t *srv, Hccld__StatusResp *r, Hccld__CommStatus *cm,
                       Hccld__CommStatus **cmp, uint64_t *posted, uint32_t *ranks, char **links,
                       char (*link_txt)[ENGINE_LINK_MAX], Hccld__LinkFigures *lf)
{
    size_t n = 0;

    for (scomm_t *c = srv->comms; c != NULL; c = c->next) {
        engine_comm_stats_t st = {0};
        engine_get_comm_stats(srv->eng, c->id, &st);
        if (c->coop != NULL) {
            st.ops_done += coop_pieces_done(c->coop);
            coop_posted_all(c->coop, &st);
        }
        hccld__comm_status__init(&cm[n]);
        cm[n].comm_id = c->id;
        cm[n].nranks = c->nranks;
        cm[n].joined = c->nranks - c->left;
        cm[n].ops_done = st.ops_done;
        cm[n].ops_in_flight = st.queued;
        cm[n].job_id = c->job_hex;
        cm[n].level0 = c->coop != NULL ? "coop" : "daemon";
        cm[n].nnodes = c->nnodes;
        cm[n].qos_class = c->qos_class >= 0 && c->qos_class < srv->qos.ncls
                              ? srv->qos.cls[c->qos_class].name
                              : "";
        cm[n].algo = st.algo >= 0 ? (char *)algo_name(st.algo) : "";
        cm[n].rank0 = st.nlocal > 0 ? st.ranks[0] : 0;
        memcpy(ranks + n * ENGINE_STATS_RANKS, st.ranks, st.nlocal * sizeof(*st.ranks));
        cm[n].ranks = ranks + n * ENGINE_STATS_RANKS;
        cm[n].n_ranks = st.nlocal;
        cm[n].on_wire = st.on_wire;
        memcpy(posted + n * ENGINE_STATS_RANKS, st.posted, st.nlocal * sizeof(*st.posted));
        cm[n].posted = posted + n * ENGINE_STATS_RANKS;
        cm[n].n_posted = st.nlocal;
        for (uint32_t k = 0; k < st.nnodes; k++) {
            char *t = link_txt[n * ENGINE_STATS_RANKS + k];
            memcpy(t, st.link[k], ENGINE_LINK_MAX);
            links[n * ENGINE_STATS_RANKS + k] = t;
        }
        cm[n].links = links + n * ENGINE_STATS_RANKS;
        cm[n].n_links = st.nnodes;
        if (st.measured) {
            hccld__link_figures__init(&lf[n]);
            lf[n].latency_us = st.alpha_us;
            lf[n].gbps = st.gbps;
            lf[n].reduce_gbps = st.reduce_gbps;
            lf[n].msg_overhead_us = st.overhead_us;
            lf[n].daemons_per_core = st.host_load;
            cm[n].link_figures = &lf[n];
        }
        cmp[n] = &cm[n];
        n++;
    }
    r->n_comms = n;
    r->comms = cmp;
}

static void send_status(server_t *srv, session_t *s, uint64_t req_id)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__StatusResp r = HCCLD__STATUS_RESP__INIT;
    size_t ns = srv->nsessions + 1, nc = 1;
    engine_stats_t st;

    for (scomm_t *c = srv->comms; c != NULL; c = c->next)
        nc++;
    Hccld__ClientStatus *cs = calloc(ns, sizeof(*cs));
    Hccld__ClientStatus **csp = calloc(ns, sizeof(*csp));
    Hccld__CommStatus *cm = calloc(nc, sizeof(*cm));
    Hccld__CommStatus **cmp = calloc(nc, sizeof(*cmp));
    uint64_t *posted = calloc(nc * ENGINE_STATS_RANKS, sizeof(*posted));
    uint32_t *ranks = calloc(nc * ENGINE_STATS_RANKS, sizeof(*ranks));
    char **links = calloc(nc * ENGINE_STATS_RANKS, sizeof(*links));
    char(*link_txt)[ENGINE_LINK_MAX] = calloc(nc * ENGINE_STATS_RANKS, sizeof(*link_txt));
    Hccld__LinkFigures *lf = calloc(nc, sizeof(*lf));
    if (cs == NULL || csp == NULL || cm == NULL || cmp == NULL || posted == NULL || ranks == NULL ||
        links == NULL || link_txt == NULL || lf == NULL)
        goto out;
    engine_get_stats(srv->eng, &st);
    r.version = HCCLD_VERSION;
    r.uptime_ms = now_ms(srv) - srv->started_ms;
    r.socket = (char *)srv->cfg.socket_path;
    r.ops_in_flight = st.ops_queued;
    r.ops_done = st.ops_done;
    r.net_tx_bytes = st.net_tx_bytes;
    r.net_rx_bytes = st.net_rx_bytes;
    r.n_lat_bucket = ENGINE_LAT_BUCKETS;
    r.lat_bucket = st.lat_bucket;
    r.lat_sum_us = st.lat_sum_us;
    r.lat_count = st.lat_count;
    r.data_conns = st.data_conns;
    r.workers = engine_workers(srv->eng);
    r.simd = (char *)reduce_isa();
    r.advertised = srv->advertised;
    fill_clients(srv, &r, cs, csp);
    fill_comms(srv, &r, cm, cmp, posted, ranks, links, link_txt, lf);
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_STATUS_RESP;
    m.status_resp = &r;
    /* A status of many clients may not fit one frame; then it is cut to what fits. */
    while (session_send(s, &m) != 0 && (r.n_clients > 0 || r.n_comms > 0)) {
        r.n_clients /= 2;
        r.n_comms /= 2;
    }
out:
    free(cs);
    free(csp);
    free(cm);
    free(cmp);
    free(posted);
    free(ranks);
    free(links);
    free(link_txt);
    free(lf);
}

static void send_topology(server_t *srv, session_t *s, uint64_t req_id)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__TopologyResp r = HCCLD__TOPOLOGY_RESP__INIT;

    if (topo_describe(srv->topo, &r) != 0)
        WARN("IPC", "no topology to describe (hwloc failed at start)");
    r.nic = srv->nic;
    r.pinned = srv->pinned;
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_TOPOLOGY_RESP;
    m.topology_resp = &r;
    session_send(s, &m);
    topo_resp_free(&r);
}

void admin_handle(server_t *srv, session_t *s, const Hccld__Msg *m)
{
    switch (m->body_case) {
    case HCCLD__MSG__BODY_STATUS_REQ: send_status(srv, s, m->req_id); break;
    case HCCLD__MSG__BODY_QOS_REQ: qos_admin_handle(srv, s, m->req_id, m->qos_req); break;
    case HCCLD__MSG__BODY_TOPOLOGY_REQ: send_topology(srv, s, m->req_id); break;
    default:
        WARN("IPC", "admin pid %d sent an unknown request (%d)", (int)s->pid, (int)m->body_case);
        session_close(s);
        break;
    }
}
