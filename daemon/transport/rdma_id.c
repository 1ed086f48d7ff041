/*
 * rdma_cm identities of the RDMA transport: ids each on an event channel of their own whose fd the
 * engine polls (nonblocking, so that taking events never waits). An id done with goes at once,
 * unless its port is down: destroying a connected id sends the peer a disconnect, and a
 * soft-RoCE device that sends one on a port that is down drops every later connection request
 * (its ids then wait for the port, rdma_id_release).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "env.h"
#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"

int rdma_bind_error(const char *what, const char *ip, int err)
{
    /* The kernel says ENODEV when the address is on a netdev that no RDMA device serves, and
     * EADDRNOTAVAIL when no netdev has it. */
    if (err == ENODEV) {
        INFO("NET", "%s(%s): no RDMA device carries %s", what, ip, ip);
        return -ENODEV;
    }
    if (err == EADDRNOTAVAIL) {
        ERR("NET", "%s(%s) failed: %s is not an address of this machine", what, ip, ip);
        return -EADDRNOTAVAIL;
    }
    ERR("NET", "%s(%s) failed: %s", what, ip, strerror(err));
    return -err;
}

/* librdmacm finds no device (ENODEV) or no rdma_cm device node (ENOENT, ENXIO). */
static int no_device(int err)
{
    return err == ENODEV || err == ENOENT || err == ENXIO;
}

int rdma_chan_open(const char *ip, struct rdma_event_channel **ch_p)
{
    struct rdma_event_channel *ch;
    int err, flags;

    errno = 0;
    ch = rdma_create_event_channel();
    if (ch == NULL) {
        err = errno != 0 ? errno : ENODEV;
        if (no_device(err)) {
            INFO("NET", "no RDMA device for %s: this machine has none", ip);
            return -ENODEV;
        }
        ERR("NET", "rdma_create_event_channel() failed: %s", strerror(err));
        return -err;
    }
    flags = fcntl(ch->fd, F_GETFL);
    if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
        fcntl(ch->fd, F_SETFD, FD_CLOEXEC) != 0) {
        err = errno;
        ERR("NET", "fcntl(O_NONBLOCK) on the rdma_cm channel failed: %s", strerror(err));
        rdma_destroy_event_channel(ch);
        return -err;
    }
    *ch_p = ch;
    return 0;
}

int rdma_id_open(const char *ip, void *ctx, struct rdma_event_channel **ch_p,
                 struct rdma_cm_id **id_p)
{
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    int rc = rdma_chan_open(ip, &ch);

    if (rc != 0)
        return rc;
    if (rdma_create_id(ch, &id, ctx, RDMA_PS_TCP) != 0) {
        rc = -errno;
        ERR("NET", "rdma_create_id() failed: %s", strerror(-rc));
        rdma_destroy_event_channel(ch);
        return rc;
    }
    *ch_p = ch;
    *id_p = id;
    return 0;
}

int rdma_next_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev_p)
{
    int err;

    if (rdma_get_cm_event(ch, ev_p) == 0)
        return 1;
    err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
        return 0;
    ERR("NET", "rdma_get_cm_event() failed: %s", strerror(err));
    return -err;
}

/* Ids done with whose port was down, and their channels, in release order. */
typedef struct rdma_grave {
    struct rdma_cm_id *id;
    struct rdma_event_channel *ch;
    struct rdma_grave *next;
} rdma_grave_t;

#define RDMA_SWEEP_NS (100ull * 1000000ull)

static rdma_grave_t *graves;
static uint64_t swept_ns;

int rdma_id_netdev(struct rdma_cm_id *id, char name[IF_NAMESIZE])
{
    struct ibv_gid_entry g;
    int rc;

    if (id->verbs == NULL)
        return -ENODEV;
    if ((rc = ibv_query_gid_ex(id->verbs, id->port_num, 0, &g, 0)) != 0)
        return -rc;
    if (g.ndev_ifindex == 0)
        return -ENOENT;
    return if_indextoname(g.ndev_ifindex, name) != NULL ? 0 : -errno;
}

/* Whether the netdev under a RoCE port is up and has a carrier; 1 for a port without one (IB)
 * or one that cannot be looked up here (another network namespace). The device sees the
 * netdev go down before its port does: what it sends meanwhile fails (soft-RoCE: a local QP
 * operation error) while the port still reads ACTIVE. */
static int netdev_up(struct rdma_cm_id *id)
{
    struct ifreq ifr = {0};
    int fd, up = 1;

    if (rdma_id_netdev(id, ifr.ifr_name) != 0 ||
        (fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
        return 1;
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0)
        up = (ifr.ifr_flags & (IFF_UP | IFF_RUNNING)) == (IFF_UP | IFF_RUNNING);
    close(fd);
    return up;
}

int rdma_id_link_up(struct rdma_cm_id *id)
{
    struct ibv_port_attr pa;

    return id->verbs != NULL && ibv_query_port(id->verbs, id->port_num, &pa) == 0 &&
           pa.state == IBV_PORT_ACTIVE && netdev_up(id);
}

static void destroy(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
    if (id != NULL)
        rdma_destroy_id(id);
    if (ch != NULL)
        rdma_destroy_event_channel(ch);
}

void rdma_id_release(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
    rdma_grave_t *g;

    if (id == NULL || id->verbs == NULL || rdma_id_link_up(id) ||
        (g = malloc(sizeof(*g))) == NULL) {
        destroy(id, ch);
        return;
    }
    DBG("NET", "an RDMA id waits for its port to come up before it goes (it would disconnect)");
    *g = (rdma_grave_t){.id = id, .ch = ch, .next = graves};
    graves = g;
}

void rdma_id_sweep(void)
{
    uint64_t now;

    if (graves == NULL || (now = now_ns()) - swept_ns < RDMA_SWEEP_NS)
        return;
    swept_ns = now;
    for (rdma_grave_t **pp = &graves, *g; (g = *pp) != NULL;) {
        if (!rdma_id_link_up(g->id)) {
            pp = &g->next;
            continue;
        }
        *pp = g->next;
        destroy(g->id, g->ch);
        free(g);
    }
}
