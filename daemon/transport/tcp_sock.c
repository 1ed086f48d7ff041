#include "transport/tcp_sock.h"
#include "net_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "env.h"
#include "log.h"

#define TCP_BUF_DEFAULT (4u << 20)
#define TCP_LISTEN_BACKLOG 128

/* Reads HCCLD_TCP_BUF once; a bad value is reported and the default kept. */
static int tcp_buf_bytes(void)
{
    static int bytes;
    const char *s;
    uint64_t v;

    if (bytes != 0)
        return bytes;
    bytes = TCP_BUF_DEFAULT;
    s = getenv("HCCLD_TCP_BUF");
    if (s != NULL && *s != '\0') {
        if (parse_size(s, &v) == 0 && v >= 4096 && v <= (1u << 30))
            bytes = (int)v;
        else
            WARN("NET", "HCCLD_TCP_BUF=\"%s\" is invalid (4K..1G), using %d", s, bytes);
    }
    return bytes;
}

/*
 * Buffers are set before listen or connect, so that the window scale covers them. A refusal
 * only costs speed, so it is a warning.
 */
static void set_buffers(int fd)
{
    int bytes = tcp_buf_bytes();

    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0)
        WARN("NET", "setsockopt(SO_SNDBUF/SO_RCVBUF, %d) failed: %s", bytes, strerror(errno));
}

/*
 * Heartbeats between daemons are the kernel's: TCP keepalive probes a data connection that has
 * been idle for HCCLD_HEARTBEAT_S seconds every HCCLD_HEARTBEAT_S and drops it after
 * HCCLD_HEARTBEAT_MISSES unanswered probes, and TCP_USER_TIMEOUT drops one whose data stays
 * unacknowledged for HEARTBEAT_S x MISSES. Either way the transport reports the error and the
 * comms on the connection fail, naming the node. The defaults (1 s, 4) notice a lost peer or
 * link within 5 s (4 s of silence, then the retransmission timer's next turn); a link that
 * stalls for less than that only slows down. A daemon that is frozen
 * while its kernel still answers is caught by HCCL_EXEC_TIMEOUT instead.
 */
static void set_heartbeat(int fd)
{
    static uint64_t secs, misses;
    int one = 1, s, n;
    unsigned timeout_ms;

    if (secs == 0 && (env_u64("HCCLD_HEARTBEAT_S", 1, 1, 3600, &secs) != 0 ||
                      env_u64("HCCLD_HEARTBEAT_MISSES", 4, 1, 100, &misses) != 0)) {
        secs = 1;
        misses = 4;
    }
    s = (int)secs;
    n = (int)misses;
    timeout_ms = (unsigned)(secs * misses * 1000);
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &s, sizeof(s)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &s, sizeof(s)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &n, sizeof(n)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout_ms, sizeof(timeout_ms)) != 0)
        WARN("NET", "setting heartbeats (TCP keepalive, user timeout) failed: %s", strerror(errno));
}

int tcp_sock_tune(int fd)
{
    int one = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        int err = errno;
        ERR("NET", "setsockopt(TCP_NODELAY) failed: %s", strerror(err));
        return -err;
    }
    set_buffers(fd);
    set_heartbeat(fd);
    return 0;
}

static int sock_open(int family, int *fd_p)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        int err = errno;
        ERR("NET", "socket() failed: %s", strerror(err));
        return -err;
    }
    *fd_p = fd;
    return 0;
}

/* Binds ss and listens; writes the address bound into addr_out. */
static int listen_on(struct sockaddr_storage ss, socklen_t len, const char *what, int *fd_p,
                     char *addr_out, size_t cap)
{
    int fd = -1, rc, one = 1;

    rc = sock_open(ss.ss_family, &fd);
    if (rc != 0)
        return rc;
    /* A port taken again (a restarted daemon's old one) may still have connections in
     * TIME_WAIT. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
        WARN("NET", "setsockopt(SO_REUSEADDR) failed: %s", strerror(errno));
    /* Accepted sockets inherit the buffers, and with them the window scale of the SYN-ACK. */
    set_buffers(fd);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, TCP_LISTEN_BACKLOG) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        rc = -errno;
        ERR("NET", "bind/listen/getsockname(%s) failed: %s", what, strerror(-rc));
        goto err_close;
    }
    rc = net_addr_format((const struct sockaddr *)&ss, addr_out, cap);
    if (rc != 0)
        goto err_close;
    *fd_p = fd;
    return 0;

err_close:
    close(fd);
    return rc;
}

int tcp_sock_listen(const char *ip, int *fd_p, char *addr_out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = net_ip_parse(ip, 0, &ss, &len);

    if (rc != 0) {
        ERR("NET", "listen: \"%s\" is not a numeric IP address", ip);
        return rc;
    }
    return listen_on(ss, len, ip, fd_p, addr_out, cap);
}

int tcp_sock_listen_at(const char *addr, int *fd_p, char *addr_out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = net_addr_parse(addr, &ss, &len);

    if (rc != 0) {
        ERR("NET", "listen: \"%s\" is not a numeric IP:port", addr);
        return rc;
    }
    return listen_on(ss, len, addr, fd_p, addr_out, cap);
}

int tcp_sock_connect(const char *addr, int *fd_p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd = -1, rc;

    rc = net_addr_parse(addr, &ss, &len);
    if (rc != 0) {
        ERR("NET", "connect: \"%s\" is not ip:port", addr);
        return rc;
    }
    rc = sock_open(ss.ss_family, &fd);
    if (rc != 0)
        return rc;
    rc = tcp_sock_tune(fd);
    if (rc != 0)
        goto err_close;
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS) {
        rc = -errno;
        ERR("NET", "connect(%s) failed: %s", addr, strerror(-rc));
        goto err_close;
    }
    *fd_p = fd;
    return 0;

err_close:
    close(fd);
    return rc;
}

int tcp_sock_connect_done(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);

    if (poll(&pfd, 1, 0) == 0)
        return 0;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0) {
        ERR("NET", "connect() failed: %s", strerror(err));
        return -err;
    }
    return 1;
}

ssize_t tcp_sock_send(int fd, struct iovec *iov, size_t niov, const char *what)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = niov};

    for (;;) {
        ssize_t n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN)
            return 0;
        int err = errno;
        ERR("NET", "%s failed: %s", what, strerror(err));
        return -err;
    }
}
