/* Setting up a comm's lanes (lane.h): the plan, the connections and their key proof. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "env.h"
#include "futex.h"
#include "lane.h"
#include "log.h"
#include "net_addr.h"

_Static_assert(sizeof(((hc_lanes_t *)0)->key) == AUTH_DERIVED_BYTES, "lane key");

#define LANE_MAGIC 0x4e4c4348u /* "HCLN" */
#define LANE_VERSION 2u        /* 2: both sides say how many messages they took (repairs) */

/* The connecting side's first message; then the acceptor's challenge, then the proof. */
struct lane_hello {
    uint32_t magic, version, from, to;
    uint64_t rx_n; /* messages the connecting side took from the other */
    uint8_t nonce[AUTH_NONCE_BYTES];
};

typedef struct lane_challenge {
    uint64_t rx_n; /* messages the accepting side took from the other */
    uint8_t nonce[AUTH_NONCE_BYTES];
    uint8_t mac[AUTH_MAC_BYTES];
} lane_challenge_t;

uint64_t hc_lanes_wanted(void)
{
    uint64_t v;

    if (env_u64("HCCLD_DIRECT_MAX", HC_DIRECT_MAX_DEFAULT, 0, HC_DIRECT_MAX_LIMIT, &v) != 0)
        v = HC_DIRECT_MAX_DEFAULT;
    return v;
}

/* The partners of a rank and which of them it connects to (those above it). */
static uint32_t lane_peers(hc_lanes_t *ln, hc_lane_t **v)
{
    const lane_plan_t *p = &ln->plan;
    uint32_t k = 0;

    if (p->fold != UINT32_MAX) {
        LANE_FOLD(ln)->peer = p->fold;
        v[k++] = LANE_FOLD(ln);
    }
    for (uint32_t l = 0; !p->extra && l < p->levels; l++) {
        LANE_LEVEL(ln, l)->peer = lane_plan_partner(p, l);
        v[k++] = LANE_LEVEL(ln, l);
    }
    return k;
}

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = now_ns();

    return now >= deadline ? 0 : (int)((deadline - now) / 1000000 + 1);
}

/* Moves exactly len bytes over a nonblocking socket, by deadline. 0, -ETIMEDOUT, or -errno
 * (-EPIPE: the other side closed). */
static int io_all(int fd, void *buf, size_t len, int out, uint64_t deadline)
{
    uint8_t *b = buf;

    while (len > 0) {
        ssize_t k =
            out ? send(fd, b, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, b, len, MSG_DONTWAIT);
        if (k > 0) {
            b += k;
            len -= (size_t)k;
            continue;
        }
        if (k == 0)
            return -EPIPE;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        struct pollfd pfd = {.fd = fd, .events = out ? POLLOUT : POLLIN};
        int ms = remaining_ms(deadline);
        if (ms == 0)
            return -ETIMEDOUT;
        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
            return -errno;
    }
    return 0;
}

static void role(char *buf, size_t cap, const char *side, uint32_t from, uint32_t to)
{
    snprintf(buf, cap, "hccld lane %s %u>%u", side, from, to);
}

/* Connects socket fd to rank `to` at addr and proves the key both ways. */
int lane_connect(hc_lanes_t *ln, int fd, uint32_t to, const char *addr, uint64_t rx_n,
                 uint64_t *peer_rx_p, uint64_t deadline)
{
    struct sockaddr_storage ss;
    socklen_t len;
    struct lane_hello h = {
        .magic = LANE_MAGIC, .version = LANE_VERSION, .from = ln->plan.me, .to = to, .rx_n = rx_n};
    lane_challenge_t ch;
    uint8_t mac[AUTH_MAC_BYTES];
    char r[64];
    int rc;

    if (net_addr_parse(addr, &ss, &len) != 0)
        return -EINVAL;
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS)
        return -errno;
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t elen = sizeof(err);
    if (poll(&pfd, 1, remaining_ms(deadline)) <= 0)
        return -ETIMEDOUT;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0)
        return -(err ? err : errno);
    auth_nonce(h.nonce);
    if ((rc = io_all(fd, &h, sizeof(h), 1, deadline)) != 0 ||
        (rc = io_all(fd, &ch, sizeof(ch), 0, deadline)) != 0)
        return rc;
    role(r, sizeof(r), "accept", ln->plan.me, to);
    if (!auth_check(ln->key, AUTH_DERIVED_BYTES, r, h.nonce, ch.nonce, ch.mac, sizeof(ch.mac)))
        return -EACCES;
    role(r, sizeof(r), "connect", ln->plan.me, to);
    auth_mac(ln->key, AUTH_DERIVED_BYTES, r, ch.nonce, h.nonce, mac);
    *peer_rx_p = ch.rx_n;
    return io_all(fd, mac, sizeof(mac), 1, deadline);
}

/* The lane to `from`, a partner below us, or NULL. */
static hc_lane_t *lane_from(hc_lanes_t *ln, uint32_t from)
{
    if (from >= ln->plan.me)
        return NULL;
    for (uint32_t i = 0; i <= HC_LANE_LEVELS_MAX; i++)
        if (ln->lane[i].peer == from)
            return &ln->lane[i];
    return NULL;
}

int lane_accept_hello(hc_lanes_t *ln, int lfd, uint64_t deadline, hc_lane_t **lane_p,
                      uint64_t *peer_rx_p, uint8_t *nonce, int *fd_p)
{
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    struct lane_hello h;
    int fd, rc;

    if (poll(&pfd, 1, remaining_ms(deadline)) <= 0)
        return -ETIMEDOUT;
    fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? -EAGAIN : -errno;
    rc = io_all(fd, &h, sizeof(h), 0, deadline);
    if (rc == 0 && (h.magic != LANE_MAGIC || h.version != LANE_VERSION || h.to != ln->plan.me ||
                    h.from >= ln->plan.n))
        rc = -EPROTO;
    if (rc == 0 && (*lane_p = lane_from(ln, h.from)) == NULL) {
        WARN("INIT", "rank %u: rank %u connected a lane it has no use for; closed", ln->plan.me,
             h.from);
        rc = -ENOENT;
    }
    if (rc != 0) {
        if (rc != -ENOENT)
            WARN("INIT", "rank %u: a lane connection failed its handshake (%s); closed",
                 ln->plan.me, strerror(-rc));
        close(fd);
        return rc == -ETIMEDOUT ? rc : -EAGAIN;
    }
    memcpy(nonce, h.nonce, AUTH_NONCE_BYTES);
    *peer_rx_p = h.rx_n;
    *fd_p = fd;
    return 0;
}

int lane_accept_finish(hc_lanes_t *ln, int fd, const hc_lane_t *lane, const uint8_t *nonce,
                       uint64_t rx_n, uint64_t deadline)
{
    lane_challenge_t ch = {.rx_n = rx_n};
    uint8_t mac[AUTH_MAC_BYTES];
    char r[64];
    int rc;

    auth_nonce(ch.nonce);
    role(r, sizeof(r), "accept", lane->peer, ln->plan.me);
    auth_mac(ln->key, AUTH_DERIVED_BYTES, r, nonce, ch.nonce, ch.mac);
    rc = io_all(fd, &ch, sizeof(ch), 1, deadline);
    if (rc == 0 && (rc = io_all(fd, mac, sizeof(mac), 0, deadline)) == 0) {
        role(r, sizeof(r), "connect", lane->peer, ln->plan.me);
        if (!auth_check(ln->key, AUTH_DERIVED_BYTES, r, ch.nonce, nonce, mac, sizeof(mac)))
            rc = -EACCES;
    }
    if (rc != 0) {
        WARN("INIT", "rank %u: the lane from rank %u failed its handshake (%s); closed",
             ln->plan.me, lane->peer, strerror(-rc));
        close(fd);
    }
    return rc;
}

/* Connects to the partners above, then accepts those below, by deadline. */
static int lanes_connect(hc_lanes_t *ln, const Hccld__CommInitResp *r, int lfd, int *socks,
                         uint32_t nsocks, uint64_t deadline)
{
    hc_lane_t *peers[HC_LANE_LEVELS_MAX + 1];
    uint32_t np = lane_peers(ln, peers), used = 0, below = 0;
    uint64_t peer_rx;
    int rc;

    for (uint32_t i = 0; i < np; i++) {
        hc_lane_t *L = peers[i];
        snprintf(L->addr, sizeof(L->addr), "%s", r->lane_addrs[L->peer]);
        if (L->peer < ln->plan.me) {
            below++;
            continue;
        }
        if (used == nsocks)
            return -ENOSPC;
        int fd = socks[used];
        socks[used++] = -1;
        L->fd = fd;
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        rc = lane_connect(ln, fd, L->peer, L->addr, 0, &peer_rx, deadline);
        if (rc != 0) {
            ERR("INIT", "rank %u: the lane to rank %u at %s failed: %s", ln->plan.me, L->peer,
                L->addr, strerror(-rc));
            return rc;
        }
    }
    while (below > 0) {
        uint8_t nonce[AUTH_NONCE_BYTES];
        hc_lane_t *L = NULL;
        int fd = -1;
        if ((rc = lane_accept_hello(ln, lfd, deadline, &L, &peer_rx, nonce, &fd)) == -EAGAIN)
            continue;
        if (rc != 0) {
            ERR("INIT", "rank %u: %u lane(s) from the ranks below never came: %s", ln->plan.me,
                below, strerror(-rc));
            return rc;
        }
        if (L->fd >= 0) {
            WARN("INIT", "rank %u: rank %u connected a second lane; closed", ln->plan.me, L->peer);
            close(fd);
            continue;
        }
        if (lane_accept_finish(ln, fd, L, nonce, 0, deadline) != 0)
            continue; /* closed; a deadline that passed ends the next accept */
        L->fd = fd;
        below--;
    }
    return 0;
}

static void lanes_free(hc_lanes_t *ln)
{
    lane_keeper_stop(ln);
    if (ln->lfd >= 0)
        close(ln->lfd);
    for (uint32_t l = 0; l <= HC_LANE_LEVELS_MAX; l++) {
        if (ln->lane[l].fd >= 0)
            close(ln->lane[l].fd);
        lane_fini(&ln->lane[l]);
    }
    pthread_mutex_destroy(&ln->lock);
    pthread_mutex_destroy(&ln->mu);
    pthread_cond_destroy(&ln->cond);
    free(ln->rx);
    free(ln->acc);
    free(ln);
}

HcclResult hc_lanes_open(hc_comm_t *comm, const Hccld__CommInitResp *r, int *fds, int nfds)
{
    hc_lanes_t *ln = calloc(1, sizeof(*ln));
    /* The daemons enforce HCCL_CONNECT_TIMEOUT on their side of the comm and name what they
     * waited for; the lanes wait a little longer, as the init answer does. */
    uint64_t deadline = now_ns() + (hc_env_connect_timeout_s() + 5) * 1000000000ull;
    HcclResult rc = HCCL_E_MEMORY;

    if (ln == NULL)
        goto out;
    for (uint32_t l = 0; l <= HC_LANE_LEVELS_MAX; l++)
        lane_init(&ln->lane[l]);
    ln->lfd = -1;
    ln->wake_fd = -1;
    pthread_mutex_init(&ln->lock, NULL);
    pthread_mutex_init(&ln->mu, NULL);
    pthread_cond_init(&ln->cond, NULL);
    lane_plan(r->nranks, r->rank, &ln->plan);
    ln->max = r->direct_max < HC_DIRECT_MAX_LIMIT ? r->direct_max : HC_DIRECT_MAX_LIMIT;
    if (r->lane_key.len != AUTH_DERIVED_BYTES || r->n_lane_addrs != r->nranks || nfds < 1 ||
        r->rank >= r->nranks || ln->plan.levels > HC_LANE_LEVELS_MAX) {
        ERR("INIT", "rank %u: the daemon's lane answer is malformed", r->rank);
        rc = HCCL_E_INTERNAL;
        goto out;
    }
    if ((ln->rx = malloc(64 + ln->max)) == NULL || (ln->acc = malloc(ln->max + 1)) == NULL)
        goto out;
    memcpy(ln->key, r->lane_key.data, AUTH_DERIVED_BYTES);
    /* Ops start once the daemons' side of the comm is up, as on the daemon path: a rank that
     * dies or leaves from then on is news every daemon of the comm hears. A comm whose daemons
     * never get there fails its ops, as the daemon path would: with the daemons' status. */
    HcclResult ready = hc_comm_wait_ready(comm, deadline);
    if (ready != HCCL_SUCCESS)
        ERR("INIT", "rank %u: the comm's daemons never got ready (%s): its ops will fail", r->rank,
            HcclGetErrorString(ready));
    /* A comm that broke meanwhile (faster ranks already ran an op that failed) still connects:
     * its partners wait for the lanes, and then hear why this rank fails its ops. */
    int err = ready == HCCL_E_TIMEOUT || ready == HCCL_E_UNAVAIL
                  ? -ETIMEDOUT
                  : lanes_connect(ln, r, fds[0], fds + 1, (uint32_t)nfds - 1, deadline);
    if (ready != HCCL_SUCCESS) {
        comm->lanes = ln;
        hc_lanes_retire(comm, ready);
        ln = NULL;
        rc = HCCL_SUCCESS;
        goto out;
    }
    if (err != 0) {
        rc = err == -ETIMEDOUT ? HCCL_E_TIMEOUT : HCCL_E_TCP_CONNECT;
        goto out;
    }
    comm->lanes = ln;
    lane_count_claim(comm);
    /* With op retry at L1, a lane that fails connects again: the listener stays. */
    if (comm->lane_hold_ms > 0) {
        ln->lfd = fds[0];
        fds[0] = -1;
        ln->hold_ms = comm->lane_hold_ms;
        if (lane_keeper_start(comm) != 0)
            WARN("INIT",
                 "rank %u: cannot start the thread that mends lanes; a lane that fails "
                 "sends the comm's small ops through the daemons",
                 r->rank);
    }
    ln = NULL;
    rc = HCCL_SUCCESS;
    DBG("INIT", "rank %u: lanes up for ops up to %llu bytes", r->rank,
        (unsigned long long)r->direct_max);
out:
    for (int i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (ln != NULL)
        lanes_free(ln);
    return rc;
}

void hc_lanes_close(hc_comm_t *comm)
{
    if (comm->lanes != NULL) {
        lane_count_release(comm->lanes);
        lanes_free(comm->lanes);
    }
    comm->lanes = NULL;
}
