/* The daemon's status as the admin socket answers it (status.h). */
#include "server/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo_id.h"
#include "coop.h"
#include "reduce.h"
#include "server/link_mon.h"
#include "server/server.h"
#include "text.h"

/* The ops that ranks ran among themselves (cooperative comms, lanes), in the duration
 * histogram: a count under 4^j us goes to the daemon's bucket under 2^2j us (possibly one too
 * high), the rest to the last. */
static void ranks_durations(server_t *srv, engine_stats_t *st)
{
    uint64_t lat[SHM_LAT_BUCKETS], sum_us;

    form_ranks_lat(srv->form, lat, &sum_us);
    for (unsigned j = 0; j < SHM_LAT_BUCKETS; j++) {
        unsigned k =
            j + 1 < SHM_LAT_BUCKETS && 2 * j < ENGINE_LAT_BUCKETS ? 2 * j : ENGINE_LAT_BUCKETS - 1;
        st->lat_bucket[k] += lat[j];
        st->lat_count += lat[j];
    }
    st->lat_sum_us += sum_us;
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
        engine_get_session_stats(srv->eng, s->fc.sid, &st);
        hccld__client_status__init(&cs[n]);
        cs[n].client_id = s->fc.sid;
        cs[n].pid = (uint32_t)s->fc.pid;
        cs[n].uid = (uint32_t)s->fc.uid;
        cs[n].job_name = s->fc.job_name;
        cs[n].ops_submitted = st.submitted;
        cs[n].ops_completed = st.completed;
        cs[n].qos_class = srv->qos.cls[s->fc.qos_class].name;
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

void status_comm_stats(server_t *srv, const form_comm_t *c, engine_comm_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    engine_get_comm_stats(srv->eng, c->id, st);
    if (c->coop != NULL) {
        st->ops_done += coop_pieces_done(c->coop);
        coop_posted_all(c->coop, st);
    }
    st->ops_done += c->lane_ops; /* as of the last fold (status_build does one first) */
}

const char *status_daemon_named(const form_comm_t *c, uint32_t node)
{
    return c->nodes != NULL && node < c->nnodes ? c->nodes[node] : "(address unknown)";
}

void status_waiting_on(const form_comm_t *c, const engine_comm_stats_t *st, char *text, size_t cap,
                       uint32_t *ranks, uint32_t *n_p)
{
    size_t at = 0;

    if (ranks != NULL)
        *n_p = 0;
    text[0] = '\0';
    if (!st->on_wire || st->nwaiting == 0)
        return;
    text_add(text, cap, &at, "round %u of %u across daemons waits on", st->round + 1, st->nrounds);
    for (uint32_t k = 0; k < st->nwaiting; k++) {
        const wait_info_t *w = &st->waiting[k];
        uint32_t shown = w->nranks < WAIT_INFO_RANKS ? w->nranks : WAIT_INFO_RANKS;
        text_add(text, cap, &at, "%s the daemon of rank%s",
                 k == 0                  ? ""
                 : k + 1 == st->nwaiting ? ", and"
                                         : ",",
                 w->nranks > 1 ? "s" : "");
        for (uint32_t j = 0; j < shown; j++) {
            text_add(text, cap, &at, "%s %u", j ? "," : "", w->ranks[j]);
            if (ranks != NULL)
                ranks[(*n_p)++] = w->ranks[j];
        }
        if (shown < w->nranks)
            text_add(text, cap, &at, " (of %u)", w->nranks);
        text_add(text, cap, &at, " at %s%s", status_daemon_named(c, w->node),
                 w->unstarted ? ", which has not started it" : "");
    }
}

/* posted, ranks, links and link_txt: ENGINE_STATS_RANKS entries per comm, for the answer's
 * per-rank progress and per-node connections. */
static void fill_comms(server_t *srv, Hccld__StatusResp *r, Hccld__CommStatus *cm,
                       Hccld__CommStatus **cmp, uint64_t *posted, uint32_t *ranks, char **links,
                       char (*link_txt)[ENGINE_LINK_MAX], Hccld__LinkFigures *lf,
                       char (*waiting)[STATUS_WAIT_TEXT])
{
    size_t n = 0;

    for (const form_comm_t *c = form_comms(srv->form); c != NULL; c = c->next) {
        engine_comm_stats_t st;
        status_comm_stats(srv, c, &st);
        hccld__comm_status__init(&cm[n]);
        cm[n].comm_id = c->id;
        cm[n].nranks = c->nranks;
        cm[n].joined = c->nranks - c->left;
        cm[n].ops_done = st.ops_done;
        cm[n].ops_in_flight = st.queued;
        cm[n].job_id = (char *)c->job_hex;
        cm[n].level0 = c->coop != NULL ? "coop" : "daemon";
        cm[n].nnodes = c->nnodes;
        cm[n].broken = st.broken != 0;
        cm[n].qos_class = c->qos_class >= 0 && c->qos_class < srv->qos.ncls
                              ? srv->qos.cls[c->qos_class].name
                              : "";
        cm[n].algo = st.algo >= 0 ? (char *)algo_name(st.algo) : "";
        cm[n].rank0 = st.nlocal > 0 ? st.ranks[0] : 0;
        memcpy(ranks + n * ENGINE_STATS_RANKS, st.ranks, st.nlocal * sizeof(*st.ranks));
        cm[n].ranks = ranks + n * ENGINE_STATS_RANKS;
        cm[n].n_ranks = st.nlocal;
        cm[n].on_wire = st.on_wire;
        cm[n].suspended_links = st.nsuspended;
        cm[n].suspended_ms = st.suspended_ns / 1000000;
        status_waiting_on(c, &st, waiting[n], STATUS_WAIT_TEXT, NULL, NULL);
        cm[n].waiting_on = waiting[n];
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

int status_build(server_t *srv, status_t *x)
{
    Hccld__StatusResp *r = &x->r;
    size_t ns = srv->nsessions + 1, nc = 1;
    engine_stats_t st;

    memset(x, 0, sizeof(*x));
    hccld__status_resp__init(r);
    for (const form_comm_t *c = form_comms(srv->form); c != NULL; c = c->next)
        nc++;
    x->cs = calloc(ns, sizeof(*x->cs));
    x->csp = calloc(ns, sizeof(*x->csp));
    x->cm = calloc(nc, sizeof(*x->cm));
    x->cmp = calloc(nc, sizeof(*x->cmp));
    x->posted = calloc(nc * ENGINE_STATS_RANKS, sizeof(*x->posted));
    x->ranks = calloc(nc * ENGINE_STATS_RANKS, sizeof(*x->ranks));
    x->links = calloc(nc * ENGINE_STATS_RANKS, sizeof(*x->links));
    x->link_txt = calloc(nc * ENGINE_STATS_RANKS, sizeof(*x->link_txt));
    x->lf = calloc(nc, sizeof(*x->lf));
    x->waiting = calloc(nc, sizeof(*x->waiting));
    if (x->waiting == NULL || x->cs == NULL || x->csp == NULL || x->cm == NULL || x->cmp == NULL ||
        x->posted == NULL || x->ranks == NULL || x->links == NULL || x->link_txt == NULL ||
        x->lf == NULL) {
        status_free(x);
        return -1;
    }
    lane_count_fold(srv);
    engine_get_stats(srv->eng, &st);
    ranks_durations(srv, &st);
    memcpy(x->lat_bucket, st.lat_bucket, sizeof(x->lat_bucket));
    r->version = HCCLD_VERSION;
    r->uptime_ms = now_ms(srv) - srv->started_ms;
    r->socket = (char *)srv->cfg.socket_path;
    r->ops_in_flight = st.ops_queued;
    /* With the ops that ranks ran among themselves, live comms or gone: the pieces of
     * cooperative comms, and lane ops. */
    r->ops_done = st.ops_done + form_coop_pieces_retired(srv->form) + form_lane_ops(srv->form);
    for (const form_comm_t *c = form_comms(srv->form); c != NULL; c = c->next)
        r->ops_done += c->coop != NULL ? coop_pieces_done(c->coop) : 0;
    r->net_tx_bytes = st.net_tx_bytes;
    r->net_rx_bytes = st.net_rx_bytes;
    r->n_lat_bucket = ENGINE_LAT_BUCKETS;
    r->lat_bucket = x->lat_bucket;
    r->lat_sum_us = st.lat_sum_us;
    r->lat_count = st.lat_count;
    r->data_conns = st.data_conns;
    r->workers = engine_workers(srv->eng);
    r->simd = (char *)reduce_isa();
    r->advertised = srv->advertised;
    r->metrics_addr = srv->metrics_addr;
    link_mon_status(srv->links, r);
    r->clients_rejoined = srv->clients_rejoined;
    r->comms_rejoined = form_comms_rejoined(srv->form);
    unsigned nrj = form_rejoins_view(srv->form, x->rv, STATUS_REJOINS_MAX, now_ms(srv));
    r->n_rejoining = nrj < STATUS_REJOINS_MAX ? nrj : STATUS_REJOINS_MAX;
    for (size_t i = 0; i < r->n_rejoining; i++) {
        Hccld__CommRejoining *j = &x->rj[i];
        hccld__comm_rejoining__init(j);
        j->comm_id = x->rv[i].comm_id;
        j->nranks = x->rv[i].nranks;
        j->back = x->rv[i].back;
        j->missing = x->rv[i].missing;
        j->left_ms = x->rv[i].left_ms;
        j->coop = x->rv[i].coop;
        x->rjp[i] = j;
    }
    r->rejoining = x->rjp;
    fill_clients(srv, r, x->cs, x->csp);
    fill_comms(srv, r, x->cm, x->cmp, x->posted, x->ranks, x->links, x->link_txt, x->lf,
               x->waiting);
    return 0;
}

void status_free(status_t *x)
{
    free(x->cs);
    free(x->csp);
    free(x->cm);
    free(x->cmp);
    free(x->posted);
    free(x->ranks);
    free(x->links);
    free(x->link_txt);
    free(x->lf);
    free(x->waiting);
    memset(x, 0, sizeof(*x));
}
