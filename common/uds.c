#include "uds.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "futex.h"

void uds_admin_beside(const char *sock, char *out, size_t cap)
{
    size_t n = strlen(sock);

    if (n > 5 && strcmp(sock + n - 5, ".sock") == 0)
        n -= 5;
    snprintf(out, cap, "%.*s-admin.sock", (int)n, sock);
}

int uds_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd, err;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

int uds_send(int fd, const Hccld__Msg *m, const int *fds, int nfds)
{
    uint8_t buf[FRAME_HDR + FRAME_MAX];
    union {
        struct cmsghdr hdr;
        char space[CMSG_SPACE(sizeof(int) * UDS_MAX_FDS)];
    } ctl;
    size_t len = frame_encode(m, buf, sizeof(buf)), off = 0;

    if (len == 0 || nfds > UDS_MAX_FDS)
        return -EMSGSIZE;
    while (off < len) {
        struct iovec iov = {.iov_base = buf + off, .iov_len = len - off};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t n;

        if (off == 0 && nfds > 0) {
            memset(&ctl, 0, sizeof(ctl));
            mh.msg_control = ctl.space;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
        }
        n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        off += (size_t)n;
    }
    return 0;
}

static void keep_fds(uds_conn_t *c, struct msghdr *mh)
{
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int *in = (int *)CMSG_DATA(cm);
        for (int i = 0; i < n; i++) {
            if (c->nfds < UDS_MAX_FDS)
                c->fds[c->nfds++] = in[i];
            else
                close(in[i]);
        }
    }
}

static int read_some(uds_conn_t *c, int timeout_ms)
{
    union {
        struct cmsghdr hdr;
        char space[CMSG_SPACE(sizeof(int) * UDS_MAX_FDS)];
    } ctl;
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    uint8_t *p;
    size_t room;
    ssize_t n;

    frame_dec_space(&c->dec, &p, &room);
    if (room == 0)
        return -EMSGSIZE;
    /* One frame at a time: descriptors come with the first bytes of the frame they belong to
     * (the kernel ends a read after the data that carried them), so a read that stops at the
     * frame's end leaves the next frame's descriptors for the read of that frame. */
    if (room > frame_dec_want(&c->dec))
        room = frame_dec_want(&c->dec);
    int pr = poll(&pfd, 1, timeout_ms);
    if (pr == 0)
        return -ETIMEDOUT;
    if (pr < 0)
        return errno == EINTR ? 0 : -errno;
    struct iovec iov = {.iov_base = p, .iov_len = room};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.space,
                        .msg_controllen = sizeof(ctl.space)};
    n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : -errno;
    if (n == 0)
        return -ECONNRESET;
    keep_fds(c, &mh);
    frame_dec_commit(&c->dec, (size_t)n);
    return 0;
}

int uds_recv(uds_conn_t *c, Hccld__Msg **msg_p, int timeout_ms)
{
    uint64_t deadline = timeout_ms < 0 ? 0 : now_ns() + (uint64_t)timeout_ms * 1000000ull;

    for (;;) {
        int rc = frame_dec_next(&c->dec, msg_p);
        if (rc != 0)
            return rc > 0 ? 0 : rc;
        int left = -1;
        if (timeout_ms >= 0) {
            uint64_t now = now_ns();
            if (now >= deadline)
                return -ETIMEDOUT;
            left = (int)((deadline - now + 999999) / 1000000);
        }
        rc = read_some(c, left);
        if (rc < 0)
            return rc;
    }
}

void uds_conn_init(uds_conn_t *c, int fd)
{
    c->fd = fd;
    c->nfds = 0;
    frame_dec_init(&c->dec);
}

void uds_conn_close(uds_conn_t *c)
{
    for (int i = 0; i < c->nfds; i++)
        close(c->fds[i]);
    c->nfds = 0;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}
