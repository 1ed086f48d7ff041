/* One connection: a client (Hello, then requests) or an admin tool. Any protocol error closes
 * the connection; nothing a client sends can harm the daemon or other clients. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hccl/hccl.h"
#include "log.h"
#include "ring.h"
#include "server/events.h"
#include "server/server.h"
#include "uds.h"

/* A batch of sends and receives has a piece of each item in flight at once (libclient). */
_Static_assert(HCCL_BATCH_SEND_RECV_MAX <= SERVER_SQ_ENTRIES,
               "a session's slots must hold the largest batch");

int session_send(session_t *s, const Hccld__Msg *m)
{
    if (s->state == SESSION_CLOSING)
        return -EPIPE;
    return framed_send((uv_stream_t *)&s->pipe, m);
}

int session_send_fds(session_t *s, const Hccld__Msg *m, const int *fds, int nfds)
{
    uv_os_fd_t fd;

    /* Descriptors cannot ride on uv_write; sending directly keeps order only while nothing
     * else waits in the write queue, which holds for request/answer traffic. */
    if (s->state == SESSION_CLOSING || uv_stream_get_write_queue_size((uv_stream_t *)&s->pipe) ||
        uv_fileno((uv_handle_t *)&s->pipe, &fd) != 0)
        return -EAGAIN;
    return uds_send(fd, m, fds, nfds);
}

static void session_free(session_t *s)
{
    server_t *srv = s->srv;

    for (session_t **pp = &srv->sessions; *pp != NULL; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    srv->nsessions--;
    if (s->in_engine)
        engine_session_remove(srv->eng, s->fc.sid);
    if (s->seg != NULL)
        munmap(s->seg, s->layout.seg_bytes);
    if (s->arena != NULL)
        munmap(s->arena, s->layout.arena_bytes);
    if (s->memfd >= 0)
        close(s->memfd);
    if (s->fc.arena_fd >= 0)
        close(s->fc.arena_fd);
    for (int i = 0; i < s->nfds; i++)
        close(s->fds[i]);
    free(s->dec);
    free(s);
}

static void on_closed(uv_handle_t *h)
{
    session_t *s = h->data;

    if (--s->closes_pending == 0)
        session_free(s);
}

void session_close(session_t *s)
{
    if (s->state == SESSION_CLOSING)
        return;
    if (s->kind == SESSION_CLIENT && s->state == SESSION_READY)
        events_client(s->srv, s, EVENTS_CLIENT_LEFT);
    s->state = SESSION_CLOSING;
    DBG("IPC", "client %llu (pid %d) disconnected", (unsigned long long)s->fc.sid, (int)s->fc.pid);
    events_session_gone(s->srv, s);
    formation_session_gone(s);
    s->closes_pending = 2;
    uv_close((uv_handle_t *)&s->pipe, on_closed);
    uv_close((uv_handle_t *)&s->hello_timer, on_closed);
}

/* Creates the client's control segment (header, rings) and its data arena. */
static int segment_create(session_t *s, uint64_t arena_bytes)
{
    shm_layout_t l;
    shm_hdr_t *hdr;

    shm_layout_make(arena_bytes, SERVER_SQ_ENTRIES, SERVER_SQ_ENTRIES, &l);
    s->memfd = shm_memfd_map("hccld-ctrl", l.seg_bytes, &s->seg);
    if (s->memfd < 0)
        return s->memfd;
    s->fc.arena_fd = shm_memfd_map("hccld-arena", l.arena_bytes, &s->arena);
    if (s->fc.arena_fd < 0)
        return s->fc.arena_fd;
    hdr = s->seg;
    hdr->magic = SHM_MAGIC;
    hdr->version = PROTO_VERSION;
    hdr->seg_bytes = l.seg_bytes;
    ring_format(shm_ring(s->seg, l.sq_off), l.sq_entries);
    ring_format(shm_ring(s->seg, l.cq_off), l.cq_entries);
    s->layout = l;
    s->fc.arena_bytes = l.arena_bytes;
    return 0;
}

/* A descriptor libuv received on the client's IPC pipe: it hands them out only through
 * uv_accept into a handle, so one is opened on a pipe handle, duplicated, and the handle closed. */
static void on_tmp_closed(uv_handle_t *h)
{
    free(h);
}

static int pending_take(session_t *s)
{
    uv_pipe_t *tmp = malloc(sizeof(*tmp));
    uv_os_fd_t fd;
    int dup_fd = -1;

    if (tmp == NULL || uv_pipe_init(s->srv->loop, tmp, 0) != 0) {
        free(tmp);
        return -1;
    }
    if (uv_accept((uv_stream_t *)&s->pipe, (uv_stream_t *)tmp) == 0 &&
        uv_fileno((uv_handle_t *)tmp, &fd) == 0)
        dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    uv_close((uv_handle_t *)tmp, on_tmp_closed);
    return dup_fd;
}

/* Takes the descriptors that came with what was just read; beyond UDS_MAX_FDS they are
 * closed. */
static void pending_collect(session_t *s)
{
    for (int n = 0; uv_pipe_pending_count(&s->pipe) > 0 && n < 2 * UDS_MAX_FDS; n++) {
        int fd = pending_take(s);
        if (fd >= 0 && s->nfds < UDS_MAX_FDS)
            s->fds[s->nfds++] = fd;
        else if (fd >= 0)
            close(fd);
    }
}

/* Descriptors no message took are closed once no frame is half read. */
static void fds_drop_unclaimed(session_t *s)
{
    if (s->dec->len != 0)
        return;
    for (int i = 0; i < s->nfds; i++)
        close(s->fds[i]);
    s->nfds = 0;
}

int session_take_fd(session_t *s)
{
    int fd;

    if (s->nfds == 0)
        return -1;
    fd = s->fds[0];
    memmove(s->fds, s->fds + 1, (size_t)(s->nfds - 1) * sizeof(int));
    s->nfds--;
    return fd;
}

void session_refuse(session_t *s, uint64_t req_id, int result, const char *why)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Welcome w = HCCLD__WELCOME__INIT;

    w.result = result;
    w.version = PROTO_VERSION;
    w.message = (char *)why;
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_WELCOME;
    m.welcome = &w;
    session_send(s, &m);
}

/* Answers a Hello or Rejoin whose segment is mapped: the segment, arena and doorbell (the
 * doorbell alone to a rejoining client, which has the rest), then the session is ready. */
static void welcome_send(session_t *s, uint64_t req_id, int rejoined)
{
    server_t *srv = s->srv;
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Welcome w = HCCLD__WELCOME__INIT;
    uv_os_fd_t fd;
    int fds[3];

    s->in_engine = 1;
    s->fc.qos_class = qos_session_class(srv, s);
    w.version = PROTO_VERSION;
    w.client_id = s->fc.sid;
    w.seg_bytes = s->layout.seg_bytes;
    w.sq_off = s->layout.sq_off;
    w.sq_entries = s->layout.sq_entries;
    w.cq_off = s->layout.cq_off;
    w.cq_entries = s->layout.cq_entries;
    w.arena_bytes = s->layout.arena_bytes;
    w.max_frame = FRAME_MAX;
    w.advertised = srv->advertised;
    w.qos_class = srv->qos.cls[s->fc.qos_class].name;
    m.req_id = req_id;
    m.body_case = HCCLD__MSG__BODY_WELCOME;
    m.welcome = &w;
    fds[0] = s->memfd;
    fds[1] = s->fc.arena_fd;
    fds[2] = engine_doorbell_fd(srv->eng);
    /* Nothing else has been written on this connection yet, so sending directly keeps order. */
    if (uv_fileno((uv_handle_t *)&s->pipe, &fd) != 0 ||
        uds_send(fd, &m, rejoined ? fds + 2 : fds, rejoined ? 1 : 3) != 0) {
        WARN("IPC", "sending the segment to client pid %d failed", (int)s->fc.pid);
        session_close(s);
        return;
    }
    s->state = SESSION_READY;
    uv_timer_stop(&s->hello_timer);
    INFO("IPC", "client %llu: pid %d uid %d job '%s', class %s, arena %llu MiB%s",
         (unsigned long long)s->fc.sid, (int)s->fc.pid, (int)s->fc.uid, s->fc.job_name,
         srv->qos.cls[s->fc.qos_class].name, (unsigned long long)(s->layout.arena_bytes >> 20),
         rejoined ? ", back after a daemon restart" : "");
    events_client(srv, s, rejoined ? EVENTS_CLIENT_BACK : EVENTS_CLIENT_CONNECTED);
}

/* A Hello's or Rejoin's protocol version: 1 if it is this daemon's, else refused (answered). */
static int version_ok(session_t *s, uint64_t req_id, uint32_t version)
{
    if (version == PROTO_VERSION)
        return 1;
    char why[160];
    snprintf(why, sizeof(why),
             "protocol version mismatch: libhccl speaks client protocol %u, this hccld %u (use "
             "libhccl and hccld of one release)",
             version, PROTO_VERSION);
    WARN("IPC", "client pid %d: %s", (int)s->fc.pid, why);
    session_refuse(s, req_id, HCCL_E_NOT_SUPPORT, why);
    return 0;
}

static void on_hello(session_t *s, uint64_t req_id, const Hccld__Hello *h)
{
    server_t *srv = s->srv;

    if (!version_ok(s, req_id, h->version))
        return;
    if (h->arena_bytes == 0 || h->arena_bytes > srv->cfg.max_arena) {
        session_refuse(s, req_id, HCCL_E_PARA, "arena size (HCCL_BUFFSIZE) out of range");
        return;
    }
    if (segment_create(s, h->arena_bytes) != 0 ||
        engine_session_add(srv->eng, s->fc.sid, s->seg, s->arena, &s->layout) != 0) {
        session_refuse(s, req_id, HCCL_E_MEMORY, "the daemon could not create the segment");
        return;
    }
    snprintf(s->fc.job_name, sizeof(s->fc.job_name), "%s", h->job_name);
    snprintf(s->qos_asked, sizeof(s->qos_asked), "%s", h->qos_class);
    welcome_send(s, req_id, 0);
}

/* Maps a memfd a client handed back, of exactly `bytes` and sealed against shrinking (as
 * shm_memfd_map makes them), so that it can never fault under the daemon. */
static void *memfd_adopt(int fd, uint64_t bytes)
{
    struct stat st;
    void *p;

    if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != bytes ||
        (fcntl(fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_SEAL))
        return NULL;
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Why the segment a rejoining client handed back cannot be served, or NULL. */
static const char *segment_adopt(session_t *s, uint64_t arena_bytes)
{
    shm_layout_t l;
    const shm_hdr_t *hdr;

    if (s->nfds != 2)
        return "a rejoin comes with the segment and the arena";
    shm_layout_make(arena_bytes, SERVER_SQ_ENTRIES, SERVER_SQ_ENTRIES, &l);
    s->memfd = session_take_fd(s);
    s->fc.arena_fd = session_take_fd(s);
    if ((s->seg = memfd_adopt(s->memfd, l.seg_bytes)) == NULL ||
        (s->arena = memfd_adopt(s->fc.arena_fd, l.arena_bytes)) == NULL)
        return "the segment or arena is not one this daemon makes";
    hdr = s->seg;
    if (hdr->magic != SHM_MAGIC || hdr->version != PROTO_VERSION || hdr->seg_bytes != l.seg_bytes ||
        shm_ring(s->seg, l.sq_off)->entries != l.sq_entries ||
        shm_ring(s->seg, l.cq_off)->entries != l.cq_entries)
        return "the segment's header or rings are not this version's";
    s->layout = l;
    s->fc.arena_bytes = l.arena_bytes;
    __atomic_store_n(&((shm_hdr_t *)s->seg)->halted_cleanly, 0, __ATOMIC_RELEASE);
    return NULL;
}

/* A client whose daemon restarted: it keeps its segment, arena and rings (formatted afresh). */
static void on_rejoin(session_t *s, uint64_t req_id, const Hccld__Rejoin *r)
{
    server_t *srv = s->srv;
    const char *why = NULL;

    if (!version_ok(s, req_id, r->version))
        return;
    if (r->arena_bytes == 0 || r->arena_bytes > srv->cfg.max_arena)
        why = "arena size out of range";
    else
        why = segment_adopt(s, r->arena_bytes);
    if (why == NULL && engine_session_add(srv->eng, s->fc.sid, s->seg, s->arena, &s->layout) != 0)
        why = "the daemon could not take the segment";
    if (why != NULL) {
        WARN("IPC", "client pid %d cannot rejoin: %s", (int)s->fc.pid, why);
        session_refuse(s, req_id, HCCL_E_PARA, why);
        session_close(s);
        return;
    }
    snprintf(s->fc.job_name, sizeof(s->fc.job_name), "%s", r->job_name);
    snprintf(s->qos_asked, sizeof(s->qos_asked), "%s", r->qos_class);
    srv->clients_rejoined++;
    welcome_send(s, req_id, 1);
}

/* A request meant for the other socket (on_admin: a client's that came to the admin socket,
 * else hccld-ctl's on the client socket): refused, naming the socket to use, and closed. */
static void wrong_socket(session_t *s, uint64_t req_id, int on_admin)
{
    const server_config_t *cfg = &s->srv->cfg;
    char why[512];

    if (on_admin)
        snprintf(why, sizeof(why),
                 "this is hccld's admin socket, for hccld-ctl; libhccl talks to its client socket "
                 "%s (HCCLD_SOCKET)",
                 cfg->socket_path);
    else
        snprintf(why, sizeof(why),
                 "this is hccld's client socket, for libhccl; hccld-ctl talks to its admin socket "
                 "%s (--admin-socket)",
                 cfg->admin_path);
    session_refuse(s, req_id, HCCL_E_PARA, why);
    session_close(s);
}

void session_wrong_socket(session_t *s, uint64_t req_id)
{
    wrong_socket(s, req_id, 1);
}

static int admin_request(int body)
{
    return body == HCCLD__MSG__BODY_STATUS_REQ || body == HCCLD__MSG__BODY_QOS_REQ ||
           body == HCCLD__MSG__BODY_TOPOLOGY_REQ || body == HCCLD__MSG__BODY_WATCH_REQ;
}

static int dispatch_client(session_t *s, const Hccld__Msg *m)
{
    if (s->state == SESSION_HELLO_WAIT) {
        if (m->body_case == HCCLD__MSG__BODY_HELLO)
            on_hello(s, m->req_id, m->hello);
        else if (m->body_case == HCCLD__MSG__BODY_REJOIN)
            on_rejoin(s, m->req_id, m->rejoin);
        else if (admin_request(m->body_case))
            wrong_socket(s, m->req_id, 0);
        else
            return -EPROTO;
        return 0;
    }
    return formation_request(s, m);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    framed_alloc(((session_t *)h->data)->dec, buf);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    session_t *s = stream->data;
    Hccld__Msg *m;
    int rc;

    if (nread < 0) {
        session_close(s);
        return;
    }
    frame_dec_commit(s->dec, (size_t)nread);
    if (s->kind == SESSION_CLIENT)
        pending_collect(s);
    while (s->state != SESSION_CLOSING && (rc = frame_dec_next(s->dec, &m)) != 0) {
        if (rc < 0) {
            WARN("IPC", "pid %d sent a malformed frame (%s); closing the connection",
                 (int)s->fc.pid, rc == -EMSGSIZE ? "too large" : "undecodable");
            session_close(s);
            return;
        }
        if (s->kind == SESSION_ADMIN)
            admin_handle(s->srv, s, m), rc = 0;
        else
            rc = dispatch_client(s, m);
        if (rc != 0) {
            WARN("IPC", "pid %d sent an unexpected message (%d); closing the connection",
                 (int)s->fc.pid, (int)m->body_case);
            session_close(s);
        }
        frame_msg_free(m);
    }
    if (s->state != SESSION_CLOSING)
        fds_drop_unclaimed(s);
}

static void on_hello_timeout(uv_timer_t *t)
{
    session_t *s = t->data;

    WARN("IPC", "pid %d connected but sent no Hello within %d ms; closing", (int)s->fc.pid,
         SERVER_HELLO_TIMEOUT_MS);
    session_close(s);
}

static void peer_creds(session_t *s)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;

    if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        s->fc.pid = (int)cred.pid;
        s->fc.uid = (uint32_t)cred.uid;
        s->gid = cred.gid;
    }
}

void session_accept(server_t *srv, uv_stream_t *listener, enum session_kind kind)
{
    session_t *s = calloc(1, sizeof(*s));

    if (s == NULL || (s->dec = malloc(sizeof(*s->dec))) == NULL) {
        free(s);
        ERR("IPC", "out of memory accepting a connection");
        return;
    }
    s->srv = srv;
    s->kind = kind;
    s->memfd = -1;
    s->fc.arena_fd = -1;
    s->fc.sid = ++srv->next_sid;
    frame_dec_init(s->dec);
    /* Clients' pipes carry descriptors (a rejoining client's memfds): an IPC pipe. */
    uv_pipe_init(srv->loop, &s->pipe, kind == SESSION_CLIENT);
    uv_timer_init(srv->loop, &s->hello_timer);
    s->pipe.data = s;
    s->hello_timer.data = s;
    s->next = srv->sessions;
    srv->sessions = s;
    srv->nsessions++;
    if (uv_accept(listener, (uv_stream_t *)&s->pipe) != 0) {
        session_close(s);
        return;
    }
    peer_creds(s);
    if (kind == SESSION_CLIENT && srv->nsessions > SERVER_MAX_CLIENTS) {
        WARN("IPC", "refusing pid %d: %d clients already", (int)s->fc.pid, SERVER_MAX_CLIENTS);
        session_close(s);
        return;
    }
    if (kind == SESSION_ADMIN)
        s->state = SESSION_READY;
    else
        uv_timer_start(&s->hello_timer, on_hello_timeout, SERVER_HELLO_TIMEOUT_MS, 0);
    uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
}
