/*
 * The lanes' keeper (issue 37): with op retry at L1, a lane whose connection fails (a reset, a
 * link that went down) connects again, and each side sends again what the other lacks, so that
 * no op falls back to the daemons for it. A reset loses what the sender's kernel still held
 * unacknowledged; were that op to fall back on one side only, the other side, already done with
 * it, would be at the next op: the daemons would see ranks disagree. For the same reason a rank
 * that closes the comm waits for its partners' answer to its goodbye (hc_lanes_bye); the keeper
 * answers a partner's goodbye while no op runs.
 *
 * One thread per comm with lanes. It watches the listener (partners below connect again) and
 * every connection (the kernel reports a failed one), and the op's thread wakes it when it meets
 * one first. The rank below connects again, with a fresh socket from its daemon (made in the
 * daemon's network namespace, as at setup), to where the rank above listens, and the two prove
 * the lane key as at setup. Each says how many messages it took from the other; each sends again,
 * from what it kept (lane_io.c), the messages from there on. The new connection takes the old
 * descriptor's number (dup3), so that the op's thread goes on with the same one.
 *
 * The keeper serves the lanes whatever the op's thread does (an op through the daemon, the user's
 * own code): the partner may need its messages any time. It gives a lane up (dead: its op falls
 * back to the daemon, which says why) when the partner refuses the connection (its comm is
 * gone), or when no connection came back within the comm's hold (HoldTime + (MaxCnt - 1) x
 * IntervalTime).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "futex.h"
#include "lane.h"
#include "log.h"

#define HANDSHAKE_NS (1000ull * 1000000ull) /* one attempt to connect again */
#define RETRY_FIRST_NS (20ull * 1000000ull)
#define RETRY_MAX_NS (500ull * 1000000ull)
/* How often the keeper looks at the connections while the op's thread is elsewhere. It does
 * not sleep on them: a thread in poll() on a socket makes every packet of the lane wake it
 * (the kernel filters the wake-up only afterwards), which cost the 8-byte allreduce 0.9 us. */
#define LOOK_MS 50

void lane_keeper_wake(hc_lanes_t *ln)
{
    uint64_t one = 1;

    if (ln->wake_fd >= 0)
        (void)!write(ln->wake_fd, &one, sizeof(one));
}

static void repaired(hc_lanes_t *ln)
{
    pthread_mutex_lock(&ln->mu);
    pthread_cond_broadcast(&ln->cond);
    pthread_mutex_unlock(&ln->mu);
}

static void give_up(hc_lanes_t *ln, hc_lane_t *L, const char *why)
{
    if (__atomic_exchange_n(&L->dead, 1, __ATOMIC_ACQ_REL) == 0 &&
        __atomic_load_n(&ln->state, __ATOMIC_ACQUIRE) == HC_LANES_ON &&
        !__atomic_load_n(&L->bye, __ATOMIC_ACQUIRE))
        WARN("COLL", "rank %u: the lane to rank %u stays down (%s)", ln->plan.me, L->peer, why);
    repaired(ln);
}

/* Puts fd in place of L's connection (rx_mu held; released here): the partner took peer_rx of
 * our messages, and sends again from where we got to. */
static void install(hc_lanes_t *ln, hc_lane_t *L, int fd, uint64_t peer_rx)
{
    pthread_mutex_lock(&L->tx_mu);
    int ok =
        peer_rx <= L->tx_n && L->tx_n - peer_rx <= HC_LANE_KEPT && dup3(fd, L->fd, O_CLOEXEC) >= 0;
    if (ok) {
        L->cur_n = peer_rx;
        L->cur_off = 0;
        L->rx_got = 0;
        __atomic_store_n(&L->gen, L->gen + 1, __ATOMIC_RELEASE);
        L->down_ns = 0;
        L->backoff_ns = 0;
    }
    close(fd);
    pthread_mutex_unlock(&L->rx_mu);
    uint32_t gen = L->gen;
    uint64_t again = L->tx_n - peer_rx;
    if (ok)
        (void)lane_pump_locked(L); /* a failure shows on the new connection */
    pthread_mutex_unlock(&L->tx_mu);
    if (ok)
        INFO("COLL",
             "rank %u: the lane to rank %u is back (connection %u); %llu message(s) "
             "sent again",
             ln->plan.me, L->peer, gen + 1, (unsigned long long)again);
    else
        give_up(ln, L, "the partner lacks messages no longer kept");
    repaired(ln);
}

/* A fresh socket from our daemon to connect with, or -1. */
static int fresh_socket(hc_comm_t *comm)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__LaneSocketsReq req = HCCLD__LANE_SOCKETS_REQ__INIT;
    int fds[4], nfds = 0, fd = -1;

    req.count = 1;
    m.body_case = HCCLD__MSG__BODY_LANE_SOCKETS_REQ;
    m.lane_sockets_req = &req;
    if (hc_ctl_call_fds(comm->c, &m, &resp, 5000, fds, &nfds) != HCCL_SUCCESS)
        return -1;
    if (resp->body_case == HCCLD__MSG__BODY_LANE_SOCKETS_RESP &&
        resp->lane_sockets_resp->result == HCCL_SUCCESS && nfds == 1)
        fd = fds[0], nfds = 0;
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    frame_msg_free(resp);
    return fd;
}

/* We are below L's partner: connect again. */
static void reconnect(hc_comm_t *comm, hc_lane_t *L)
{
    hc_lanes_t *ln = comm->lanes;
    uint64_t peer_rx = 0;
    int fd = fresh_socket(comm), rc = -EAGAIN;

    if (fd >= 0) {
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        pthread_mutex_lock(&L->rx_mu);
        rc = lane_connect(ln, fd, L->peer, L->addr, L->rx_n, &peer_rx, now_ns() + HANDSHAKE_NS);
        if (rc == 0) {
            install(ln, L, fd, peer_rx);
            return;
        }
        pthread_mutex_unlock(&L->rx_mu);
        close(fd);
    }
    if (rc == -ECONNREFUSED) {
        give_up(ln, L, "it no longer listens");
        return;
    }
    L->backoff_ns = L->backoff_ns == 0 ? RETRY_FIRST_NS : 2 * L->backoff_ns;
    L->backoff_ns = L->backoff_ns < RETRY_MAX_NS ? L->backoff_ns : RETRY_MAX_NS;
    L->next_try_ns = now_ns() + L->backoff_ns;
    DBG("COLL", "rank %u: connecting the lane to rank %u again failed (%s)", ln->plan.me, L->peer,
        strerror(-rc));
}

/* A partner below connects again. */
static void take_back(hc_lanes_t *ln)
{
    uint8_t nonce[AUTH_NONCE_BYTES];
    hc_lane_t *L = NULL;
    uint64_t peer_rx = 0, deadline = now_ns() + HANDSHAKE_NS;
    int fd = -1;

    if (lane_accept_hello(ln, ln->lfd, deadline, &L, &peer_rx, nonce, &fd) != 0)
        return;
    pthread_mutex_lock(&L->rx_mu);
    if (lane_accept_finish(ln, fd, L, nonce, L->rx_n, deadline) != 0) {
        pthread_mutex_unlock(&L->rx_mu);
        return;
    }
    install(ln, L, fd, peer_rx);
}

/* Whether L's connection failed: the kernel says so, or the op's thread did (for this one). */
static int failed(hc_lane_t *L, short revents)
{
    return (revents & (POLLERR | POLLHUP | POLLNVAL)) ||
           __atomic_load_n(&L->hurt_gen, __ATOMIC_ACQUIRE) == L->gen + 1;
}

/* Partners that closed the comm while no op of ours runs: takes each one's goodbye and answers
 * it, so that its HcclCommDestroy goes on. Only with the lanes' lock: an op's thread that met
 * the receive lock held would wait for a repair. An op that runs meets the goodbye itself (a
 * header unlike its own: it falls back to the daemon, which knows the partner left). */
static void answer_byes(hc_lanes_t *ln, hc_lane_t **of, int n)
{
    if (pthread_mutex_trylock(&ln->lock) != 0)
        return;
    for (int i = 0; i < n; i++) {
        hc_lane_t *L = of[i];
        lane_hdr_t h;
        size_t got;
        uint32_t gen;
        uint64_t k;
        if (L->down_ns != 0 || __atomic_load_n(&L->bye, __ATOMIC_ACQUIRE) ||
            !lane_peek(L, &h, sizeof(h)) || !(h.flags & LANE_F_BYE) ||
            lane_recv_some(L, (uint8_t *)&h, sizeof(h), &got, &gen) != 1)
            continue;
        __atomic_store_n(&L->bye, 1, __ATOMIC_RELEASE);
        lane_hdr_t a = {.seq = h.seq, .flags = LANE_F_BYE_ACK};
        if (lane_commit(L, &a, sizeof(a), NULL, 0, &k) == 0)
            (void)lane_pump(L, k, &gen); /* the rest, if any, when the socket takes it */
        DBG("COLL", "rank %u: rank %u closed the comm", ln->plan.me, L->peer);
    }
    pthread_mutex_unlock(&ln->lock);
}

static void *keeper_main(void *arg)
{
    hc_comm_t *comm = arg;
    hc_lanes_t *ln = comm->lanes;
    const uint64_t hold_ns = (uint64_t)ln->hold_ms * 1000000ull;

    while (!__atomic_load_n(&ln->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd p[HC_LANE_LEVELS_MAX + 3];
        hc_lane_t *of[HC_LANE_LEVELS_MAX + 3] = {NULL};
        struct pollfd b[HC_LANE_LEVELS_MAX + 3];
        int n = 2, nb = 2, ms = LOOK_MS;
        uint64_t now = now_ns();
        p[0] = (struct pollfd){.fd = ln->wake_fd, .events = POLLIN};
        p[1] = (struct pollfd){.fd = ln->lfd, .events = POLLIN};
        for (uint32_t i = 0; i <= HC_LANE_LEVELS_MAX; i++) {
            hc_lane_t *L = &ln->lane[i];
            if (L->fd < 0 || __atomic_load_n(&L->dead, __ATOMIC_ACQUIRE))
                continue;
            if (L->down_ns != 0) { /* not watched until it is back: its fd only says failed */
                uint64_t due = L->peer > ln->plan.me ? L->next_try_ns : L->down_ns + hold_ns;
                int left = due > now ? (int)((due - now) / 1000000 + 1) : 0;
                ms = left < ms ? left : ms;
                continue;
            }
            of[n] = L;
            p[n] = (struct pollfd){.fd = L->fd, .events = lane_pending(L) ? POLLOUT : 0};
            if (p[n].events)
                b[nb++] = p[n];
            n++;
        }
        b[0] = p[0];
        b[1] = p[1];
        if (poll(b, (nfds_t)nb, ms) < 0 && errno != EINTR)
            break;
        p[0].revents = b[0].revents;
        p[1].revents = b[1].revents;
        if (n > 2 && poll(p + 2, (nfds_t)(n - 2), 0) < 0 && errno != EINTR)
            break;
        if (p[0].revents & POLLIN) {
            uint64_t v;
            (void)!read(ln->wake_fd, &v, sizeof(v));
        }
        if (__atomic_load_n(&ln->stop, __ATOMIC_ACQUIRE))
            break;
        if (p[1].revents & POLLIN)
            take_back(ln);
        now = now_ns();
        for (int k = 2; k < n; k++) {
            hc_lane_t *L = of[k];
            uint32_t gen;
            if (L->down_ns == 0 && failed(L, p[k].revents)) {
                L->down_ns = now;
                L->next_try_ns = now;
                DBG("COLL", "rank %u: the lane to rank %u failed", ln->plan.me, L->peer);
            } else if (p[k].revents & POLLOUT) {
                (void)lane_pump(L, UINT64_MAX, &gen);
            }
        }
        answer_byes(ln, of + 2, n - 2);
        for (uint32_t i = 0; i <= HC_LANE_LEVELS_MAX; i++) {
            hc_lane_t *L = &ln->lane[i];
            if (L->fd < 0 || L->down_ns == 0 || __atomic_load_n(&L->dead, __ATOMIC_ACQUIRE))
                continue;
            now = now_ns();
            if (now - L->down_ns >= hold_ns)
                give_up(ln, L, "it did not come back within the op retry hold");
            else if (L->peer > ln->plan.me && now >= L->next_try_ns)
                reconnect(comm, L);
        }
    }
    return NULL;
}

int lane_keeper_start(hc_comm_t *comm)
{
    hc_lanes_t *ln = comm->lanes;

    if ((ln->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        return -errno;
    if (pthread_create(&ln->keeper, NULL, keeper_main, comm) != 0)
        return -EAGAIN;
    ln->keeper_on = 1;
    return 0;
}

void lane_keeper_stop(hc_lanes_t *ln)
{
    if (ln->keeper_on) {
        __atomic_store_n(&ln->stop, 1, __ATOMIC_RELEASE);
        lane_keeper_wake(ln);
        pthread_join(ln->keeper, NULL);
        ln->keeper_on = 0;
    }
    if (ln->wake_fd >= 0)
        close(ln->wake_fd);
    ln->wake_fd = -1;
}
