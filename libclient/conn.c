/* The process's connection to its node's daemon: Hello/Welcome, the shared segment, requests. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"
#include "env.h"
#include "futex.h"
#include "log.h"

#define DEFAULT_SOCKET "/run/hccld/hccld.sock"
#define HELLO_TIMEOUT_MS 10000

static pthread_mutex_t client_lock = PTHREAD_MUTEX_INITIALIZER;
static hc_client_t *client_cur;

uint64_t hc_env_connect_timeout_s(void)
{
    uint64_t v;

    return env_u64("HCCL_CONNECT_TIMEOUT", 120, 1, 86400, &v) == 0 ? v : 120;
}

static void log_setup(void)
{
    const char *s = getenv("HCCL_DEBUG");
    const char *rank = getenv("HCCL_RANK");
    int level = s ? log_level_parse(s) : -1;

    log_init("hccl", level >= 0 ? level : LOG_WARN);
    if (rank != NULL)
        log_set_who("hccl rank %s", rank);
}

/* Maps the segment and arena (fds[0], fds[1], kept for a restarted daemon) and keeps the
 * doorbell (fds[2]). */
static int welcome_apply(hc_client_t *c, const Hccld__Welcome *w, const int *fds, int nfds)
{
    shm_layout_t l = {.seg_bytes = w->seg_bytes,
                      .sq_off = w->sq_off,
                      .sq_entries = w->sq_entries,
                      .cq_off = w->cq_off,
                      .cq_entries = w->cq_entries,
                      .arena_bytes = w->arena_bytes};

    if (nfds < 3)
        return -EPROTO;
    c->seg = mmap(NULL, l.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (c->seg == MAP_FAILED) {
        c->seg = NULL;
        ERR("IPC", "mmap() of the daemon segment (%llu bytes) failed: %s",
            (unsigned long long)l.seg_bytes, strerror(errno));
        return -errno;
    }
    c->arena = mmap(NULL, l.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    if (c->arena == MAP_FAILED) {
        c->arena = NULL;
        ERR("IPC", "mmap() of the arena (%llu bytes) failed: %s", (unsigned long long)l.arena_bytes,
            strerror(errno));
        return -errno;
    }
    c->seg_fd = fds[0];
    c->arena_fd = fds[1];
    c->doorbell = fds[2];
    c->l = l;
    c->hdr = (shm_hdr_t *)c->seg;
    ring_attach(&c->sq, shm_ring(c->seg, l.sq_off), l.sq_entries, sizeof(desc_t));
    ring_attach(&c->cq, shm_ring(c->seg, l.cq_off), l.cq_entries, sizeof(cqe_t));
    return 0;
}

/* mb: the arena's size in MB, 0 for HCCL_BUFFSIZE's. */
static HcclResult hello(hc_client_t *c, uint64_t mb)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__Hello h = HCCLD__HELLO__INIT;
    int fds[UDS_MAX_FDS], nfds = 0, taken = 0;
    HcclResult rc;

    if (mb == 0 && env_mb("HCCL_BUFFSIZE", HC_BUFFSIZE_DEFAULT_MB, HC_BUFFSIZE_MAX_MB, &mb) != 0)
        return HCCL_E_PARA;
    h.version = PROTO_VERSION;
    h.pid = (uint32_t)getpid();
    h.arena_bytes = mb << 20;
    h.job_name = getenv("HCCL_JOB_NAME") ? getenv("HCCL_JOB_NAME") : "";
    h.qos_class = getenv("HCCL_QOS_CLASS") ? getenv("HCCL_QOS_CLASS") : "";
    m.body_case = HCCLD__MSG__BODY_HELLO;
    m.hello = &h;
    rc = hc_ctl_call_fds(c, &m, &resp, HELLO_TIMEOUT_MS, fds, &nfds);
    if (rc != HCCL_SUCCESS)
        return rc;
    if (resp->body_case != HCCLD__MSG__BODY_WELCOME) {
        rc = HCCL_E_INTERNAL;
    } else if (resp->welcome->result != HCCL_SUCCESS) {
        ERR("IPC", "the daemon refused us: %s", resp->welcome->message);
        rc = (HcclResult)resp->welcome->result;
    } else if (welcome_apply(c, resp->welcome, fds, nfds) != 0) {
        rc = HCCL_E_MEMORY;
    } else {
        taken = 3;
        snprintf(c->advertised, sizeof(c->advertised), "%s", resp->welcome->advertised);
        /* The daemon grants a requested class only if its rules allow; say what we got. */
        if (h.qos_class[0] != '\0' && strcasecmp(h.qos_class, resp->welcome->qos_class) != 0)
            WARN("IPC", "HCCL_QOS_CLASS=%s not granted by the daemon's rules; class %s",
                 h.qos_class, resp->welcome->qos_class);
        else
            INFO("IPC", "QoS class %s", resp->welcome->qos_class);
    }
    for (int i = taken; i < nfds; i++)
        close(fds[i]);
    frame_msg_free(resp);
    return rc;
}

static void client_free(hc_client_t *c)
{
    hc_keeper_stop(c);
    if (c->seg_fd >= 0)
        close(c->seg_fd);
    if (c->arena_fd >= 0)
        close(c->arena_fd);
    if (c->seg != NULL)
        munmap(c->seg, c->l.seg_bytes);
    if (c->arena != NULL)
        munmap(c->arena, c->l.arena_bytes);
    if (c->doorbell >= 0)
        close(c->doorbell);
    uds_conn_close(&c->conn);
    free(c->slots);
    free(c->alloc.v);
    free(c);
}

static HcclResult client_open(uint64_t mb, hc_client_t **c_p)
{
    const char *path = getenv("HCCLD_SOCKET");
    hc_client_t *c = calloc(1, sizeof(*c));
    uint64_t spin_us, exec_s;
    HcclResult rc;
    int fd;

    if (c == NULL)
        return HCCL_E_MEMORY;
    if (path == NULL || *path == '\0')
        path = DEFAULT_SOCKET;
    c->pid = getpid();
    c->doorbell = -1;
    c->seg_fd = c->arena_fd = -1;
    snprintf(c->socket_path, sizeof(c->socket_path), "%s", path);
    pthread_mutex_init(&c->comms_lock, NULL);
    pthread_mutex_init(&c->ctl_lock, NULL);
    pthread_cond_init(&c->ctl_cv, NULL);
    pthread_mutex_init(&c->sq_lock, NULL);
    pthread_mutex_init(&c->cq_lock, NULL);
    pthread_mutex_init(&c->reg_lock, NULL);
    uds_conn_init(&c->conn, -1);
    if (env_u64("HCCLD_SPIN_US", 50, 0, 1000000, &spin_us) != 0 ||
        env_u64("HCCLD_STREAM_MIN", HC_STREAM_MIN_DEFAULT, 0, UINT64_MAX, &c->stream_min) != 0 ||
        env_u64("HCCL_EXEC_TIMEOUT", 1836, 1, 86400 * 7, &exec_s) != 0) {
        free(c);
        return HCCL_E_PARA;
    }
    c->spin_ns = spin_us * 1000;
    c->exec_timeout_ns = exec_s * 1000000000ull;
    fd = uds_connect(path);
    if (fd < 0) {
        ERR("IPC", "cannot reach hccld at %s: %s (is the daemon running? set HCCLD_SOCKET)", path,
            strerror(-fd));
        client_free(c);
        return HCCL_E_UNAVAIL;
    }
    c->conn.fd = fd;
    rc = hello(c, mb);
    if (rc == HCCL_SUCCESS &&
        (hc_slots_init(c) != 0 || hc_arena_init(&c->alloc, c->l.arena_bytes) != 0))
        rc = HCCL_E_MEMORY;
    if (rc != HCCL_SUCCESS) {
        client_free(c);
        return rc;
    }
    INFO("IPC", "connected to %s: arena %llu MiB", path,
         (unsigned long long)(c->l.arena_bytes >> 20));
    *c_p = c;
    return HCCL_SUCCESS;
}

/* hc_daemon_gone without its error: nothing is lost when nothing uses the connection. */
static int conn_lost(hc_client_t *c)
{
    struct pollfd pfd = {.fd = c->conn.fd, .events = POLLRDHUP};

    if (hc_client_dead(c) || hc_client_away(c))
        return 1;
    if (__atomic_load_n(&c->keeper_on, __ATOMIC_ACQUIRE))
        return 0; /* the keeper watches (and may be replacing) the connection */
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

static int arena_empty(hc_arena_t *a)
{
    int empty;

    pthread_mutex_lock(&a->lock);
    empty = a->n == 1 && !a->v[0].used;
    pthread_mutex_unlock(&a->lock);
    return empty;
}

hc_client_t *hc_client_get(HcclResult *err_p)
{
    return hc_client_get_mb(0, err_p);
}

hc_client_t *hc_client_get_mb(uint64_t mb, HcclResult *err_p)
{
    hc_client_t *c;
    HcclResult rc = HCCL_SUCCESS;

    pthread_mutex_lock(&client_lock);
    c = client_cur;
    /* A child after fork() must not share its parent's connection and rings. */
    if (c != NULL && c->pid != getpid()) {
        client_free(c);
        c = client_cur = NULL;
    }
    /* Its daemon is gone (restarted?) and nothing of this process uses it: start afresh. */
    if (c != NULL && c->holds == 0 && conn_lost(c) && arena_empty(&c->alloc)) {
        INFO("IPC", "the connection to the daemon was lost; connecting again");
        client_free(c);
        c = client_cur = NULL;
    }
    if (c == NULL) {
        log_setup();
        rc = client_open(mb, &c);
        client_cur = rc == HCCL_SUCCESS ? c : NULL;
    }
    if (c != NULL && hc_client_dead(c)) {
        pthread_mutex_unlock(&client_lock);
        *err_p = HCCL_E_UNAVAIL;
        return NULL;
    }
    if (c != NULL)
        c->holds++;
    pthread_mutex_unlock(&client_lock);
    *err_p = rc;
    return c;
}

void hc_client_hold(hc_client_t *c)
{
    pthread_mutex_lock(&client_lock);
    c->holds++;
    pthread_mutex_unlock(&client_lock);
}

void hc_client_put(hc_client_t *c)
{
    pthread_mutex_lock(&client_lock);
    c->holds--;
    pthread_mutex_unlock(&client_lock);
}

/* The connection to the daemon closed: the keeper brings it back, or the daemon is gone. */
static void conn_closed(hc_client_t *c)
{
    if (__atomic_load_n(&c->keeper_on, __ATOMIC_ACQUIRE))
        __atomic_store_n(&c->away, 1, __ATOMIC_RELEASE);
    else if (!hc_client_set_dead(c))
        ERR("IPC", "the daemon closed the connection (did it stop or crash?)");
}

int hc_daemon_gone(hc_client_t *c)
{
    if (hc_client_dead(c))
        return 1;
    /* With a keeper, it alone watches the connection (and replaces it). */
    if (__atomic_load_n(&c->keeper_on, __ATOMIC_ACQUIRE))
        return 0;
    struct pollfd pfd = {.fd = c->conn.fd, .events = POLLRDHUP};
    if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR)))
        conn_closed(c);
    return hc_client_dead(c);
}

/* Hands the n descriptors at `from` to the caller (fds, *nfds_p); closes them when the caller
 * wants none. */
static void fds_give(const int *from, int n, int *fds, int *nfds_p)
{
    for (int i = 0; i < n; i++) {
        if (fds != NULL && *nfds_p < UDS_MAX_FDS)
            fds[(*nfds_p)++] = from[i];
        else
            close(from[i]);
    }
}

static Hccld__Msg *parked_take(hc_client_t *c, uint64_t id, int *fds, int *nfds_p)
{
    for (unsigned i = 0; i < sizeof(c->parked) / sizeof(c->parked[0]); i++)
        if (c->parked[i] != NULL && c->parked[i]->req_id == id) {
            Hccld__Msg *m = c->parked[i];
            c->parked[i] = NULL;
            fds_give(c->parked_fds[i], c->parked_nfds[i], fds, nfds_p);
            c->parked_nfds[i] = 0;
            return m;
        }
    return NULL;
}

/* Keeps an answer for the thread that waits for it, with the descriptors that came with it. */
static void park(hc_client_t *c, Hccld__Msg *m)
{
    for (unsigned i = 0; i < sizeof(c->parked) / sizeof(c->parked[0]); i++)
        if (c->parked[i] == NULL) {
            c->parked[i] = m;
            memcpy(c->parked_fds[i], c->conn.fds, (size_t)c->conn.nfds * sizeof(int));
            c->parked_nfds[i] = c->conn.nfds;
            c->conn.nfds = 0;
            return;
        }
    WARN("IPC", "dropping an unexpected answer from the daemon (id %llu)",
         (unsigned long long)m->req_id);
    frame_msg_free(m);
}

/* Reads one message with ctl_lock released; returns 0, -ETIMEDOUT or another error. Ours (id)
 * goes to *mine_p, with its descriptors into fds when fds is not NULL. */
static int read_one(hc_client_t *c, uint64_t id, Hccld__Msg **mine_p, int *fds, int *nfds_p)
{
    Hccld__Msg *m = NULL;
    int rc;

    c->reader_active = 1;
    pthread_mutex_unlock(&c->ctl_lock);
    rc = uds_recv(&c->conn, &m, 100);
    pthread_mutex_lock(&c->ctl_lock);
    c->reader_active = 0;
    if (rc == 0 && m->req_id == id) {
        *mine_p = m;
        fds_give(c->conn.fds, c->conn.nfds, fds, nfds_p);
        c->conn.nfds = 0;
    } else if (rc == 0)
        park(c, m);
    pthread_cond_broadcast(&c->ctl_cv);
    return rc;
}

HcclResult hc_ctl_call(hc_client_t *c, Hccld__Msg *req, Hccld__Msg **resp_p, int timeout_ms)
{
    return hc_ctl_call_fds(c, req, resp_p, timeout_ms, NULL, NULL);
}

int hc_ctl_send(hc_client_t *c, Hccld__Msg *req, const int *fds, int nfds, uint64_t *id_p)
{
    int rc = 0;

    pthread_mutex_lock(&c->ctl_lock);
    *id_p = req->req_id = ++c->next_req;
    if (hc_client_dead(c) || uds_send(c->conn.fd, req, fds, nfds) != 0)
        rc = -EPIPE;
    pthread_mutex_unlock(&c->ctl_lock);
    return rc;
}

HcclResult hc_ctl_wait(hc_client_t *c, uint64_t id, uint64_t deadline, Hccld__Msg **resp_p,
                       int *fds, int *nfds_p)
{
    Hccld__Msg *m = NULL;
    HcclResult rc = HCCL_SUCCESS;

    pthread_mutex_lock(&c->ctl_lock);
    if (fds != NULL)
        *nfds_p = 0;
    while ((m = parked_take(c, id, fds, nfds_p)) == NULL) {
        if (hc_client_dead(c)) {
            rc = HCCL_E_UNAVAIL;
            break;
        }
        if (now_ns() > deadline) {
            rc = HCCL_E_TIMEOUT;
            break;
        }
        if (c->reader_active) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&c->ctl_cv, &c->ctl_lock, &ts);
            continue;
        }
        int r = read_one(c, id, &m, fds, nfds_p);
        if (m != NULL)
            break;
        if (r != 0 && r != -ETIMEDOUT) {
            /* The keeper's own requests end here; others wait for it to bring the daemon
             * back and ask again (hc_ctl_call_fds). */
            rc = HCCL_E_UNAVAIL;
            pthread_mutex_unlock(&c->ctl_lock);
            conn_closed(c);
            pthread_mutex_lock(&c->ctl_lock);
            if (hc_client_dead(c))
                ERR("IPC", "lost the daemon connection: %s", strerror(-r));
            break;
        }
    }
    pthread_mutex_unlock(&c->ctl_lock);
    *resp_p = m;
    return m != NULL ? HCCL_SUCCESS : rc;
}

HcclResult hc_ctl_call_fds(hc_client_t *c, Hccld__Msg *req, Hccld__Msg **resp_p, int timeout_ms,
                           int *fds, int *nfds_p)
{
    uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull, id;
    HcclResult rc = HCCL_E_UNAVAIL;

    /* A request the daemon's restart cut off is asked again of the next one (every request of
     * a rank is one it may repeat: joins and splits wait for the others anyway). */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (hc_wait_back(c) != 0)
            break;
        if (hc_ctl_send(c, req, NULL, 0, &id) != 0) {
            conn_closed(c);
            continue;
        }
        rc = hc_ctl_wait(c, id, deadline, resp_p, fds, nfds_p);
        if (rc != HCCL_E_UNAVAIL || hc_client_dead(c))
            break;
    }
    if (rc == HCCL_E_UNAVAIL)
        ERR("IPC", "the daemon is gone (%s)", c->socket_path);
    return rc;
}
