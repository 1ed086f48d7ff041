/* The link monitor (link_mon.h). */
#include "server/link_mon.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "log.h"
#include "server/events.h"
#include "server/server.h"
#include "text.h"

#define LINK_CHECK_MS_DEFAULT 1000
#define MON_PEERS_MAX 4096 /* peer daemons whose totals are kept; more are not counted */
#define MON_NAMES_MAX 256  /* data addresses whose daemon's advertised address is kept */
#define PROBLEM_MAX 160

typedef struct mon_link {
    link_view_t v;    /* the last sample */
    link_info_t prev; /* the one before */
    uint64_t prev_ms;
    double tx_bps, rx_bps, retrans_ps;
    uint32_t rtt_base_us;
    char problem[PROBLEM_MAX]; /* the last finding; empty while healthy */
    char found[PROBLEM_MAX];   /* this sample's */
    int bad;
    uint64_t bad_until_ms, warned_ms;
    uint64_t walk;   /* the sample that saw it last */
    int failed_told; /* its failure was an event */
    uint32_t peer;   /* index in peers (never removed), or UINT32_MAX */
} mon_link_t;

typedef struct mon_peer {
    char addr[LINK_PEER_MAX];
    char daemon[LINK_PEER_MAX]; /* its advertised address, once a comm named it; kept after */
    uint64_t tx_closed, rx_closed, retrans_closed, segs_closed; /* of its closed connections */
    uint64_t resumes_closed, suspended_ns_closed;
    uint64_t warnings, lost;
} mon_peer_t;

/* The advertised address (what peer events name a daemon by) of a data address. */
typedef struct mon_name {
    char data[LINK_PEER_MAX], name[LINK_PEER_MAX];
} mon_name_t;

struct link_mon {
    server_t *srv;
    uv_timer_t timer;
    uv_timer_t soon; /* link_mon_check_failed's walk, once per loop turn however often asked */
    int closing;     /* handles link_mon_stop closed and not yet told closed */
    uint64_t period_ms;
    uint64_t walk;
    int failed_only; /* this walk looks for failures only (link_mon_check_failed) */
    mon_link_t *links;
    uint32_t nlinks, links_cap;
    mon_peer_t *peers;
    uint32_t npeers, peers_cap;
    mon_name_t names[MON_NAMES_MAX]; /* a ring: the oldest goes first */
    uint32_t nnames;
    /* what link_mon_status hands out */
    Hccld__DataLink *dl, **dlp;
    Hccld__PeerLinks *pl, **plp;
    uint32_t ndl, npl;
};

static int grow(void **v, uint32_t *cap, uint32_t need, size_t size)
{
    uint32_t n = *cap ? *cap : 8;
    void *p;

    if (need <= *cap)
        return 0;
    while (n < need)
        n *= 2;
    if ((p = realloc(*v, n * size)) == NULL)
        return -ENOMEM;
    *v = p;
    *cap = n;
    return 0;
}

static mon_name_t *name_of(link_mon_t *m, const char *data)
{
    uint32_t n = m->nnames < MON_NAMES_MAX ? m->nnames : MON_NAMES_MAX;

    for (uint32_t i = 0; i < n; i++)
        if (strcmp(m->names[i].data, data) == 0)
            return &m->names[i];
    return NULL;
}

static mon_peer_t *peer_find(link_mon_t *m, const char *addr)
{
    for (uint32_t i = 0; i < m->npeers; i++)
        if (strcmp(m->peers[i].addr, addr) == 0)
            return &m->peers[i];
    return NULL;
}

/* The peer's record, made (with the name learned for it so far) if it is new. */
static mon_peer_t *peer_of(link_mon_t *m, const char *addr)
{
    mon_peer_t *known = peer_find(m, addr);

    if (known != NULL)
        return known;
    if (m->npeers == MON_PEERS_MAX ||
        grow((void **)&m->peers, &m->peers_cap, m->npeers + 1, sizeof(*m->peers)) != 0)
        return NULL;
    mon_peer_t *p = &m->peers[m->npeers++];
    const mon_name_t *e = name_of(m, addr);
    memset(p, 0, sizeof(*p));
    snprintf(p->addr, sizeof(p->addr), "%s", addr);
    if (e != NULL)
        memcpy(p->daemon, e->name, sizeof(p->daemon));
    return p;
}

void link_mon_name(link_mon_t *m, const char *data, const char *name)
{
    if (m == NULL || data == NULL || data[0] == '\0' || name == NULL)
        return;
    mon_name_t *e = name_of(m, data);
    if (e == NULL)
        e = &m->names[m->nnames++ % MON_NAMES_MAX];
    snprintf(e->data, sizeof(e->data), "%s", data);
    snprintf(e->name, sizeof(e->name), "%s", name);
    /* A peer already known keeps the name from now on (a new one takes it in peer_of). */
    mon_peer_t *p = peer_find(m, data);
    if (p != NULL)
        memcpy(p->daemon, e->name, sizeof(p->daemon));
}

/* Peer events name the daemon as its control connection does: by its advertised address. */
static void tell_peer(link_mon_t *m, const char *data, int lost)
{
    const mon_name_t *e = name_of(m, data);

    events_peer(m->srv, e != NULL ? e->name : data, lost,
                lost ? "a data connection to it failed" : NULL);
}

static mon_link_t *link_of(link_mon_t *m, uint64_t serial)
{
    for (uint32_t i = 0; i < m->nlinks; i++)
        if (m->links[i].v.serial == serial)
            return &m->links[i];
    return NULL;
}

/* How much a counter grew; 0 if it went back (a stripe's socket whose figures could not be
 * read this time). */
static double grew(uint64_t now, uint64_t was)
{
    return now > was ? (double)(now - was) : 0;
}

/* Appends one finding to l->found ("; " between findings). */
static void __attribute__((format(printf, 2, 3))) say(mon_link_t *l, const char *fmt, ...)
{
    size_t at = strlen(l->found);
    va_list ap;

    if (at > 0)
        text_add(l->found, PROBLEM_MAX, &at, "; ");
    va_start(ap, fmt);
    text_vadd(l->found, PROBLEM_MAX, &at, fmt, ap);
    va_end(ap);
}

/* What is wrong with l since its last sample (into l->found; empty: nothing). */
static void judge(mon_link_t *l, double dt_s)
{
    const link_info_t *now = &l->v.info, *was = &l->prev;
    double dsegs = grew(now->segs_out, was->segs_out);
    /* Retransmits the peer turned out to have had (D-SACK) are a timer's haste on a busy host,
     * not a loss on the path: measured 124 of them between daemons with no loss at all. */
    double dre = grew(now->retrans, was->retrans) - grew(now->spurious, was->spurious);

    dre = dre > 0 ? dre : 0;

    l->found[0] = '\0';
    if (dre >= LINK_WARN_RETRANS_MIN && dre * 100.0 >= LINK_WARN_RETRANS_PCT * dsegs)
        say(l, "%.0f of %.0f segments retransmitted (lost) in %.1f s", dre, dsegs, dt_s);
    if (l->rtt_base_us > 0 && now->rtt_us > LINK_WARN_RTT_FACTOR * l->rtt_base_us &&
        now->rtt_us > l->rtt_base_us + LINK_WARN_RTT_US)
        say(l, "round trip %.1f ms, usually %.1f ms", now->rtt_us / 1e3, l->rtt_base_us / 1e3);
    if (now->qp_state_bad)
        say(l, "a queue pair is not in the ready-to-send state");
    if (now->port_errors > was->port_errors)
        say(l, "port error counters +%llu",
            (unsigned long long)(now->port_errors - was->port_errors));
    if (now->port_retries > was->port_retries)
        say(l, "port retry counters +%llu",
            (unsigned long long)(now->port_retries - was->port_retries));
}

static void rtt_base_update(mon_link_t *l)
{
    uint32_t rtt = l->v.info.rtt_us;

    if (rtt == 0)
        return;
    if (l->rtt_base_us == 0 || rtt < l->rtt_base_us)
        l->rtt_base_us = rtt;
    else
        l->rtt_base_us += (rtt - l->rtt_base_us) / 64; /* a lasting change becomes usual */
}

/* Warns when l turns unhealthy (again at most every LINK_WARN_REPEAT_MS while it stays so);
 * says so when it has been healthy for LINK_HEALTHY_AFTER_MS. */
static void warn_maybe(link_mon_t *m, mon_link_t *l, uint64_t now)
{
    mon_peer_t *p;

    if (l->found[0] == '\0') {
        if (l->bad && now >= l->bad_until_ms) {
            INFO("NET", "data connection to %s (%s, comm %u) is healthy again", l->v.peer,
                 l->v.desc, l->v.comm_id);
            l->bad = 0;
            l->problem[0] = '\0';
        }
        return;
    }
    memcpy(l->problem, l->found, sizeof(l->problem));
    l->bad_until_ms = now + LINK_HEALTHY_AFTER_MS;
    if (l->bad && now - l->warned_ms < LINK_WARN_REPEAT_MS)
        return;
    char text[256 + PROBLEM_MAX];
    snprintf(text, sizeof(text), "data connection to %s (%s, comm %u): %s", l->v.peer, l->v.desc,
             l->v.comm_id, l->problem);
    WARN("NET", "%s", text);
    events_link_warning(m->srv, l->v.peer, text, l->problem);
    l->bad = 1;
    l->warned_ms = now;
    if ((p = peer_of(m, l->v.peer)) != NULL)
        p->warnings++;
}

/* Op retry: a connection that was suspended since the last sample, or came back. */
static void retry_told(link_mon_t *m, const mon_link_t *l, const link_info_t *was)
{
    const link_info_t *now = &l->v.info;
    const char *daemon = l->peer < m->npeers && m->peers[l->peer].daemon[0] != '\0'
                             ? m->peers[l->peer].daemon
                             : l->v.peer;

    if (now->resumes > was->resumes) {
        WARN("NET",
             "data connection to %s (%s, comm %u) came back (op retry): %u time%s in all, "
             "%.3f s suspended",
             daemon, l->v.desc, l->v.comm_id, now->resumes, now->resumes == 1 ? "" : "s",
             (double)now->suspended_ns / 1e9);
        events_say(m->srv, "link_resumed", "data connection to %s (comm %u) came back: %u in all",
                   daemon, l->v.comm_id, now->resumes);
    }
    if (now->suspended > 0 && (was->suspended == 0 || now->resumes > was->resumes)) {
        WARN("NET",
             "data connection to %s (%s, comm %u) failed; op retry holds its comms' ops "
             "while it comes back",
             daemon, l->v.desc, l->v.comm_id);
        events_say(m->srv, "link_suspended",
                   "data connection to %s (comm %u) failed; its ops wait for it", daemon,
                   l->v.comm_id);
    }
}

static void update(link_mon_t *m, mon_link_t *l, const link_view_t *v, uint64_t now)
{
    double dt_s = (double)(now - l->prev_ms) / 1e3;

    l->prev = l->v.info;
    l->v = *v;
    if (dt_s > 0) {
        l->tx_bps = grew(v->info.tx_bytes, l->prev.tx_bytes) / dt_s;
        l->rx_bps = grew(v->info.rx_bytes, l->prev.rx_bytes) / dt_s;
        l->retrans_ps = grew(v->info.retrans, l->prev.retrans) / dt_s;
    }
    l->prev_ms = now;
    judge(l, dt_s);
    rtt_base_update(l);
    warn_maybe(m, l, now);
    retry_told(m, l, &l->prev);
}

/* A connection closed: its last figures join its peer's totals. */
static void closed(link_mon_t *m, const link_view_t *v)
{
    mon_peer_t *p = peer_of(m, v->peer);
    mon_link_t *l = link_of(m, v->serial);

    if (p != NULL) {
        p->tx_closed += v->info.tx_bytes;
        p->rx_closed += v->info.rx_bytes;
        p->retrans_closed += v->info.retrans;
        p->segs_closed += v->info.segs_out;
        p->resumes_closed += v->info.resumes;
        p->suspended_ns_closed += v->info.suspended_ns;
        if (v->info.failed && (l == NULL || !l->failed_told)) {
            p->lost++;
            WARN("NET", "data connection to %s (%s, comm %u) failed and closed", v->peer, v->desc,
                 v->comm_id);
            tell_peer(m, v->peer, 1);
        }
    }
    /* Suspended or back since the last sample, and closed before the next. */
    if (l != NULL && v != &l->v) {
        link_info_t was = l->v.info;
        l->v = *v;
        retry_told(m, l, &was);
    }
    if (l != NULL)
        *l = m->links[--m->nlinks];
}

static void on_view(void *ctx, const link_view_t *v)
{
    link_mon_t *m = ctx;
    uint64_t now = uv_now(m->srv->loop);
    mon_link_t *l;

    if (v->closed) {
        closed(m, v);
        return;
    }
    if ((l = link_of(m, v->serial)) == NULL) {
        if (grow((void **)&m->links, &m->links_cap, m->nlinks + 1, sizeof(*m->links)) != 0)
            return;
        l = &m->links[m->nlinks++];
        memset(l, 0, sizeof(*l));
        l->v = *v;
        l->prev_ms = now;
        mon_peer_t *p = peer_of(m, v->peer);
        l->peer = p != NULL ? (uint32_t)(p - m->peers) : UINT32_MAX;
        rtt_base_update(l);
        tell_peer(m, v->peer, 0); /* back, if it was lost */
        /* Suspended (or back) before its first sample: said as for any other. */
        retry_told(m, l, &(link_info_t){0});
    } else if (!m->failed_only) {
        update(m, l, v, now);
    }
    l->walk = m->walk;
    /* A failed connection stays until its comm goes: the peer is lost now. */
    if (v->info.failed && !l->failed_told) {
        mon_peer_t *p = peer_of(m, v->peer);
        l->failed_told = 1;
        if (p != NULL)
            p->lost++;
        WARN("NET", "data connection to %s (%s, comm %u) failed", v->peer, v->desc, v->comm_id);
        tell_peer(m, v->peer, 1);
    }
}

/* The status views of the sample just taken. */
static void views_build(link_mon_t *m)
{
    free(m->dl);
    free(m->dlp);
    free(m->pl);
    free(m->plp);
    m->ndl = m->npl = 0;
    m->dl = calloc(m->nlinks + 1, sizeof(*m->dl));
    m->dlp = calloc(m->nlinks + 1, sizeof(*m->dlp));
    m->pl = calloc(m->npeers + 1, sizeof(*m->pl));
    m->plp = calloc(m->npeers + 1, sizeof(*m->plp));
    if (m->dl == NULL || m->dlp == NULL || m->pl == NULL || m->plp == NULL)
        return;
    for (uint32_t i = 0; i < m->npeers; i++) {
        mon_peer_t *p = &m->peers[i];
        Hccld__PeerLinks *o = &m->pl[i];
        hccld__peer_links__init(o);
        o->peer = p->addr;
        o->daemon = p->daemon;
        o->tx_bytes = p->tx_closed;
        o->rx_bytes = p->rx_closed;
        o->retrans = p->retrans_closed;
        o->segs_out = p->segs_closed;
        o->warnings = p->warnings;
        o->lost = p->lost;
        o->resumes = p->resumes_closed;
        o->suspended_s = (double)p->suspended_ns_closed / 1e9;
        m->plp[i] = o;
    }
    m->npl = m->npeers;
    for (uint32_t i = 0; i < m->nlinks; i++) {
        const mon_link_t *l = &m->links[i];
        const link_info_t *li = &l->v.info;
        Hccld__DataLink *o = &m->dl[i];
        hccld__data_link__init(o);
        o->peer = (char *)l->v.peer;
        o->transport = (char *)l->v.desc;
        o->comm = l->v.comm_id;
        o->users = l->v.users;
        o->nlinks = li->nlinks;
        o->tx_bytes = li->tx_bytes;
        o->rx_bytes = li->rx_bytes;
        o->segs_out = li->segs_out;
        o->retrans = li->retrans;
        o->spurious = li->spurious;
        o->rtt_us = li->rtt_us;
        o->rttvar_us = li->rttvar_us;
        o->tx_bytes_per_s = l->tx_bps;
        o->rx_bytes_per_s = l->rx_bps;
        o->retrans_per_s = l->retrans_ps;
        o->qp_state_bad = li->qp_state_bad != 0;
        o->port_errors = li->port_errors;
        o->port_retries = li->port_retries;
        o->problem = (char *)l->problem;
        o->serial = l->v.serial;
        o->suspended = li->suspended;
        o->resumes = li->resumes;
        o->suspended_s = (double)li->suspended_ns / 1e9;
        m->dlp[i] = o;
        if (l->peer < m->npeers) {
            Hccld__PeerLinks *p = &m->pl[l->peer];
            o->daemon = p->daemon;
            p->links++;
            p->tx_bytes += li->tx_bytes;
            p->rx_bytes += li->rx_bytes;
            p->retrans += li->retrans;
            p->segs_out += li->segs_out;
            p->tx_bytes_per_s += l->tx_bps;
            p->rx_bytes_per_s += l->rx_bps;
            p->suspended += li->suspended;
            p->resumes += li->resumes;
            p->suspended_s += (double)li->suspended_ns / 1e9;
            if (li->rtt_us > p->rtt_us)
                p->rtt_us = li->rtt_us;
        }
    }
    m->ndl = m->nlinks;
}

void link_mon_sample(link_mon_t *m)
{
    m->walk++;
    engine_links(m->srv->eng, on_view, m);
    /* A connection neither seen nor reported closed (its closing record was crowded out):
     * its last sample joins its peer's totals. */
    for (uint32_t i = 0; i < m->nlinks;)
        if (m->links[i].walk != m->walk)
            closed(m, &m->links[i].v);
        else
            i++;
    views_build(m);
}

static void on_soon(uv_timer_t *t)
{
    link_mon_t *m = t->data;

    m->failed_only = 1;
    engine_links(m->srv->eng, on_view, m);
    m->failed_only = 0;
    views_build(m);
}

void link_mon_check_failed(link_mon_t *m)
{
    /* A peer's death breaks every comm over it at once: one walk serves them all. */
    if (m != NULL && !uv_is_active((uv_handle_t *)&m->soon))
        uv_timer_start(&m->soon, on_soon, 0, 0);
}

static void on_timer(uv_timer_t *t)
{
    link_mon_sample(t->data);
}

link_mon_t *link_mon_start(server_t *srv, int *err_p)
{
    uint64_t ms;
    link_mon_t *m;

    *err_p = 0;
    if (env_u64("HCCLD_LINK_CHECK_MS", LINK_CHECK_MS_DEFAULT, 0, 3600000, &ms) != 0) {
        *err_p = -EINVAL;
        return NULL;
    }
    if (ms == 0)
        return NULL;
    if ((m = calloc(1, sizeof(*m))) == NULL) {
        WARN("NET", "no memory for the link monitor: link health is not shown");
        return NULL;
    }
    m->srv = srv;
    m->period_ms = ms;
    uv_timer_init(srv->loop, &m->timer);
    m->timer.data = m;
    uv_timer_start(&m->timer, on_timer, ms, ms);
    uv_unref((uv_handle_t *)&m->timer);
    uv_timer_init(srv->loop, &m->soon);
    m->soon.data = m;
    uv_unref((uv_handle_t *)&m->soon);
    return m;
}

static void on_closed(uv_handle_t *h)
{
    link_mon_t *m = h->data;

    if (--m->closing > 0)
        return;
    free(m->links);
    free(m->peers);
    free(m->dl);
    free(m->dlp);
    free(m->pl);
    free(m->plp);
    free(m);
}

void link_mon_stop(link_mon_t *m)
{
    if (m == NULL)
        return;
    m->closing = 2;
    uv_close((uv_handle_t *)&m->timer, on_closed);
    uv_close((uv_handle_t *)&m->soon, on_closed);
}

void link_mon_status(link_mon_t *m, Hccld__StatusResp *r)
{
    if (m == NULL || m->dlp == NULL || m->plp == NULL)
        return;
    r->n_data_links = m->ndl;
    r->data_links = m->dlp;
    r->n_peer_links = m->npl;
    r->peer_links = m->plp;
}
