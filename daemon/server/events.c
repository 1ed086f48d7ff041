/* The live event stream (events.h). */
#include "server/events.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "log.h"
#include "server/link_mon.h"
#include "server/server.h"
#include "server/status.h"
#include "text.h"

#define TOLD_MAX 64 /* stall episodes a watcher remembers having been told */
#define LOST_MAX 64 /* peers remembered as lost, for peer_back */
#define TEXT_MAX 512

typedef struct watcher {
    session_t *s;
    uint64_t stall_ms;
    struct told {
        uint32_t comm;
        uint64_t episode;
    } told[TOLD_MAX];
    unsigned told_next;
    struct watcher *next;
} watcher_t;

/* What the poll knows of a comm: whether its break was told, and the stall it is in: kind 1,
 * ranks here behind the others (key: the least they posted); kind 2, every rank here posted
 * and the op waits on other daemons (key: ops done); 0 none. An episode is one (kind, key). */
typedef struct comm_track {
    uint32_t id;
    int broken_told;
    int kind;
    uint64_t key, since_ms, episode;
    int seen;
} comm_track_t;

typedef struct events {
    watcher_t *watchers;
    uv_timer_t timer;
    comm_track_t *tracks;
    uint32_t ntracks, cap;
    uint64_t episodes;
    char lost[LOST_MAX][PEER_ADDR_MAX];
    unsigned nlost;
} events_t;

static uint64_t wall_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

static void send_to(watcher_t *w, Hccld__Event *e)
{
    Hccld__Msg m = HCCLD__MSG__INIT;

    if (uv_stream_get_write_queue_size((uv_stream_t *)&w->s->pipe) > EVENTS_QUEUE_MAX) {
        WARN("IPC",
             "hccld-ctl watch (pid %d) reads too slowly: %u bytes of events wait for it; "
             "closing it",
             (int)w->s->fc.pid, EVENTS_QUEUE_MAX);
        session_close(w->s); /* events_session_gone unlinks w */
        return;
    }
    m.body_case = HCCLD__MSG__BODY_EVENT;
    m.event = e;
    session_send(w->s, &m);
}

void events_emit(server_t *srv, Hccld__Event *e)
{
    events_t *ev = srv->events;

    if (ev == NULL || ev->watchers == NULL)
        return;
    e->time_ms = wall_ms();
    for (watcher_t *w = ev->watchers, *next; w != NULL; w = next) {
        next = w->next; /* send_to may close (and unlink) w */
        send_to(w, e);
    }
}

void events_say(server_t *srv, const char *kind, const char *fmt, ...)
{
    Hccld__Event e = HCCLD__EVENT__INIT;
    char text[TEXT_MAX];
    va_list ap;

    if (srv->events == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    e.kind = (char *)kind;
    e.text = text;
    events_emit(srv, &e);
}

void events_client(server_t *srv, const session_t *s, int what)
{
    static const char *const kinds[] = {"client_left", "client_connected", "client_rejoined"};
    static const char *const says[] = {"left", "connected",
                                       "came back after a restart of the daemon"};
    Hccld__Event e = HCCLD__EVENT__INIT;
    char text[TEXT_MAX];

    if (srv->events == NULL)
        return;
    snprintf(text, sizeof(text), "client pid %d (uid %d, job '%s', class %s) %s", (int)s->fc.pid,
             (int)s->fc.uid, s->fc.job_name, srv->qos.cls[s->fc.qos_class].name, says[what]);
    e.kind = (char *)kinds[what];
    e.text = text;
    e.pid = s->fc.pid;
    e.uid = (int32_t)s->fc.uid;
    e.job = (char *)s->fc.job_name;
    e.qos_class = (char *)srv->qos.cls[s->fc.qos_class].name;
    events_emit(srv, &e);
}

static char *class_of(server_t *srv, const form_comm_t *c)
{
    return c->qos_class >= 0 && c->qos_class < srv->qos.ncls ? srv->qos.cls[c->qos_class].name : "";
}

void events_comm_formed(server_t *srv, const form_comm_t *c)
{
    Hccld__Event e = HCCLD__EVENT__INIT;
    char text[TEXT_MAX];

    if (srv->events == NULL)
        return;
    if (c->rejoined)
        snprintf(text, sizeof(text),
                 "comm %u registered again after a restart of the daemon: %u ranks, level 0 %s",
                 c->id, c->nranks, c->coop != NULL ? "cooperative" : "by the daemon");
    else
        snprintf(text, sizeof(text), "comm %u formed: %u ranks (%u here) on %u daemons, job %s",
                 c->id, c->nranks, c->nlocal, c->nnodes, c->job_hex);
    e.kind = c->rejoined ? "comm_rejoined" : "comm_formed";
    e.text = text;
    e.comm = c->id;
    e.job = (char *)c->job_hex;
    e.qos_class = class_of(srv, c);
    events_emit(srv, &e);
}

void events_rank_died(server_t *srv, const form_comm_t *c, uint32_t rank, int pid)
{
    Hccld__Event e = HCCLD__EVENT__INIT;
    char text[TEXT_MAX];

    if (srv->events == NULL)
        return;
    snprintf(text, sizeof(text), "comm %u: rank %u (pid %d) went away without destroying it", c->id,
             rank, pid);
    e.kind = "rank_died";
    e.text = text;
    e.comm = c->id;
    e.job = (char *)c->job_hex;
    e.pid = pid;
    e.n_ranks = 1;
    e.ranks = &rank;
    events_emit(srv, &e);
}

/* Whether peer is in the lost set; adds (lost) or removes (back) it. */
static int lost_set(events_t *ev, const char *peer, int lost)
{
    for (unsigned i = 0; i < ev->nlost; i++)
        if (strcmp(ev->lost[i], peer) == 0) {
            if (!lost)
                memcpy(ev->lost[i], ev->lost[--ev->nlost], PEER_ADDR_MAX);
            return 1;
        }
    if (lost && ev->nlost < LOST_MAX)
        snprintf(ev->lost[ev->nlost++], PEER_ADDR_MAX, "%s", peer);
    return 0;
}

void events_peer(server_t *srv, const char *peer, int lost, const char *why)
{
    Hccld__Event e = HCCLD__EVENT__INIT;
    char text[TEXT_MAX];
    int was_lost;

    if (srv->events == NULL)
        return;
    was_lost = lost_set(srv->events, peer, lost);
    if (!lost && !was_lost)
        return;
    snprintf(text, sizeof(text), "peer daemon %s %s%s%s", peer, lost ? "lost" : "back",
             why ? ": " : "", why ? why : "");
    e.kind = lost ? "peer_lost" : "peer_back";
    e.text = text;
    e.peer = (char *)peer;
    e.reason = (char *)(why ? why : "");
    events_emit(srv, &e);
}

void events_link_warning(server_t *srv, const char *peer, const char *text, const char *what)
{
    Hccld__Event e = HCCLD__EVENT__INIT;

    e.kind = "link_warning";
    e.text = (char *)text;
    e.peer = (char *)peer;
    e.reason = (char *)what;
    events_emit(srv, &e);
}

static comm_track_t *track_of(events_t *ev, uint32_t id)
{
    for (uint32_t i = 0; i < ev->ntracks; i++)
        if (ev->tracks[i].id == id)
            return &ev->tracks[i];
    if (ev->ntracks == ev->cap) {
        uint32_t cap = ev->cap ? 2 * ev->cap : 16;
        comm_track_t *t = realloc(ev->tracks, cap * sizeof(*t));
        if (t == NULL)
            return NULL;
        ev->tracks = t;
        ev->cap = cap;
    }
    comm_track_t *t = &ev->tracks[ev->ntracks++];
    memset(t, 0, sizeof(*t));
    t->id = id;
    return t;
}

static comm_track_t *track_of(events_t *ev, uint32_t id);

void events_comm_broken(server_t *srv, const form_comm_t *c, const char *why, int result)
{
    Hccld__Event e = HCCLD__EVENT__INIT;
    char text[TEXT_MAX];
    comm_track_t *t;

    if (srv->events == NULL || srv->events->watchers == NULL ||
        ((t = track_of(srv->events, c->id)) != NULL && t->broken_told))
        return;
    if (t != NULL)
        t->broken_told = 1;
    snprintf(text, sizeof(text), "comm %u broken: %s (its ops fail with HcclResult %d)", c->id, why,
             result);
    e.kind = "comm_broken";
    e.text = text;
    e.comm = c->id;
    e.job = (char *)c->job_hex;
    e.reason = (char *)why;
    e.result = result;
    events_emit(srv, &e);
    /* If a data connection failed under it, its peer_lost follows now, not at the link
     * monitor's next sample. */
    link_mon_check_failed(srv->links);
}

static void tell_broken(server_t *srv, const form_comm_t *c, const engine_comm_stats_t *st)
{
    events_comm_broken(srv, c,
                       st->broken && st->broken_why[0] ? st->broken_why : "a rank here went away",
                       st->broken ? (int)st->broken_status : (int)HCCL_E_REMOTE);
}

/* Where c's stall stands now (see comm_track_t). */
static void stall_state(const engine_comm_stats_t *st, int *kind, uint64_t *key)
{
    uint64_t lo = UINT64_MAX, hi = 0;

    for (uint32_t r = 0; r < st->nlocal; r++) {
        lo = st->posted[r] < lo ? st->posted[r] : lo;
        hi = st->posted[r] > hi ? st->posted[r] : hi;
    }
    *kind = 0;
    *key = 0;
    if (st->nlocal > 0 && lo < hi) {
        *kind = 1;
        *key = lo;
    } else if (st->queued > 0) {
        *kind = 2;
        *key = st->ops_done;
    }
}

static int told(watcher_t *w, uint32_t comm, uint64_t episode)
{
    for (unsigned i = 0; i < TOLD_MAX; i++)
        if (w->told[i].comm == comm && w->told[i].episode == episode)
            return 1;
    w->told[w->told_next] = (struct told){.comm = comm, .episode = episode};
    w->told_next = (w->told_next + 1) % TOLD_MAX;
    return 0;
}

static void tell_stall(server_t *srv, const form_comm_t *c, const engine_comm_stats_t *st,
                       const comm_track_t *t, uint64_t waited_ms)
{
    Hccld__Event e = HCCLD__EVENT__INIT;
    uint32_t late[ENGINE_STATS_RANKS], n = 0;
    char text[TEXT_MAX];
    size_t at = 0;

    if (t->kind == 1) {
        for (uint32_t r = 0; r < st->nlocal; r++)
            if (st->posted[r] == t->key)
                late[n++] = st->ranks[r];
        text_add(text, sizeof(text), &at, "comm %u: collective %llu waits %.1f s for rank", c->id,
                 (unsigned long long)t->key, waited_ms / 1e3);
        for (uint32_t i = 0; i < n && at < sizeof(text) - 16; i++)
            text_add(text, sizeof(text), &at, "%s %u", i ? "," : "", late[i]);
        text_add(text, sizeof(text), &at, " (not posted)");
        e.seq = t->key;
    } else if (st->on_wire && st->nwaiting > 0) {
        text_add(text, sizeof(text), &at,
                 "comm %u: an op has waited %.1f s with every rank here posted; its ", c->id,
                 waited_ms / 1e3);
        status_waiting_on(c, st, text + at, sizeof(text) - at, late, &n);
        e.peer = (char *)status_daemon_named(c, st->waiting[0].node);
    } else {
        snprintf(text, sizeof(text),
                 "comm %u: an op has waited %.1f s with every rank here posted (ranks or links "
                 "of other daemons)",
                 c->id, waited_ms / 1e3);
    }
    e.kind = "op_stalled";
    e.text = text;
    e.comm = c->id;
    e.job = (char *)c->job_hex;
    e.waited_s = waited_ms / 1e3;
    e.n_ranks = n;
    e.ranks = late;
    e.time_ms = wall_ms();
    for (watcher_t *w = srv->events->watchers, *next; w != NULL; w = next) {
        next = w->next;
        if (waited_ms >= w->stall_ms && !told(w, c->id, t->episode))
            send_to(w, &e);
    }
}

static void poll_comms(server_t *srv)
{
    events_t *ev = srv->events;
    uint64_t now = uv_now(srv->loop);

    for (uint32_t i = 0; i < ev->ntracks; i++)
        ev->tracks[i].seen = 0;
    for (const form_comm_t *c = form_comms(srv->form); c != NULL && ev->watchers != NULL;
         c = c->next) {
        engine_comm_stats_t st;
        comm_track_t *t = track_of(ev, c->id);
        int kind;
        uint64_t key;

        if (t == NULL)
            return;
        t->seen = 1;
        status_comm_stats(srv, c, &st);
        if (st.broken || c->state == COMM_BROKEN) {
            tell_broken(srv, c, &st);
            continue;
        }
        stall_state(&st, &kind, &key);
        if (kind != t->kind || key != t->key) {
            t->kind = kind;
            t->key = key;
            t->since_ms = now;
            t->episode = ++ev->episodes;
        }
        if (kind != 0)
            tell_stall(srv, c, &st, t, now - t->since_ms);
    }
    for (uint32_t i = 0; i < ev->ntracks;)
        if (!ev->tracks[i].seen)
            ev->tracks[i] = ev->tracks[--ev->ntracks];
        else
            i++;
}

static void on_poll(uv_timer_t *t)
{
    server_t *srv = t->data;

    if (srv->events->watchers != NULL)
        poll_comms(srv);
}

static events_t *events_get(server_t *srv)
{
    events_t *ev = srv->events;

    if (ev != NULL || (ev = calloc(1, sizeof(*ev))) == NULL)
        return ev;
    uv_timer_init(srv->loop, &ev->timer);
    ev->timer.data = srv;
    uv_unref((uv_handle_t *)&ev->timer);
    srv->events = ev;
    return ev;
}

void events_watch(server_t *srv, session_t *s, const Hccld__WatchReq *req)
{
    events_t *ev = events_get(srv);
    watcher_t *w = calloc(1, sizeof(*w));
    Hccld__Event e = HCCLD__EVENT__INIT;
    char text[TEXT_MAX];

    if (ev == NULL || w == NULL) {
        free(w);
        WARN("IPC", "no memory for hccld-ctl watch (pid %d)", (int)s->fc.pid);
        session_close(s);
        return;
    }
    for (watcher_t *o = ev->watchers; o != NULL; o = o->next)
        if (o->s == s) { /* a second WatchReq changes the threshold */
            o->stall_ms = req->stall_ms ? req->stall_ms : EVENTS_STALL_MS_DEFAULT;
            free(w);
            return;
        }
    w->s = s;
    w->stall_ms = req->stall_ms ? req->stall_ms : EVENTS_STALL_MS_DEFAULT;
    w->next = ev->watchers;
    if (ev->watchers == NULL)
        uv_timer_start(&ev->timer, on_poll, EVENTS_POLL_MS, EVENTS_POLL_MS);
    ev->watchers = w;
    INFO("IPC", "pid %d watches events (stalls after %llu ms)", (int)s->fc.pid,
         (unsigned long long)w->stall_ms);
    snprintf(text, sizeof(text), "watching hccld %s (pid %d): %u clients, %s", HCCLD_VERSION,
             (int)getpid(), srv->nsessions, srv->advertised[0] ? srv->advertised : "not listening");
    e.kind = "watching";
    e.text = text;
    e.time_ms = wall_ms();
    send_to(w, &e);
}

void events_session_gone(server_t *srv, session_t *s)
{
    events_t *ev = srv->events;

    if (ev == NULL)
        return;
    for (watcher_t **pp = &ev->watchers; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->s == s) {
            watcher_t *w = *pp;
            *pp = w->next;
            free(w);
            break;
        }
    if (ev->watchers == NULL)
        uv_timer_stop(&ev->timer);
}

static void on_timer_closed(uv_handle_t *h)
{
    server_t *srv = h->data;
    events_t *ev = srv->events;

    free(ev->tracks);
    free(ev);
    srv->events = NULL;
}

void events_stop(server_t *srv)
{
    events_t *ev = srv->events;

    if (ev == NULL)
        return;
    while (ev->watchers != NULL) {
        watcher_t *w = ev->watchers;
        ev->watchers = w->next;
        free(w);
    }
    uv_close((uv_handle_t *)&ev->timer, on_timer_closed);
}
