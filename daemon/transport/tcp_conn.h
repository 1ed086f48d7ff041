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
enum tcp_conn_state { TCP_CONN_HANDSHAKE, TCP_CONN_READY, TCP_CONN_FAILED };

struct tcp_req {
    tp_req_t base; /* what the transport's users hold (base.conn is &conn->base) */
    tcp_conn_t *conn;
    uint8_t *buf;
    size_t len;
    size_t moved; /* send: header and payload bytes written; receive: payload bytes read */
    int dir;
    uint8_t hdr[TCP_HDR_BYTES]; /* send: the encoded header */
};

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
/* Fails the connection: every pending request completes with err (already logged). */
void tcp_conn_fail(tcp_conn_t *c, int err);

#endif
