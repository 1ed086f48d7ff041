/*
 * The data stream of a TCP connection: each message is a header (tag, length, optional
 * CRC32C) and its payload. Sends are gathered into one sendmsg(). An incoming message goes
 * straight into the oldest posted receive with its tag; one that arrives before its receive
 * is read into a buffer of its own (within a budget) and copied when the receive comes.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "env.h"
#include "futex.h"
#include "log.h"
#include "transport/crc32c.h"
#include "transport/tcp_conn.h"
#include "transport/tcp_sock.h"

/* Enough iovecs to send many small messages in one call. */
#define TCP_IOV_MAX 64

/* Budget for messages that arrive before their receive (per connection). */
static size_t unexp_max(void)
{
    static size_t max;
    uint64_t v;

    if (max == 0)
        max = env_u64("HCCLD_TCP_UNEXPECTED", 256ull << 20, 1ull << 20, 1ull << 40, &v) == 0
                  ? (size_t)v
                  : 256u << 20;
    return max;
}

void tcp_msg_init(tcp_conn_t *c)
{
    tp_kept_init(&c->kept, unexp_max());
    c->free_reqs = NULL;
    for (int i = TCP_MAX_REQS - 1; i >= 0; i--) {
        tp_free_push(&c->free_reqs, &c->reqs[i].base);
    }
}

void tcp_req_release(tcp_req_t *r)
{
    tcp_conn_t *c = r->conn;

    tp_free_push(&c->free_reqs, &r->base);
}

void tcp_msg_cancel(tcp_req_t *r)
{
    tcp_conn_t *c = r->conn;
    int clean;

    if (!r->base.done) {
        /* Only the head of the send queue can have bytes on the wire; a receive is being
         * filled only while it is rx_req. */
        clean = r->dir == TCP_DIR_SEND
                    ? (r->moved == 0 && tp_queue_unlink(&c->sendq, &r->base) == 0) ||
                          tcp_resume_withdraw(c, r) == 0
                    : c->rx_req != r && tp_queue_unlink(&c->recvq, &r->base) == 0;
        if (!clean) {
            WARN("NET", "a %s of tag %#llx was withdrawn half done; failing its connection",
                 r->dir == TCP_DIR_SEND ? "send" : "receive", (unsigned long long)r->base.tag);
            tcp_conn_fail(c, -ECANCELED);
        }
    }
    tcp_req_release(r);
}

void tcp_conn_fail(tcp_conn_t *c, int err)
{
    if (c->state == TCP_CONN_FAILED || tcp_resume_suspend(c, err) == 0)
        return;
    c->state = TCP_CONN_FAILED;
    c->err = err;
    tcp_resume_drop_copies(c, &c->sendq);
    tcp_resume_drop_copies(c, &c->rs.unackq);
    tp_queue_fail(&c->rs.unackq, err);
    c->rs.deferred = 0;
    tp_queue_fail(&c->sendq, err);
    tp_queue_fail(&c->recvq, err);
    if (c->rx_req != NULL && !c->rx_req->base.done)
        tp_req_complete(&c->rx_req->base, err);
    c->rx_req = NULL;
    tcp_msg_free(c);
    /* The peer sees EOF at once instead of waiting for us to close. */
    shutdown(c->fd, SHUT_RDWR);
}

/* Describes the unsent bytes of the queued sends, headers and payloads in order. */
static int send_gather(const tcp_conn_t *c, struct iovec *iov)
{
    int n = 0;

    /* A control record goes first; on a resumed socket, alone until the peer's RESUME. */
    if (c->rs.ctl_off < c->rs.ctl_len)
        iov[n++] =
            (struct iovec){(void *)(c->rs.ctl + c->rs.ctl_off), c->rs.ctl_len - c->rs.ctl_off};
    if (c->state != TCP_CONN_READY)
        return n;
    for (tcp_req_t *r = tcp_req_of(c->sendq.head); r != NULL && n + 2 <= TCP_IOV_MAX;
         r = tcp_req_of(r->base.next)) {
        size_t off = r->moved;
        if (off < TCP_HDR_BYTES) {
            iov[n++] = (struct iovec){r->hdr + off, TCP_HDR_BYTES - off};
            off = TCP_HDR_BYTES;
        }
        if (off - TCP_HDR_BYTES < r->len)
            iov[n++] =
                (struct iovec){r->buf + (off - TCP_HDR_BYTES), r->len - (off - TCP_HDR_BYTES)};
    }
    return n;
}

static void send_advance(tcp_conn_t *c, size_t n)
{
    if (c->rs.ctl_len != 0) {
        size_t take = n < c->rs.ctl_len - c->rs.ctl_off ? n : c->rs.ctl_len - c->rs.ctl_off;
        c->rs.ctl_off += take;
        n -= take;
        if (c->rs.ctl_off == c->rs.ctl_len) {
            c->rs.ctl_len = c->rs.ctl_off = 0;
            tcp_resume_settle(c);
        }
    }
    while (n > 0) {
        tcp_req_t *r = tcp_req_of(c->sendq.head);
        size_t left = TCP_HDR_BYTES + r->len - r->moved;
        size_t take = n < left ? n : left;

        r->moved += take;
        n -= take;
        if (take == left && !tcp_resume_sent(c, tcp_req_of(tp_queue_pop(&c->sendq))))
            tp_req_complete(&r->base, 0);
    }
}

/* Whether there are bytes to write now. */
static int send_pending(const tcp_conn_t *c)
{
    return c->rs.ctl_len != 0 || (c->state == TCP_CONN_READY && c->sendq.head != NULL);
}

static int send_progress(tcp_conn_t *c)
{
    struct iovec iov[TCP_IOV_MAX];

    for (;;) {
        tcp_resume_ctl_due(c);
        if (!send_pending(c))
            return 0;
        ssize_t n = tcp_sock_send(c->fd, iov, (size_t)send_gather(c, iov), "sendmsg()");
        if (n <= 0)
            return (int)n;
        send_advance(c, (size_t)n);
    }
}

/* recvmsg() into iov: bytes read, 0 if it would block, or a negative errno (logged). */
static ssize_t recv_iov(tcp_conn_t *c, struct iovec *iov, size_t niov)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = niov};

    for (;;) {
        ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT);
        if (n > 0)
            return n;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n == 0) {
            /* A peer that closes between messages has finished sending: what it sent before
             * stays readable (see tcp_msg_post), and only the receives still waiting, which
             * nothing can fill any more, fail. A close in the middle of a message is an error
             * of the whole connection. */
            /* A resumable connection's peer says BYE first: an end without it is its
             * daemon's crash (its kernel closed the socket), which the connection rides out. */
            if (c->rs.enabled && !c->rs.got_bye) {
                DBG("NET", "peer closed the connection without BYE: a crash?");
                return -ECONNRESET;
            }
            if (c->rx_raw_off == 0 && !c->rx_ready) {
                DBG("NET", "peer closed the connection%s",
                    c->recvq.head != NULL ? "; the receives still posted fail" : "");
                c->eof = 1;
                tp_queue_fail(&c->recvq, -ECONNRESET);
                return 0;
            }
            ERR("NET", "recv() failed: peer closed the connection in the middle of a message");
            return -ECONNRESET;
        }
        int err = errno;
        /* A resumable connection says itself what it does about it (tcp_resume.c). */
        log_msg(c->rs.enabled ? LOG_DEBUG : LOG_ERROR, "NET", "recv() failed: %s", strerror(err));
        return -err;
    }
}

static ssize_t recv_some(tcp_conn_t *c, void *buf, size_t len)
{
    struct iovec iov = {buf, len};

    return recv_iov(c, &iov, 1);
}

/* 1 once a valid header is in c->rx, 2 after a control record (handled), 0 if more bytes are
 * needed, or a negative errno. */
static int recv_header(tcp_conn_t *c)
{
    while (c->rx_raw_off < TCP_HDR_BYTES) {
        ssize_t n = recv_some(c, c->rx_raw + c->rx_raw_off, TCP_HDR_BYTES - c->rx_raw_off);
        if (n <= 0)
            return (int)n;
        c->rx_raw_off += (size_t)n;
    }
    if (tcp_hdr_decode(c->rx_raw, &c->rx) != 0) {
        ERR("NET", "malformed message header from the peer");
        return -EPROTO;
    }
    c->rx_raw_off = 0;
    if (c->rx.flags == TCP_HDR_F_CTL) {
        int rc = tcp_resume_ctl(c);
        return rc < 0 ? rc : 2;
    }
    if (c->state != TCP_CONN_READY) {
        ERR("NET", "a message before the peer's RESUME record");
        return -EPROTO;
    }
    c->rx_ready = 1;
    c->rx_req = NULL;
    c->rx_unexp = NULL;
    c->rx_got = 0;
    return 1;
}

static int len_mismatch(uint64_t tag, uint64_t got, size_t want)
{
    ERR("NET", "message tag %#llx has %llu bytes, its receive wants %zu", (unsigned long long)tag,
        (unsigned long long)got, want);
    return -EPROTO;
}

void tcp_msg_forget(tcp_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns)
{
    unsigned n = tp_kept_forget(&c->kept, mask, value, ttl_ns);

    if (n > 0)
        DBG("NET", "dropped %u kept messages of tag %#llx/%#llx", n, (unsigned long long)value,
            (unsigned long long)mask);
    /* The one being read now goes when it is complete. */
    if (c->rx_unexp != NULL && (c->rx_unexp->tag & mask) == value)
        c->rx_drop = 1;
}

/*
 * Gives rx's payload a destination: the oldest receive posted with its tag, else a buffer of
 * its own while the unexpected messages stay within their budget. 1 routed, 0 not yet (the
 * budget is full: nothing more is read until a receive takes one), or a negative errno.
 */
static int recv_route(tcp_conn_t *c)
{
    tcp_req_t *r = tcp_req_of(tp_queue_take(&c->recvq, c->rx.tag));

    if (r != NULL) {
        c->rx_req = r;
        if (c->rx.len != r->len) {
            tp_req_complete(&r->base, -EPROTO);
            return len_mismatch(c->rx.tag, c->rx.len, r->len);
        }
        return 1;
    }
    if (!tp_kept_room(&c->kept, c->rx.len))
        return 0;
    c->rx_drop = tp_kept_forgotten(&c->kept, c->rx.tag);
    c->rx_unexp = tp_kept_new(&c->kept, c->rx.tag, c->rx.len);
    if (c->rx_unexp == NULL) {
        ERR("NET", "no memory to hold a message of %llu bytes", (unsigned long long)c->rx.len);
        return -ENOMEM;
    }
    return 1;
}

/* Completes r with the kept message u (by a copy) and frees u. */
static int unexp_deliver(tcp_conn_t *c, tp_msg_t *u, tcp_req_t *r)
{
    int rc = u->len == r->len ? 0 : len_mismatch(u->tag, u->len, r->len);

    if (rc == 0)
        memcpy(r->buf, u->data, u->len);
    tp_kept_drop(&c->kept, u);
    tp_req_complete(&r->base, rc);
    return rc;
}

/* The payload is in: check it, then complete its receive or keep it for a later one. */
static int recv_finish(tcp_conn_t *c)
{
    tcp_req_t *r = c->rx_req;
    tp_msg_t *u = c->rx_unexp;
    const uint8_t *buf = r != NULL ? r->buf : u->data;
    int bad = (c->rx.flags & TCP_HDR_F_CRC) && crc32c(0, buf, c->rx.len) != c->rx.crc;

    c->rx_ready = 0;
    c->rx_req = NULL;
    c->rx_unexp = NULL;
    tcp_resume_counted(c, c->rx.len);
    if (bad)
        ERR("NET", "checksum mismatch on message tag %#llx len %llu", (unsigned long long)c->rx.tag,
            (unsigned long long)c->rx.len);
    if (r != NULL) {
        tp_req_complete(&r->base, bad ? -EBADMSG : 0);
        return bad ? -EBADMSG : 0;
    }
    if (bad) {
        tp_kept_drop(&c->kept, u);
        return -EBADMSG;
    }
    if (c->rx_drop) {
        c->rx_drop = 0;
        DBG("NET", "dropped a late message of tag %#llx (its user is gone)",
            (unsigned long long)u->tag);
        tp_kept_drop(&c->kept, u);
        return 0;
    }
    /* Its receive may have been posted while the payload was still coming in. */
    if ((r = tcp_req_of(tp_queue_take(&c->recvq, u->tag))) != NULL)
        return unexp_deliver(c, u, r);
    tp_kept_push(&c->kept, u);
    return 0;
}

static int recv_progress(tcp_conn_t *c)
{
    for (;;) {
        int rc = 0;

        if (c->eof)
            return 0;
        if (!c->rx_ready && (rc = recv_header(c)) <= 0)
            return rc;
        if (rc == 2)
            continue;
        if (c->rx_req == NULL && c->rx_unexp == NULL && (rc = recv_route(c)) <= 0)
            return rc;
        uint8_t *buf = c->rx_req != NULL ? c->rx_req->buf : c->rx_unexp->data;
        /* The payload's end and the next header come in one call where they can. */
        while (c->rx_got < c->rx.len) {
            struct iovec iov[2] = {{buf + c->rx_got, c->rx.len - c->rx_got},
                                   {c->rx_raw, TCP_HDR_BYTES}};
            ssize_t n = recv_iov(c, iov, 2);
            if (n <= 0)
                return (int)n;
            if ((size_t)n > iov[0].iov_len) {
                c->rx_raw_off = (size_t)n - iov[0].iov_len;
                n = (ssize_t)iov[0].iov_len;
            }
            c->rx_got += (size_t)n;
        }
        if ((rc = recv_finish(c)) != 0)
            return rc;
    }
}

/* A receive whose message already arrived completes at once, by a copy. */
static int recv_from_unexp(tcp_conn_t *c, tcp_req_t *r)
{
    tp_msg_t *u = tp_kept_take(&c->kept, r->base.tag);

    return u != NULL ? unexp_deliver(c, u, r) : 1;
}

int tcp_msg_post(tcp_conn_t *c, int dir, void *buf, size_t len, uint64_t tag, tcp_req_t **r_p)
{
    tcp_hdr_t h = {.tag = tag, .len = len};
    tcp_req_t *r;

    /* A suspended connection takes requests: they wait for it with the others. */
    int open = c->state == TCP_CONN_READY ||
               (c->rs.enabled && (c->state == TCP_CONN_SUSPENDED || c->state == TCP_CONN_RESUMING));
    if (!open)
        return c->state == TCP_CONN_FAILED ? c->err : -ENOTCONN;
    if (c->free_reqs == NULL || (buf == NULL && len != 0))
        return c->free_reqs == NULL ? -EAGAIN : -EINVAL;
    r = tcp_req_of(tp_free_pop(&c->free_reqs));
    *r = (tcp_req_t){
        .base = {.conn = &c->base, .tag = tag}, .conn = c, .buf = buf, .len = len, .dir = dir};
    if (dir == TCP_DIR_SEND) {
        /* The checksum is taken now: the caller must not change the buffer until done. */
        if (c->checksum) {
            h.flags = TCP_HDR_F_CRC;
            h.crc = crc32c(0, buf, len);
        }
        tcp_hdr_encode(&h, r->hdr);
        r->seq = c->rs.tx_posted++;
        tp_queue_push(&c->sendq, &r->base);
    } else {
        int rc = recv_from_unexp(c, r);
        if (rc > 0 && c->eof) {
            /* Nothing more comes: this receive fails, the messages kept stay for others. */
            DBG("NET", "receive of tag %#llx: the peer has closed the connection",
                (unsigned long long)tag);
            tp_req_complete(&r->base, -ECONNRESET);
        } else if (rc < 0)
            tcp_conn_fail(c, rc);
        else if (rc > 0)
            tp_queue_push(&c->recvq, &r->base);
    }
    *r_p = r;
    return 0;
}

void tcp_msg_free(tcp_conn_t *c)
{
    tp_kept_free(&c->kept);
    if (c->rx_unexp != NULL)
        tp_kept_drop(&c->kept, c->rx_unexp);
    c->rx_unexp = NULL;
}

/* The stream of a ready (or resuming) connection: 0, or the error that ends the socket. */
static int stream_progress(tcp_conn_t *c)
{
    int rc = send_progress(c);

    if (rc == 0)
        rc = recv_progress(c);
    else if (tp_peer_gone(rc))
        /* The peer is gone, but what it sent before (a notice saying why) is still in the
         * kernel's queue: deliver it before the connection fails or is held. A resumable one
         * counts what it read, so the peer does not send it again when it comes back; and a
         * peer whose daemon crashed will never send it again (its end, without BYE, is then
         * read as the failure it is). */
        (void)recv_progress(c);
    /* An ACK asked for, or due by the bytes read, goes out now (tcp_resume_ctl_due). */
    if (rc == 0 && c->state == TCP_CONN_READY && c->rs.enabled)
        rc = send_progress(c);
    return rc;
}

int tcp_msg_progress(tcp_conn_t *c)
{
    int rc;

    for (int turn = 0; turn < 2; turn++) {
        if (c->state == TCP_CONN_SUSPENDED || c->state == TCP_CONN_RESUMING) {
            if ((rc = tcp_resume_progress(c)) != 0) {
                tcp_conn_fail(c, rc);
                return rc;
            }
        }
        if (c->state != TCP_CONN_READY && c->state != TCP_CONN_RESUMING)
            return c->state == TCP_CONN_FAILED ? c->err : 0;
        rc = stream_progress(c);
        if (rc == 0)
            return 0;
        tcp_conn_fail(c, rc);
        if (c->state != TCP_CONN_SUSPENDED)
            return rc;
        /* Suspended: the connecting side dials again at once. */
    }
    return 0;
}

short tcp_msg_events(const tcp_conn_t *c)
{
    short ev = 0;

    /* A message with nowhere to go (the unexpected budget is full) stops the reading. */
    if (!c->eof && (!c->rx_ready || c->rx_req != NULL || c->rx_unexp != NULL))
        ev |= POLLIN;
    if (send_pending(c))
        ev |= POLLOUT;
    return ev;
}
