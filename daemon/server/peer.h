/*
 * Connections between daemons (control plane, libuv TCP). Each connection serves one job and
 * proves the job key before anything else crosses it (see PeerHello in proto/hccld.proto).
 */
#ifndef HCCLD_SERVER_PEER_H
#define HCCLD_SERVER_PEER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "frame.h"
#include "hccl/hccl.h"

#include "auth.h"

#define PEER_ADDR_MAX 64
#define PEER_JOB_BYTES 16
/* What daemons speak among themselves (PeerHello.version): bumped whenever they would no longer
 * understand a daemon of the version before, so that a node left behind by an upgrade is
 * refused by name instead of stalling a comm. 3: the link probe repeats its exchanges
 * (span/probe.c). 4: data connections name themselves and acknowledge what they read, so that
 * they can resume after a failure (transport/tcp_resume.c; TCP wire version 2). 5: a data
 * connection closed on purpose says BYE, one ended without is a crash; a node back from a crash
 * and the others exchange where they are (span/rerun.c, span/p2p_log.c; TCP wire version 3).
 * 6: RDMA data connections name themselves and resume after a failure (transport/rdma_resume.c;
 * RDMA wire version 2). */
#define PEER_PROTO_VERSION 6u

typedef struct server server_t;
typedef struct peer peer_t;

enum peer_state {
    PEER_CONNECTING,     /* outgoing: TCP connect in progress */
    PEER_WAIT_CHALLENGE, /* outgoing: sent PeerHello */
    PEER_WAIT_RESULT,    /* outgoing: sent PeerProof */
    PEER_WAIT_HELLO,     /* incoming: nothing yet */
    PEER_WAIT_PROOF,     /* incoming: sent PeerChallenge */
    PEER_READY,
    PEER_CLOSING
};

/* result is an HcclResult: 0 once the peer is authenticated, an error when it never will be:
 * HCCL_E_NOT_FOUND when the other daemon does not know the job (yet), HCCL_E_TCP_CONNECT for
 * everything else (unreachable, wrong key, malformed). */
typedef void (*peer_ready_cb)(peer_t *p, HcclResult result);
/* A message on an authenticated connection. */
typedef void (*peer_msg_cb)(peer_t *p, const Hccld__Msg *m);
typedef void (*peer_gone_cb)(peer_t *p);

struct peer {
    server_t *srv;
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_timer_t timer;
    frame_dec_t *dec;
    enum peer_state state;
    int handles_open;
    uint8_t job_id[PEER_JOB_BYTES];
    uint8_t key[PEER_JOB_BYTES];
    uint8_t nonce_c[AUTH_NONCE_BYTES]; /* the connecting side's */
    uint8_t nonce_a[AUTH_NONCE_BYTES]; /* the accepting side's */
    char addr[PEER_ADDR_MAX];          /* the other daemon's advertised address */
    char ip[48];                       /* where the connection really comes from */
    int agreed;                        /* outgoing, agreed job: "unknown" is expected, retried */
    int job_unknown;                   /* outgoing: the other daemon does not know the job */
    peer_ready_cb on_ready;
    peer_msg_cb on_msg;
    peer_gone_cb on_gone;
    void *user;
    peer_t *next;
};

/* Listens on "HOST:PORT" (port 0: any) and sets srv->advertised to "IP:PORT". */
int peer_listen(server_t *srv, const char *hostport);
/* Connects to the daemon at addr for one job; on_ready tells how the handshake ended. */
peer_t *peer_connect(server_t *srv, const char *addr, const uint8_t *job_id, const uint8_t *key,
                     unsigned timeout_ms, peer_ready_cb on_ready, void *user);
int peer_send(peer_t *p, const Hccld__Msg *m);
/* Runs the complete frames in p->dec through the handshake, or to on_msg once authenticated:
 * 0, or a negative errno when the connection must close (the caller closes it). Apart from the
 * read callback, tests/fuzz/fuzz_peer.c calls it, to test the handshake without a socket. */
int peer_input(peer_t *p);
void peer_close(peer_t *p);
void peers_stop(server_t *srv);

/* addr.c */
int addr_advertised(const char *listen_host, char *out, size_t cap);
int ifname_match(const char *spec, const char *name);
/* Whether "IP:PORT" reaches this daemon (listening on listen, advertising advertised): the
 * advertised address itself, or another address of this host on our port when we listen on the
 * wildcard (a rank may name its root by any of the node's addresses, or 127.0.0.1). */
int addr_is_self(const char *listen, const char *advertised, const char *addr);

#endif
