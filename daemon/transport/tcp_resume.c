/*
 * TCP connections that survive their socket (tp_retry_t, op retry across link faults). Each
 * side counts the messages it has read of the connection and tells the other now and then
 * (ACK records between messages); a send completes only once acknowledged, so its buffer can be
 * sent again. When the socket fails for the link's sake (a reset, a timeout), the connection is
 * suspended, not failed: its requests wait, and the side that dialled dials again at once and
 * every TCP_REDIAL_MS, with the same handshake (the job key proved again) and a HELLO that names
 * the connection. The accepting side finds it by that name in a registry and gives it the new
 * socket. Both then send RESUME (how many messages each has read) before anything else: each
 * sends again, from its start, every message the other lacks, and drops the half-read one it
 * was reading, which comes again. So nothing is delivered twice and nothing lost. A connection
 * not back within its hold time fails as it would have at once.
 *
 * What is kept for the replay: a send written in full is copied into the connection's replay
 * ring and completes at once, as without retry, while the ring (TCP_REPLAY_BUDGET bytes, made
 * at the first copy) has room and it holds fewer than TCP_REPLAY_COPIES copies; past that, a
 * send keeps its user's buffer and completes when acknowledged (its user waits a round trip
 * more). So a connection keeps at most TCP_REPLAY_BUDGET bytes and TCP_REPLAY_COPIES small
 * records of its own, plus the users' buffers of at most TCP_MAX_REQS requests. The receiver
 * acknowledges lazily: after TCP_ACK_BYTES or TCP_ACK_MSGS, or when the sender asks (ACKREQ,
 * sent once for each send that waits for its ACK, with how many messages the peer must have
 * read; the peer then acknowledges every message it reads until it read that many). An ACK
 * of its own for every message read cost 20 us per small op (a wake-up of the peer) and 6-18%
 * of busbw on 2 and 4 daemons here (bench/RESULTS.md).
 *
 * Everything runs on the engine's thread, the registry included.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "transport/tcp_conn.h"
#include "transport/tcp_sock.h"

#define TCP_REDIAL_MS 100
/* A dial whose handshake is not done by then is given up for the next one: a link that is down
 * drops the SYN, and the kernel would wait minutes. */
#define TCP_REDIAL_HS_MS 1000
#define TCP_REPLAY_BUDGET (16u << 20)
#define TCP_REPLAY_COPIES 4096
#define TCP_ACK_BYTES (TCP_REPLAY_BUDGET / 4)
#define TCP_ACK_MSGS 256 /* and after this many messages */

static tcp_conn_t *registry; /* resumable connections' accepting sides, by conn_id */

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tcp_resume_init_connect(tcp_conn_t *c, const char *addr, const uint8_t *job,
                             const uint8_t *key, uint32_t my_node)
{
    c->rs.connector = 1;
    snprintf(c->rs.addr, sizeof(c->rs.addr), "%s", addr);
    memcpy(c->rs.job, job, AUTH_JOB_BYTES);
    memcpy(c->rs.key, key, AUTH_KEY_BYTES);
    c->rs.my_node = my_node;
    while (c->rs.conn_id == 0)
        randombytes_buf(&c->rs.conn_id, sizeof(c->rs.conn_id));
}

static tcp_conn_t *registry_find(uint64_t conn_id, const uint8_t *job)
{
    for (tcp_conn_t *c = registry; c != NULL; c = c->rs.next)
        if (c->rs.conn_id == conn_id && memcmp(c->rs.job, job, AUTH_JOB_BYTES) == 0)
            return c;
    return NULL;
}

/* Appends a control record to those being written (room for two). */
static void ctl_queue(tcp_conn_t *c, enum tcp_ctl type, uint64_t count)
{
    tcp_hdr_t h = {.flags = TCP_HDR_F_CTL, .tag = count, .crc = type};

    tcp_hdr_encode(&h, c->rs.ctl + c->rs.ctl_len);
    c->rs.ctl_len += TCP_HDR_BYTES;
}

static void ack_queue(tcp_conn_t *c)
{
    ctl_queue(c, TCP_CTL_ACK, c->rs.rx_count);
    c->rs.rx_acked = c->rs.rx_count;
    c->rs.rx_unacked = 0;
}

/* "to ADDR" or "from node N", for the log. */
static const char *peer_name(const tcp_conn_t *c, char *buf, size_t cap)
{
    if (c->rs.connector)
        snprintf(buf, cap, "to %s", c->rs.addr);
    else
        snprintf(buf, cap, "from node %u", c->hs.peer_node);
    return buf;
}

/* "; 3 dials" on the side that dials, "" on the other. */
static const char *dials(const tcp_conn_t *c, char *buf, size_t cap)
{
    if (c->rs.connector)
        snprintf(buf, cap, " (%u dial%s)", c->rs.attempts, c->rs.attempts == 1 ? "" : "s");
    else
        buf[0] = '\0';
    return buf;
}

/* On a new socket: RESUME first, then nothing until the peer's RESUME came. */
static void begin_resume(tcp_conn_t *c)
{
    c->state = TCP_CONN_RESUMING;
    c->rs.got_resume = 0;
    c->rs.ctl_len = c->rs.ctl_off = 0;
    ctl_queue(c, TCP_CTL_RESUME, c->rs.rx_count);
    c->rs.rx_acked = c->rs.rx_count;
    c->rs.rx_unacked = 0;
    c->rs.ack_want = 0;
    c->rs.ackreq_n = 0;
    c->rs.defer_top = 0;
}

int tcp_resume_ready(tcp_conn_t *c)
{
    if (!c->rs.connector) {
        c->rs.conn_id = c->hs.conn_id;
        memcpy(c->rs.job, c->hs.job, AUTH_JOB_BYTES);
    }
    if (c->rs.connector || !(c->hs.flags & TCP_HS_F_RESUME)) {
        c->rs.next = registry;
        registry = c;
        return 1;
    }
    tcp_conn_t *t = registry_find(c->rs.conn_id, c->rs.job);
    if (t == NULL || t->rs.connector || !t->rs.enabled || t->state == TCP_CONN_FAILED) {
        WARN("NET",
             "node %u came back for a data connection this daemon does not hold (any "
             "more); refused",
             c->hs.peer_node);
        return -ENOENT;
    }
    /* Its old socket may still look alive here (the failure was the other side's). */
    if (t->state == TCP_CONN_READY || t->state == TCP_CONN_RESUMING)
        tcp_resume_suspend(t, -ECONNRESET);
    t->fd = c->fd;
    c->fd = -1;
    c->state = TCP_CONN_ABSORBED;
    begin_resume(t);
    return -EALREADY;
}

int tcp_resume_set(tcp_conn_t *c, const tp_retry_t *r)
{
    /* Our sends so far completed without an acknowledgement: they could not go again. What
     * we read before is counted, and acknowledged from now on. */
    if (r->enabled && !c->rs.enabled && c->rs.tx_posted != 0) {
        WARN("NET", "retry asked for a data connection that already sent messages; not "
                    "resumable");
        return -EBUSY;
    }
    c->rs.enabled = r->enabled;
    c->rs.hold_ns = r->hold_ms * 1000000ull;
    return 0;
}

int tcp_resume_suspend(tcp_conn_t *c, int err)
{
    uint64_t now = mono_ns();

    if (!c->rs.enabled || !tp_peer_gone(err) ||
        (c->state != TCP_CONN_READY && c->state != TCP_CONN_RESUMING))
        return -1;
    if (c->state == TCP_CONN_READY) {
        c->rs.failed_ns = now;
        c->rs.first_err = err;
        c->rs.attempts = 0;
        char who[TP_ADDR_MAX + 8];
        WARN("NET",
             "data connection %s failed (%s); its messages wait up to %llu ms for it to come "
             "back",
             peer_name(c, who, sizeof(who)), strerror(-err),
             (unsigned long long)(c->rs.hold_ns / 1000000));
    }
    if (c->fd >= 0) {
        /* A reset, not an end: a peer that still thinks the socket sound must suspend too
         * (an orderly close would tell it we had finished). */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        close(c->fd);
        c->fd = -1;
    }
    /* The message being read comes again from its start. */
    if (c->rx_ready && c->rx_req != NULL)
        tp_queue_push_front(&c->recvq, &c->rx_req->base);
    if (c->rx_unexp != NULL)
        tp_kept_drop(&c->kept, c->rx_unexp);
    c->rx_req = NULL;
    c->rx_unexp = NULL;
    c->rx_ready = 0;
    c->rx_raw_off = 0;
    c->rx_got = 0;
    c->rx_drop = 0;
    c->eof = 0; /* an end read off the failed socket was its failure's, not the peer's */
    c->rs.ctl_len = c->rs.ctl_off = 0;
    c->state = TCP_CONN_SUSPENDED;
    c->rs.next_dial_ns = now;
    return 0;
}

/* A copy of a send of len bytes: its record and its bytes, both taken from the connection's
 * replay ring (made at the first copy, so that nothing is allocated per message), after the
 * copies still held; NULL when it is full. Copies go in the order they came, so both rings only
 * move forward. A copy that does not fit before the ring's end goes to its start, and the end it
 * skips counts as its own until it goes. */
static tcp_req_t *copy_take(tcp_conn_t *c, size_t len)
{
    size_t tail = c->rs.ring_tail;
    /* Past the end it starts at 0, the end skipped (waste) counted with it; a tail right at the
     * end wraps too, with no waste (it once did not, and the copy went past the ring). */
    int wrap = tail + len > TCP_REPLAY_BUDGET;
    size_t waste = wrap ? TCP_REPLAY_BUDGET - tail : 0;

    if (c->rs.copies >= TCP_REPLAY_COPIES || c->rs.ring_used + waste + len > TCP_REPLAY_BUDGET)
        return NULL;
    if (c->rs.ring == NULL) {
        c->rs.ring = malloc(TCP_REPLAY_BUDGET);
        c->rs.recs = malloc(TCP_REPLAY_COPIES * sizeof(*c->rs.recs));
        if (c->rs.ring == NULL || c->rs.recs == NULL) {
            free(c->rs.ring);
            free(c->rs.recs);
            c->rs.ring = NULL;
            c->rs.recs = NULL;
            return NULL;
        }
    }
    tail = wrap ? 0 : tail;
    tcp_req_t *k = &c->rs.recs[(c->rs.rec_first + c->rs.copies) % TCP_REPLAY_COPIES];
    k->span = waste + len;
    k->buf = c->rs.ring + tail;
    c->rs.ring_used += k->span;
    c->rs.ring_tail = tail + len;
    c->rs.copies++;
    return k;
}

/* Gives back the oldest copy, k. */
static void copy_free(tcp_conn_t *c, tcp_req_t *k)
{
    c->rs.ring_used -= k->span;
    c->rs.copies--;
    c->rs.rec_first = (c->rs.rec_first + 1) % TCP_REPLAY_COPIES;
    if (c->rs.ring_used == 0)
        c->rs.ring_tail = 0;
}

/* The peer has read n messages: the sends before them are done. */
static void acked(tcp_conn_t *c, uint64_t n)
{
    while (c->rs.unackq.head != NULL && tcp_req_of(c->rs.unackq.head)->seq < n) {
        tcp_req_t *r = tcp_req_of(tp_queue_pop(&c->rs.unackq));
        if (r->copy) {
            copy_free(c, r);
        } else {
            c->rs.deferred--;
            tp_req_complete(&r->base, 0);
        }
    }
}

void tcp_resume_drop_copies(tcp_conn_t *c, tp_queue_t *q)
{
    for (tp_req_t *r = q->head, *next; r != NULL; r = next) {
        next = r->next;
        if (tcp_req_of(r)->copy) {
            tp_queue_unlink(q, r);
            copy_free(c, tcp_req_of(r));
        }
    }
}

/* The peer's RESUME: it has read n messages; the others go again, each from its start. */
static int rewind_sends(tcp_conn_t *c, uint64_t n)
{
    if (n > c->rs.tx_posted) {
        ERR("NET", "the peer says it read %llu messages of %llu sent", (unsigned long long)n,
            (unsigned long long)c->rs.tx_posted);
        return -EPROTO;
    }
    acked(c, n);
    if (c->rs.has_hole && n <= c->rs.hole) {
        ERR("NET", "message %llu, which the peer lacks, was withdrawn by its user",
            (unsigned long long)c->rs.hole);
        return -EPROTO;
    }
    tp_queue_prepend(&c->sendq, &c->rs.unackq);
    c->rs.deferred = 0; /* counted again as they are written */
    for (tp_req_t *r = c->sendq.head; r != NULL; r = r->next) {
        tcp_req_t *t = tcp_req_of(r);
        if (t->seq < n) {
            ERR("NET", "message %llu was withdrawn before the peer had it",
                (unsigned long long)t->seq);
            return -EPROTO;
        }
        t->moved = 0;
    }
    return 0;
}

int tcp_resume_withdraw(tcp_conn_t *c, tcp_req_t *r)
{
    if (tp_queue_unlink(&c->rs.unackq, &r->base) != 0)
        return -ENOENT;
    c->rs.deferred--;
    if (!c->rs.has_hole || r->seq < c->rs.hole)
        c->rs.hole = r->seq;
    c->rs.has_hole = 1;
    return 0;
}

/* RESUMING ends when our RESUME is out and the peer's came. */
void tcp_resume_settle(tcp_conn_t *c)
{
    if (c->state != TCP_CONN_RESUMING || !c->rs.got_resume || c->rs.ctl_len != 0)
        return;
    uint64_t now = mono_ns();
    char who[TP_ADDR_MAX + 8], n[32];
    c->state = TCP_CONN_READY;
    c->rs.resumes++;
    c->rs.suspended_total += now - c->rs.failed_ns;
    WARN("NET", "data connection %s is back after %llu ms%s; %s", peer_name(c, who, sizeof(who)),
         (unsigned long long)((now - c->rs.failed_ns) / 1000000), dials(c, n, sizeof(n)),
         c->sendq.head != NULL ? "sending again what the peer lacks" : "nothing was lost");
}

int tcp_resume_ctl(tcp_conn_t *c)
{
    uint64_t n = c->rx.tag;
    int rc = 0;

    c->rx_ready = 0;
    if (c->rx.crc == TCP_CTL_ACK && c->state == TCP_CONN_READY) {
        if (n > c->rs.tx_posted)
            return -EPROTO;
        acked(c, n);
        return 0;
    }
    if (c->rx.crc == TCP_CTL_ACKREQ && c->state == TCP_CONN_READY && n != 0) {
        if (n > c->rs.ack_want)
            c->rs.ack_want = n;
        return 0;
    }
    if (c->rx.crc == TCP_CTL_BYE && c->state == TCP_CONN_READY && n == 0) {
        c->rs.got_bye = 1;
        return 0;
    }
    if (c->rx.crc != TCP_CTL_RESUME || c->state != TCP_CONN_RESUMING || c->rs.got_resume) {
        ERR("NET", "control record %u out of place", c->rx.crc);
        return -EPROTO;
    }
    if ((rc = rewind_sends(c, n)) != 0)
        return rc;
    c->rs.got_resume = 1;
    tcp_resume_settle(c);
    return 0;
}

int tcp_resume_sent(tcp_conn_t *c, tcp_req_t *r)
{
    tcp_req_t *k;

    if (!c->rs.enabled)
        return 0;
    if (!r->copy && (k = copy_take(c, r->len)) != NULL) {
        size_t span = k->span;
        uint8_t *at = k->buf;
        *k = *r;
        k->copy = 1;
        k->span = span;
        k->buf = at;
        memcpy(at, r->buf, r->len);
        tp_queue_push(&c->rs.unackq, &k->base);
        return 0;
    }
    c->rs.deferred += !r->copy;
    if (!r->copy && r->seq + 1 > c->rs.defer_top)
        c->rs.defer_top = r->seq + 1;
    tp_queue_push(&c->rs.unackq, &r->base);
    return 1;
}

void tcp_resume_counted(tcp_conn_t *c, size_t len)
{
    c->rs.rx_count++;
    c->rs.rx_unacked += len;
}

void tcp_resume_ctl_due(tcp_conn_t *c)
{
    if (!c->rs.enabled || c->state != TCP_CONN_READY || c->rs.ctl_len != 0)
        return;
    tcp_req_t *head = tcp_req_of(c->sendq.head);
    if (head != NULL && head->moved != 0)
        return;
    uint64_t unacked = c->rs.rx_count - c->rs.rx_acked;
    /* The peer waits on messages not acknowledged yet: each one read more is told at once. */
    if (unacked > 0 && (c->rs.ack_want > c->rs.rx_acked || c->rs.rx_unacked >= TCP_ACK_BYTES ||
                        unacked >= TCP_ACK_MSGS))
        ack_queue(c);
    /* A send waits for its ACK, and the peer may have nothing to send: ask, once for each
     * such send (the peer remembers, and acknowledges as it reads). */
    if (c->rs.deferred > 0 && c->rs.defer_top > c->rs.ackreq_n) {
        ctl_queue(c, TCP_CTL_ACKREQ, c->rs.defer_top);
        c->rs.ackreq_n = c->rs.defer_top;
    }
}

/* Connecting side: dial again, and run the new socket's handshake. */
static void redial(tcp_conn_t *c, uint64_t now)
{
    int rc;

    if (c->rs.rfd < 0) {
        if (now < c->rs.next_dial_ns)
            return;
        c->rs.attempts++;
        if (tcp_sock_connect(c->rs.addr, &c->rs.rfd) != 0) {
            c->rs.rfd = -1;
            c->rs.next_dial_ns = now + TCP_REDIAL_MS * 1000000ull;
            return;
        }
        tcp_hs_init_connect(&c->hs, c->rs.job, c->rs.key, c->rs.my_node, c->rs.conn_id,
                            TCP_HS_F_RESUME);
        c->hs.deadline_ns = now + TCP_REDIAL_HS_MS * 1000000ull;
    }
    rc = tcp_hs_progress(&c->hs, c->rs.rfd);
    if (rc == 0)
        return;
    tcp_hs_clear(&c->hs);
    if (rc < 0) {
        close(c->rs.rfd);
        c->rs.rfd = -1;
        c->rs.next_dial_ns = now + TCP_REDIAL_MS * 1000000ull;
        return;
    }
    c->fd = c->rs.rfd;
    c->rs.rfd = -1;
    begin_resume(c);
}

int tcp_resume_progress(tcp_conn_t *c)
{
    uint64_t now = mono_ns();

    if (now - c->rs.failed_ns > c->rs.hold_ns) {
        char who[TP_ADDR_MAX + 8], n[32];
        ERR("NET",
            "data connection %s: not back within %llu ms%s; it fails with its first error "
            "(%s)",
            peer_name(c, who, sizeof(who)), (unsigned long long)(c->rs.hold_ns / 1000000),
            dials(c, n, sizeof(n)), strerror(-c->rs.first_err));
        if (c->rs.rfd >= 0)
            close(c->rs.rfd);
        c->rs.rfd = -1;
        c->rs.enabled = 0;
        return c->rs.first_err;
    }
    if (c->state == TCP_CONN_SUSPENDED && c->rs.connector)
        redial(c, now);
    return 0;
}

int tcp_resume_poll_fds(tcp_conn_t *c, struct pollfd *pfd, int max)
{
    if (max < 1 || c->state != TCP_CONN_SUSPENDED || c->rs.rfd < 0)
        return 0;
    short ev = tcp_hs_events(&c->hs);
    if (ev == 0)
        return 0;
    pfd[0] = (struct pollfd){.fd = c->rs.rfd, .events = ev};
    return 1;
}

void tcp_resume_stats(tcp_conn_t *c, tp_retry_stats_t *st)
{
    int down = c->state == TCP_CONN_SUSPENDED || c->state == TCP_CONN_RESUMING;

    st->suspended = down;
    st->resumes = c->rs.resumes;
    st->suspended_ns = c->rs.suspended_total + (down ? mono_ns() - c->rs.failed_ns : 0);
    st->ended = c->eof;
    st->held = c->rx_unexp != NULL;
    for (const tp_msg_t *m = c->kept.head; m != NULL; m = m->next)
        st->held++;
}

/* A close on purpose says so first: the peer then takes the end for one, not for the crash of
 * this daemon, whose kernel ends the socket alike (an end without BYE suspends the connection).
 * Every connection says it, resumable or not: the peer may have made its end resumable.
 * Best effort, at a record boundary only: a BYE that cannot go leaves the peer to wait out its
 * hold time. */
static void bye(tcp_conn_t *c)
{
    const tcp_req_t *head = tcp_req_of(c->sendq.head);
    uint8_t rec[TCP_HDR_BYTES];
    tcp_hdr_t h = {.flags = TCP_HDR_F_CTL, .tag = 0, .crc = TCP_CTL_BYE};

    if (c->state != TCP_CONN_READY || c->fd < 0 || c->rs.ctl_off != 0 ||
        (head != NULL && head->moved != 0))
        return;
    tcp_hdr_encode(&h, rec);
    if (send(c->fd, rec, sizeof(rec), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(rec))
        DBG("NET", "no room to say BYE on a closing connection; the peer waits out its hold");
}

void tcp_resume_close(tcp_conn_t *c)
{
    bye(c);
    for (tcp_conn_t **pp = &registry; *pp != NULL; pp = &(*pp)->rs.next)
        if (*pp == c) {
            *pp = c->rs.next;
            break;
        }
    if (c->rs.rfd >= 0)
        close(c->rs.rfd);
    c->rs.rfd = -1;
    sodium_memzero(c->rs.key, sizeof(c->rs.key));
    tcp_resume_drop_copies(c, &c->sendq);
    tcp_resume_drop_copies(c, &c->rs.unackq);
    free(c->rs.ring);
    free(c->rs.recs);
    c->rs.ring = NULL;
    c->rs.recs = NULL;
}
