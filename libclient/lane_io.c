/* A lane's messages: committed, kept, sent as the socket takes them, received whole, and the
 * wait of an op's thread for a repair (lane.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "futex.h"
#include "lane.h"

#define HEALTH_SLICE_NS (100ull * 1000000ull) /* a waiting rank asks its daemon this often */
#define WAIT_SLICE_NS (50ull * 1000000ull)

void lane_init(hc_lane_t *L)
{
    memset(L, 0, sizeof(*L));
    L->fd = -1;
    L->peer = UINT32_MAX;
    pthread_mutex_init(&L->tx_mu, NULL);
    pthread_mutex_init(&L->rx_mu, NULL);
}

void lane_fini(hc_lane_t *L)
{
    for (int i = 0; i < HC_LANE_KEPT; i++)
        free(L->kept[i].buf);
    pthread_mutex_destroy(&L->tx_mu);
    pthread_mutex_destroy(&L->rx_mu);
}

int lane_commit(hc_lane_t *L, const void *hdr, size_t hlen, const void *data, size_t len,
                uint64_t *n_p)
{
    int rc = 0;

    pthread_mutex_lock(&L->tx_mu);
    lane_kept_t *k = &L->kept[L->tx_n % HC_LANE_KEPT];
    if (L->tx_n >= HC_LANE_KEPT && L->cur_n <= L->tx_n - HC_LANE_KEPT) {
        rc = -ENOBUFS; /* its bytes are not even sent: the partner stopped reading */
    } else if (hlen + len > k->cap) {
        uint8_t *b = realloc(k->buf, hlen + len);
        if (b == NULL)
            rc = -ENOMEM;
        else
            k->buf = b, k->cap = hlen + len;
    }
    if (rc == 0) {
        memcpy(k->buf, hdr, hlen);
        if (len > 0)
            memcpy(k->buf + hlen, data, len);
        k->len = hlen + len;
        *n_p = L->tx_n++;
    }
    pthread_mutex_unlock(&L->tx_mu);
    return rc;
}

int lane_pump_locked(hc_lane_t *L)
{
    while (L->cur_n < L->tx_n) {
        const lane_kept_t *k = &L->kept[L->cur_n % HC_LANE_KEPT];
        ssize_t s =
            send(L->fd, k->buf + L->cur_off, k->len - L->cur_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (s < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        L->cur_off += (size_t)s;
        if (L->cur_off == k->len) {
            L->cur_n++;
            L->cur_off = 0;
        }
    }
    return 0;
}

int lane_pump(hc_lane_t *L, uint64_t n, uint32_t *gen_p)
{
    if (pthread_mutex_trylock(&L->tx_mu) != 0)
        return 0; /* the keeper puts a connection in place */
    int rc = lane_pump_locked(L);
    if (rc == 0)
        rc = n == UINT64_MAX ? L->cur_n == L->tx_n : L->cur_n > n;
    *gen_p = L->gen;
    pthread_mutex_unlock(&L->tx_mu);
    return rc;
}

int lane_pending(hc_lane_t *L)
{
    pthread_mutex_lock(&L->tx_mu);
    int p = L->cur_n < L->tx_n;
    pthread_mutex_unlock(&L->tx_mu);
    return p;
}

int lane_recv_some(hc_lane_t *L, uint8_t *buf, size_t len, size_t *got_p, uint32_t *gen_p)
{
    int rc = 0;

    if (pthread_mutex_trylock(&L->rx_mu) != 0) {
        *got_p = 0;
        *gen_p = __atomic_load_n(&L->gen, __ATOMIC_ACQUIRE);
        return -EINPROGRESS; /* only a repair holds it */
    }
    ssize_t k = len > L->rx_got ? recv(L->fd, buf + L->rx_got, len - L->rx_got, MSG_DONTWAIT) : 0;
    if (len > L->rx_got && k == 0)
        rc = -EPIPE;
    else if (k < 0 && errno != EAGAIN && errno != EINTR)
        rc = -errno;
    else if (k > 0)
        L->rx_got += (size_t)k;
    *got_p = L->rx_got;
    if (rc == 0 && L->rx_got == len) {
        L->rx_n++;
        L->rx_got = 0;
        rc = 1;
    }
    *gen_p = L->gen;
    pthread_mutex_unlock(&L->rx_mu);
    return rc;
}

int lane_peek(hc_lane_t *L, void *buf, size_t len)
{
    int rc = 0;

    if (pthread_mutex_trylock(&L->rx_mu) != 0)
        return 0;
    if (L->rx_got == 0)
        rc = recv(L->fd, buf, len, MSG_PEEK | MSG_DONTWAIT) == (ssize_t)len;
    pthread_mutex_unlock(&L->rx_mu);
    return rc;
}

int lane_wait_repair(hc_comm_t *comm, hc_lane_t *L, uint32_t gen, int err, uint64_t deadline)
{
    hc_lanes_t *ln = comm->lanes;
    uint64_t asked = now_ns();
    int rc = 0;

    if (ln->hold_ms == 0 || !ln->keeper_on || __atomic_load_n(&L->dead, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&L->bye, __ATOMIC_ACQUIRE))
        return err;
    __atomic_store_n(&L->hurt_gen, gen + 1, __ATOMIC_RELEASE);
    lane_keeper_wake(ln);
    pthread_mutex_lock(&ln->mu);
    while (rc == 0 && __atomic_load_n(&L->gen, __ATOMIC_ACQUIRE) == gen) {
        uint64_t now = now_ns();
        if (__atomic_load_n(&L->dead, __ATOMIC_ACQUIRE))
            rc = err;
        else if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
            rc = -ECANCELED;
        else if (now >= deadline)
            rc = -ETIMEDOUT;
        if (rc != 0)
            break;
        if (now - asked >= HEALTH_SLICE_NS) {
            /* A partner that died or left: the daemon knows within a second; go to it. */
            pthread_mutex_unlock(&ln->mu);
            HcclResult h = hc_comm_health(comm);
            pthread_mutex_lock(&ln->mu);
            asked = now_ns();
            if (h != HCCL_SUCCESS) {
                rc = err;
                break;
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + WAIT_SLICE_NS;
        ts.tv_sec = (time_t)(t / 1000000000ull);
        ts.tv_nsec = (long)(t % 1000000000ull);
        pthread_cond_timedwait(&ln->cond, &ln->mu, &ts);
    }
    pthread_mutex_unlock(&ln->mu);
    return rc;
}
