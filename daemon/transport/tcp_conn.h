/*
 * Internals of a TCP connection, shared by tcp.c (setup, the ops table) and tcp_msg.c
 * (requests and the data stream). Not for use outside the TCP transport.
 */
#ifndef HCCLD_TRANSPORT_TCP_CONN_H
#define HCCLD_TRANSPORT_TCP_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "transport/tcp_hs.h"
#include "transport/tcp_wire.h"
#include "transport/tp_kept.h"
#include "transport/tp_queue.h"
#include "transport/transport.h"

/* Outstanding requests per connection, both directions together: memory stays bounded. */
#define TCP_MAX_REQS 256

enum tcp_dir { TCP_DIR_SEND, TCP_DIR_RECV };

typedef struct tcp_conn tcp_conn_t;
typedef struct tcp_req tcp_req_t;
enum tcp_conn_state {
    TCP_CONN_HANDSHAKE,
    TCP_CONN_READY,
    TCP_CONN_FAILED,
    TCP_CONN_SUSPENDED, /* resumable, its socket failed: requests wait (tcp_resume.c) */
    TCP_CONN_RESUMING,  /* on a new socket: each side tells the other what it has read */
    TCP_CONN_ABSORBED,  /* accepted only to give its socket to the connection it resumes */
};

struct tcp_req {
    tp_req_t base; /* what the transport's users hold (base.conn is &conn->base) */
    tcp_conn_t *conn;
    uint8_t *buf;
    size_t len;
    size_t moved; /* send: header and payload bytes written; receive: payload bytes read */
    int dir;
    uint64_t seq;               /* send: its place among the connection's messages, from 0 */
    int copy;                   /* a copy the transport keeps to send again (tcp_resume.c) */
    size_t span;                /* a copy: its bytes of the replay ring, with any wasted end */
    uint8_t hdr[TCP_HDR_BYTES]; /* send: the encoded header */
};

/* What a resumable connection keeps to come back (tcp_resume.c). */
typedef struct tcp_resume {
    int enabled;          /* set_retry(): a link failure suspends the connection */
    int connector;        /* this side dialled, and dials again */
    uint64_t conn_id;     /* the connection's name, the same on both sides */
    uint64_t hold_ns;     /* a suspension longer than this fails the connection */
    uint64_t tx_posted;   /* messages posted to send: the next send's seq */
    uint64_t rx_count;    /* messages read in full */
    uint64_t rx_acked;    /* rx_count as last told the peer */
    tp_queue_t unackq;    /* sends written in full that the peer has not acknowledged yet */
    uint8_t *ring;        /* the copies' bytes (TCP_REPLAY_BUDGET, made at the first copy) */
    struct tcp_req *recs; /* the copies' records (TCP_REPLAY_COPIES), made with the ring */
    uint32_t rec_first;   /* the oldest copy's record */
    size_t ring_used;     /* bytes of it in use, in order from the oldest copy */
    size_t ring_tail;     /* where the next copy goes */
    uint32_t copies;      /* copies among unackq and sendq: TCP_REPLAY_COPIES at most */
    uint64_t rx_unacked;  /* payload bytes read since the last ACK */
    uint64_t ack_want;    /* the peer waits for an ACK of this many messages (ACKREQ) */
    int got_bye;          /* the peer said it closes on purpose (BYE): its end is no failure */
    uint32_t deferred;    /* users' sends in unackq (the others are copies) */
    uint64_t defer_top;   /* the newest of those: its seq + 1 */
    uint64_t ackreq_n;    /* what we last asked the peer to acknowledge (ACKREQ) */
    uint8_t ctl[2 * TCP_HDR_BYTES]; /* control records being written */
    size_t ctl_len, ctl_off;
    int got_resume;           /* RESUMING: the peer's RESUME record came */
    int has_hole;             /* an unacknowledged send was withdrawn: */
    uint64_t hole;            /* the first such; a peer that lacks it cannot be served */
    uint64_t failed_ns;       /* when the suspension began */
    uint64_t next_dial_ns;    /* connector: when to dial again */
    uint64_t suspended_total; /* ns suspended before the current suspension */
    int first_err;            /* what suspended it */
    int rfd;                  /* connector: the new socket in its handshake, or -1 */
    uint32_t attempts;        /* dials of the current suspension */
    uint32_t resumes;
    char addr[TP_ADDR_MAX]; /* connector: where it dialled */
    uint32_t my_node;       /* connector: what it announced */
    uint8_t job[AUTH_JOB_BYTES];
    uint8_t key[AUTH_KEY_BYTES]; /* connector: to prove the job key again; wiped at close */
    struct tcp_conn *next;       /* in the registry of resumable connections */
} tcp_resume_t;

struct tcp_conn {
    tp_conn_t base; /* what the transport's users hold */
    int fd;
    int state;
    int err;      /* the failure, once state is TCP_CONN_FAILED */
    int checksum; /* HCCL_CHECKSUM=1: sends carry a CRC32C of their payload */
    tcp_hs_t hs;
    tp_queue_t sendq;
    tp_queue_t recvq; /* posted receives that no message has matched yet, in posting order */
    /* The header of the next incoming message, read before its receive may be posted. */
    uint8_t rx_raw[TCP_HDR_BYTES];
    size_t rx_raw_off;
    int rx_ready; /* rx holds a decoded header whose payload has not been read yet */
    int eof;      /* the peer closed between messages: only what arrived can be received */
    tcp_hdr_t rx;
    /* Where rx's payload goes: a posted receive, or a buffer of its own (neither yet while
     * the unexpected messages already fill their budget). */
    tcp_req_t *rx_req;
    tp_msg_t *rx_unexp;
    size_t rx_got;
    int rx_drop;    /* rx_unexp is read only to be dropped (its user is gone) */
    tp_kept_t kept; /* complete messages no receive has taken yet; forgotten tags */
    tcp_resume_t rs;
    tp_req_t *free_reqs;
    tcp_req_t reqs[TCP_MAX_REQS];
};

/* Queues a send or a receive on a ready connection. */
int tcp_msg_post(tcp_conn_t *c, int dir, void *buf, size_t len, uint64_t tag, tcp_req_t **r_p);
/* Moves data until the socket would block: 0, or the error that failed the connection. */
int tcp_msg_progress(tcp_conn_t *c);
short tcp_msg_events(const tcp_conn_t *c);
void tcp_msg_init(tcp_conn_t *c);
/* Frees what the data stream holds (unexpected messages); the requests go with the conn. */
void tcp_msg_free(tcp_conn_t *c);
/* The TCP objects behind the transport's handles (each handle is the first member). */
static inline tcp_conn_t *tcp_conn_of(tp_conn_t *c)
{
    return (tcp_conn_t *)c;
}

static inline tcp_req_t *tcp_req_of(tp_req_t *r)
{
    return (tcp_req_t *)r;
}

/* See transport.h's forget(). */
void tcp_msg_forget(tcp_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns);
/* Withdraws a request not reported done (see transport.h) and gives it back. */
void tcp_msg_cancel(tcp_req_t *r);
/* Gives back a request that test() reported done. */
void tcp_req_release(tcp_req_t *r);
/* tcp_info.c: see transport.h's link_info(). */
void tcp_link_info(tp_conn_t *c, tp_link_info_t *li);
/* Fails the connection: every pending request completes with err (already logged). A
 * resumable connection whose link failed (tp_peer_gone) is suspended instead. */
void tcp_conn_fail(tcp_conn_t *c, int err);

/* tcp_resume.c: connections that survive a failed socket */
/* The connecting side's side of a new connection: where it dialled, for dialling again. */
void tcp_resume_init_connect(tcp_conn_t *c, const char *addr, const uint8_t *job,
                             const uint8_t *key, uint32_t my_node);
/* The handshake of c is done: c joins the registry (its peer may come back to it), or, when
 * the connecting side said it resumes a connection of ours, c gives its socket to that one.
 * 1 c is ready, -EALREADY its socket went to the one it resumes, -ENOENT no such connection. */
int tcp_resume_ready(tcp_conn_t *c);
int tcp_resume_set(tcp_conn_t *c, const tp_retry_t *r);
/* Suspends c after err (0 if it did: c is suspended, else the caller fails it). */
int tcp_resume_suspend(tcp_conn_t *c, int err);
/* Advances a suspended or resuming connection: dials, handshakes, the deadline. 0, or the
 * error that failed it for good. */
int tcp_resume_progress(tcp_conn_t *c);
/* Handles a control record in c->rx: 0, or a negative errno. */
int tcp_resume_ctl(tcp_conn_t *c);
/* A send was written in full: kept until the peer acknowledges it (1), or done now (0). */
int tcp_resume_sent(tcp_conn_t *c, tcp_req_t *r);
/* Withdraws a send written in full but not acknowledged: 0, or -ENOENT if r is not one. */
int tcp_resume_withdraw(tcp_conn_t *c, tcp_req_t *r);
/* Our control record is out: a resuming connection may be ready now. */
void tcp_resume_settle(tcp_conn_t *c);
/* At a message boundary of the stream, queues the control records due: an ACK where messages
 * were read since the last one and it rides with data, or was asked for, or TCP_ACK_BYTES were
 * read; an ACKREQ where a send waits for its ACK. */
void tcp_resume_ctl_due(tcp_conn_t *c);
/* A data message of len bytes was read in full. */
void tcp_resume_counted(tcp_conn_t *c, size_t len);
int tcp_resume_poll_fds(tcp_conn_t *c, struct pollfd *pfd, int max);
void tcp_resume_stats(tcp_conn_t *c, tp_retry_stats_t *st);
/* Frees the copies of q (the transport's own sends), leaving the users' requests. */
void tcp_resume_drop_copies(tcp_conn_t *c, tp_queue_t *q);
/* Forgets c (it is being closed): out of the registry, the key wiped, the copies freed. */
void tcp_resume_close(tcp_conn_t *c);

#endif
