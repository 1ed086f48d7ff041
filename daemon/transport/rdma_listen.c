/*
 * Listeners of the RDMA transport: an rdma_cm id bound to ip:0 and listening, on a nonblocking
 * event channel whose fd is listen_fd(). accept() takes the channel's next connect request and
 * answers it at once (rdma_setup.c), moving the new id to a channel of its own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "transport/rdma_conn.h"

#define RDMA_LISTEN_BACKLOG 128

typedef struct rdma_listener {
    tp_listener_t base; /* what the transport's users hold */
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    char addr[TP_ADDR_MAX];
} rdma_listener_t;

static rdma_listener_t *listener_of(tp_listener_t *l)
{
    return (rdma_listener_t *)l;
}

int rdma_tp_listen(const char *ip, tp_listener_t **l_p, char *addr_out, size_t cap)
{
    struct sockaddr_storage ss;
    rdma_listener_t *l;
    int rc;

    if (net_ip_parse(ip, 0, &ss, NULL) != 0) {
        ERR("NET", "RDMA listen: \"%s\" is not a numeric IP address", ip);
        return -EINVAL;
    }
    if ((rc = rdma_hs_ready()) != 0)
        return rc;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return -ENOMEM;
    l->base.ops = &tp_rdma;
    rc = rdma_id_open(ip, l, &l->ch, &l->id);
    if (rc != 0)
        goto err_free;
    if (rdma_bind_addr(l->id, (struct sockaddr *)&ss) != 0) {
        rc = rdma_bind_error("rdma_bind_addr", ip, errno);
        goto err_id;
    }
    if (rdma_listen(l->id, RDMA_LISTEN_BACKLOG) != 0) {
        rc = -errno;
        ERR("NET", "rdma_listen(%s) failed: %s", ip, strerror(-rc));
        goto err_id;
    }
    net_addr_format(rdma_get_local_addr(l->id), l->addr, sizeof(l->addr));
    if (snprintf(addr_out, cap, "%s", l->addr) >= (int)cap) {
        rc = -ENOSPC;
        goto err_id;
    }
    INFO("NET", "listening on %s (RDMA, device %s)", l->addr,
         l->id->verbs != NULL ? ibv_get_device_name(l->id->verbs->device) : "?");
    *l_p = &l->base;
    return 0;

err_id:
    rdma_destroy_id(l->id);
    rdma_destroy_event_channel(l->ch);
err_free:
    free(l);
    return rc;
}

int rdma_tp_listen_fd(tp_listener_t *l)
{
    return listener_of(l)->ch->fd;
}

int rdma_tp_accept(tp_listener_t *base, tp_key_lookup_fn lookup, void *ctx, tp_conn_t **c_p)
{
    rdma_listener_t *l = listener_of(base);
    struct rdma_cm_event *ev;
    rdma_conn_t *c;
    int rc;

    while ((rc = rdma_next_event(l->ch, &ev)) == 1) {
        enum rdma_cm_event_type type = ev->event;

        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            /* The request's private data lives in the event: answered before the ack. */
            c = rdma_setup_accept(ev, lookup, ctx);
            rdma_ack_cm_event(ev);
            if (c == NULL)
                continue;
            *c_p = &c->base;
            return 0;
        }
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            ERR("NET", "the RDMA device under the listener on %s was removed", l->addr);
            return -ENODEV;
        }
        DBG("NET", "listener on %s: %s", l->addr, rdma_event_str(type));
    }
    return rc == 0 ? -EAGAIN : rc;
}

void rdma_tp_listen_close(tp_listener_t *base)
{
    rdma_listener_t *l = listener_of(base);

    if (l == NULL)
        return;
    /* Requests not taken yet go with the id: their connecting sides see a reject. */
    rdma_destroy_id(l->id);
    rdma_destroy_event_channel(l->ch);
    free(l);
}
