/* Lane sockets and the lane fields of an init answer (lanes.h). */
#include "form/lanes.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "lane_plan.h"
#include "log.h"
#include "net_addr.h"
#include "rootinfo.h"

#define LANE_BACKLOG 64
#define LANE_KEY_LABEL "hccld lanes v1"

/* A TCP socket of addr's family bound to addr's IP, port 0; -1 on failure (logged). */
static int bound_socket(const char *addr, struct sockaddr_storage *ss, socklen_t *len)
{
    int one = 1, fd;

    if (net_addr_parse(addr, ss, len) != 0) {
        WARN("INIT", "lanes: data address '%s' is not ip:port", addr);
        return -1;
    }
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = 0;
    fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        WARN("INIT", "lanes: socket() failed: %s", strerror(errno));
        return -1;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)ss, *len) != 0) {
        WARN("INIT", "lanes: bind() to the IP of %s failed: %s", addr, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

lane_offer_t lane_offer_make(const char *data_addr, uint64_t direct_max)
{
    lane_offer_t o = LANE_OFFER_NONE;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (direct_max == 0 || data_addr == NULL || data_addr[0] == '\0')
        return o;
    int fd = bound_socket(data_addr, &ss, &len);
    if (fd < 0)
        return o;
    len = sizeof(ss);
    if (listen(fd, LANE_BACKLOG) != 0 || getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
        net_addr_format((struct sockaddr *)&ss, o.addr, sizeof(o.addr)) != 0) {
        WARN("INIT", "lanes: a listener on the IP of %s failed: %s", data_addr, strerror(errno));
        close(fd);
        return LANE_OFFER_NONE;
    }
    o.fd = fd;
    o.direct_max = direct_max;
    return o;
}

int lane_sockets_make(const char *data_addr, int *fds, int n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int k = 0;

    if (data_addr == NULL || data_addr[0] == '\0')
        return -1;
    for (; k < n; k++)
        if ((fds[k] = bound_socket(data_addr, &ss, &len)) < 0)
            break;
    if (k == n)
        return 0;
    while (k-- > 0)
        close(fds[k]);
    return -1;
}

void lane_offer_close(lane_offer_t *o)
{
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
}

uint64_t lanes_direct_max(const char *const *addrs, const uint64_t *max, uint32_t n)
{
    uint64_t m = UINT64_MAX;

    for (uint32_t r = 0; r < n; r++) {
        if (addrs[r] == NULL || addrs[r][0] == '\0')
            return 0;
        m = max[r] < m ? max[r] : m;
    }
    return n > 0 ? m : 0;
}

int lanes_answer(lane_offer_t *o, const char *const *addrs, uint32_t n, uint32_t rank,
                 uint64_t direct_max, const uint8_t *key, uint8_t *key_out, Hccld__CommInitResp *r,
                 int *fds, int max_fds)
{
    uint32_t k = rank < n ? lane_plan_up(n, rank) : 0;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int nfds = 1;

    /* A comm has lanes only if every rank offered a listener (lanes_direct_max). */
    if (direct_max == 0 || n < 2)
        return 0;
    if (o->fd < 0 || rank >= n || (int)k + 1 > max_fds)
        return -1;
    fds[0] = o->fd;
    for (; nfds <= (int)k; nfds++)
        if ((fds[nfds] = bound_socket(o->addr, &ss, &len)) < 0)
            break;
    if (nfds <= (int)k) {
        while (--nfds > 0)
            close(fds[nfds]);
        return -1; /* o->fd stays the caller's to close */
    }
    o->fd = -1;
    auth_derive(key, ROOTINFO_KEY_BYTES, LANE_KEY_LABEL, key_out);
    r->direct_max = direct_max;
    r->n_lane_addrs = n;
    r->lane_addrs = (char **)addrs;
    r->lane_key.data = key_out;
    r->lane_key.len = AUTH_DERIVED_BYTES;
    r->lane_sockets = k;
    return nfds;
}
