/*
 * rdma_cm identities of the RDMA transport: ids each on an event channel of their own whose fd the
 * engine polls (nonblocking, so that taking events never waits).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
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
