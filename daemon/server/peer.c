/* Daemon-to-daemon control connections: TCP on the loop, framed like client traffic, with the
 * job-key handshake before anything else. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hccl/hccl.h"
#include "log.h"
#include "server/events.h"
#include "server/peer.h"
#include "server/server.h"

#define PEER_ROLE_ACCEPT "hccld-accept"
#define PEER_ROLE_CONNECT "hccld-connect"

int peer_send(peer_t *p, const Hccld__Msg *m)
{
    if (p->state == PEER_CLOSING)
        return -EPIPE;
    return framed_send((uv_stream_t *)&p->tcp, m);
}

static void peer_unlink(peer_t *p)
{
    for (peer_t **pp = &p->srv->peers; *pp != NULL; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            return;
        }
}

static void on_peer_closed(uv_handle_t *h)
{
    peer_t *p = h->data;

    if (--p->handles_open == 0) {
        free(p->dec);
        free(p);
    }
}

/* Tells the owner once (handshake failure or loss), then frees the connection. */
void peer_close(peer_t *p)
{
    enum peer_state was = p->state;

    if (was == PEER_CLOSING)
        return;
    p->state = PEER_CLOSING;
    peer_unlink(p);
    if (was != PEER_READY && p->on_ready != NULL)
        p->on_ready(p, p->job_unknown ? HCCL_E_NOT_FOUND : HCCL_E_TCP_CONNECT);
    else if (was == PEER_READY && p->on_gone != NULL)
        p->on_gone(p);
    uv_close((uv_handle_t *)&p->timer, on_peer_closed);
    uv_close((uv_handle_t *)&p->tcp, on_peer_closed);
}

static void set_bytes(ProtobufCBinaryData *b, uint8_t *data, size_t len)
{
    b->data = data;
    b->len = len;
}

static void send_result(peer_t *p, int result, const char *why)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__PeerResult r = HCCLD__PEER_RESULT__INIT;

    r.result = result;
    r.message = (char *)why;
    m.body_case = HCCLD__MSG__BODY_PEER_RESULT;
    m.peer_result = &r;
    peer_send(p, &m);
}

static void ready(peer_t *p)
{
    p->state = PEER_READY;
    uv_timer_stop(&p->timer);
    events_peer(p->srv, p->addr, 0, NULL); /* back, if it was lost */
    if (p->on_ready != NULL)
        p->on_ready(p, HCCL_SUCCESS);
}

/* Accepting side: a hello names the job; only a daemon that knows its key gets further. */
static int on_hello(peer_t *p, const Hccld__PeerHello *h)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__PeerChallenge c = HCCLD__PEER_CHALLENGE__INIT;
    uint8_t mac[AUTH_MAC_BYTES];

    if (h->version != PEER_PROTO_VERSION) {
        char why[128];
        snprintf(why, sizeof(why),
                 "this daemon speaks peer protocol %u, not %u: run one hccld version on every "
                 "node",
                 PEER_PROTO_VERSION, h->version);
        WARN("NET", "daemon %.64s (%s) speaks peer protocol %u, this one %u: refused", h->addr,
             p->ip, h->version, PEER_PROTO_VERSION);
        send_result(p, HCCL_E_PARA, why);
        return -EPROTO;
    }
    if (h->job_id.len != PEER_JOB_BYTES || h->nonce.len != AUTH_NONCE_BYTES) {
        send_result(p, HCCL_E_PARA, "malformed hello");
        return -EPROTO;
    }
    memcpy(p->job_id, h->job_id.data, PEER_JOB_BYTES);
    if (formation_key_for(p->srv, p->job_id, p->key) != 0) {
        /* An agreed job is opened by its first local rank: until then its members retry. */
        if (h->agreed)
            DBG("NET", "daemon %s (%s) asked for an agreed job not open here yet", h->addr, p->ip);
        else
            WARN("NET", "daemon %s (%s) asked for a job this daemon does not know", h->addr, p->ip);
        send_result(p, HCCL_E_NOT_FOUND, "unknown job");
        return -ENOENT;
    }
    snprintf(p->addr, sizeof(p->addr), "%s", h->addr);
    memcpy(p->nonce_c, h->nonce.data, AUTH_NONCE_BYTES);
    auth_nonce(p->nonce_a);
    auth_mac(p->key, PEER_JOB_BYTES, PEER_ROLE_ACCEPT, p->nonce_c, p->nonce_a, mac);
    set_bytes(&c.nonce, p->nonce_a, AUTH_NONCE_BYTES);
    set_bytes(&c.mac, mac, AUTH_MAC_BYTES);
    m.body_case = HCCLD__MSG__BODY_PEER_CHALLENGE;
    m.peer_challenge = &c;
    p->state = PEER_WAIT_PROOF;
    return peer_send(p, &m);
}

static int on_proof(peer_t *p, const Hccld__PeerProof *pr)
{
    if (!auth_check(p->key, PEER_JOB_BYTES, PEER_ROLE_CONNECT, p->nonce_a, p->nonce_c, pr->mac.data,
                    pr->mac.len)) {
        WARN("NET", "daemon %s (%s) failed to prove the job key; refused", p->addr, p->ip);
        send_result(p, HCCL_E_PARA, "wrong job key");
        return -EACCES;
    }
    send_result(p, HCCL_SUCCESS, "");
    formation_adopt(p);
    ready(p);
    return 0;
}

/* Connecting side: the challenge proves the other daemon knows the key too. */
static int on_challenge(peer_t *p, const Hccld__PeerChallenge *c)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__PeerProof pr = HCCLD__PEER_PROOF__INIT;
    uint8_t mac[AUTH_MAC_BYTES];

    if (c->nonce.len != AUTH_NONCE_BYTES ||
        !auth_check(p->key, PEER_JOB_BYTES, PEER_ROLE_ACCEPT, p->nonce_c, c->nonce.data,
                    c->mac.data, c->mac.len)) {
        WARN("NET",
             "daemon %s could not prove the job key of our root info: the key our ranks were "
             "given, or the one it holds, is wrong; not trusting it",
             p->addr);
        return -EACCES;
    }
    memcpy(p->nonce_a, c->nonce.data, AUTH_NONCE_BYTES);
    auth_mac(p->key, PEER_JOB_BYTES, PEER_ROLE_CONNECT, p->nonce_a, p->nonce_c, mac);
    set_bytes(&pr.mac, mac, AUTH_MAC_BYTES);
    m.body_case = HCCLD__MSG__BODY_PEER_PROOF;
    m.peer_proof = &pr;
    p->state = PEER_WAIT_RESULT;
    return peer_send(p, &m);
}

static int dispatch(peer_t *p, const Hccld__Msg *m)
{
    switch (p->state) {
    case PEER_WAIT_HELLO:
        return m->body_case == HCCLD__MSG__BODY_PEER_HELLO ? on_hello(p, m->peer_hello) : -EPROTO;
    case PEER_WAIT_PROOF:
        return m->body_case == HCCLD__MSG__BODY_PEER_PROOF ? on_proof(p, m->peer_proof) : -EPROTO;
    case PEER_WAIT_CHALLENGE:
        if (m->body_case == HCCLD__MSG__BODY_PEER_RESULT) {
            /* Only the hello can be refused for an unknown job; a wrong key fails later. */
            p->job_unknown = m->peer_result->result == HCCL_E_NOT_FOUND;
            if (p->job_unknown && p->agreed)
                DBG("NET", "daemon %s does not know the job yet", p->addr);
            else
                WARN("NET", "daemon %s refused us: %s", p->addr, m->peer_result->message);
            return -EACCES;
        }
        return m->body_case == HCCLD__MSG__BODY_PEER_CHALLENGE ? on_challenge(p, m->peer_challenge)
                                                               : -EPROTO;
    case PEER_WAIT_RESULT:
        if (m->body_case != HCCLD__MSG__BODY_PEER_RESULT || m->peer_result->result != 0) {
            WARN("NET", "daemon %s refused our proof", p->addr);
            return -EACCES;
        }
        ready(p);
        return 0;
    case PEER_READY:
        if (p->on_msg != NULL)
            p->on_msg(p, m);
        return 0;
    default: return -EPROTO;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    framed_alloc(((peer_t *)h->data)->dec, buf);
}

int peer_input(peer_t *p)
{
    Hccld__Msg *m;
    int rc;

    while (p->state != PEER_CLOSING && (rc = frame_dec_next(p->dec, &m)) != 0) {
        if (rc < 0) {
            WARN("NET", "malformed frame from %s; closing", p->ip);
            return rc;
        }
        rc = dispatch(p, m);
        frame_msg_free(m);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    peer_t *p = s->data;

    if (nread < 0) {
        /* A daemon whose key differs hangs up once our challenge fails to convince it. */
        if (p->state == PEER_WAIT_PROOF)
            WARN("NET",
                 "daemon %s (%s) hung up instead of proving the job key (it holds another key "
                 "for this job?); refused",
                 p->addr, p->ip);
        else if (p->state != PEER_CLOSING)
            INFO("NET", "connection with daemon %s (%s) closed", p->addr, p->ip);
        peer_close(p);
        return;
    }
    frame_dec_commit(p->dec, (size_t)nread);
    if (peer_input(p) != 0)
        peer_close(p);
}

static void on_timeout(uv_timer_t *t)
{
    peer_t *p = t->data;

    WARN("NET", "daemon %s (%s): no handshake within the timeout", p->addr, p->ip);
    peer_close(p);
}

static peer_t *peer_new(server_t *srv, enum peer_state st, unsigned timeout_ms)
{
    peer_t *p = calloc(1, sizeof(*p));

    if (p == NULL || (p->dec = malloc(sizeof(*p->dec))) == NULL) {
        free(p);
        return NULL;
    }
    p->srv = srv;
    p->state = st;
    frame_dec_init(p->dec);
    uv_tcp_init(srv->loop, &p->tcp);
    uv_timer_init(srv->loop, &p->timer);
    p->handles_open = 2;
    p->tcp.data = p->timer.data = p;
    uv_timer_start(&p->timer, on_timeout, timeout_ms, 0);
    p->next = srv->peers;
    srv->peers = p;
    return p;
}

static void remote_ip(peer_t *p)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);

    if (uv_tcp_getpeername(&p->tcp, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_INET)
        uv_ip4_name((struct sockaddr_in *)&ss, p->ip, sizeof(p->ip));
}

static void on_incoming(uv_stream_t *listener, int status)
{
    server_t *srv = listener->data;
    peer_t *p;

    if (status != 0 || srv->stopping || (p = peer_new(srv, PEER_WAIT_HELLO, 10000)) == NULL)
        return;
    if (uv_accept(listener, (uv_stream_t *)&p->tcp) != 0) {
        peer_close(p);
        return;
    }
    remote_ip(p);
    snprintf(p->addr, sizeof(p->addr), "%s", p->ip);
    if (!whitelist_allows(srv, p->ip)) {
        WARN("NET", "refusing %s: not in HCCL_WHITELIST_FILE", p->ip);
        peer_close(p);
        return;
    }
    uv_tcp_nodelay(&p->tcp, 1);
    uv_read_start((uv_stream_t *)&p->tcp, on_alloc, on_read);
}

static void on_connected(uv_connect_t *req, int status)
{
    peer_t *p = req->data;
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__PeerHello h = HCCLD__PEER_HELLO__INIT;

    if (status != 0) {
        if (status != UV_ECANCELED)
            WARN("NET", "connect() to daemon %s failed: %s", p->addr, uv_strerror(status));
        peer_close(p);
        return;
    }
    remote_ip(p);
    uv_tcp_nodelay(&p->tcp, 1);
    uv_read_start((uv_stream_t *)&p->tcp, on_alloc, on_read);
    auth_nonce(p->nonce_c);
    h.version = PEER_PROTO_VERSION;
    set_bytes(&h.job_id, p->job_id, PEER_JOB_BYTES);
    set_bytes(&h.nonce, p->nonce_c, AUTH_NONCE_BYTES);
    h.addr = p->srv->advertised;
    h.agreed = p->agreed != 0;
    m.body_case = HCCLD__MSG__BODY_PEER_HELLO;
    m.peer_hello = &h;
    p->state = PEER_WAIT_CHALLENGE;
    if (peer_send(p, &m) != 0)
        peer_close(p);
}

/* Splits "IP:PORT". */
static int parse_hostport(const char *s, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(s, ':');
    char *end;
    long v;

    if (colon == NULL || (size_t)(colon - s) >= cap)
        return -EINVAL;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    v = strtol(colon + 1, &end, 10);
    if (*end != '\0' || v < 0 || v > 65535)
        return -EINVAL;
    *port = (int)v;
    return 0;
}

peer_t *peer_connect(server_t *srv, const char *addr, const uint8_t *job_id, const uint8_t *key,
                     unsigned timeout_ms, peer_ready_cb on_ready, void *user)
{
    struct sockaddr_in sa;
    char host[48];
    int port;
    peer_t *p;

    if (parse_hostport(addr, host, sizeof(host), &port) != 0 || uv_ip4_addr(host, port, &sa))
        return NULL;
    if ((p = peer_new(srv, PEER_CONNECTING, timeout_ms)) == NULL)
        return NULL;
    snprintf(p->addr, sizeof(p->addr), "%s", addr);
    memcpy(p->job_id, job_id, PEER_JOB_BYTES);
    memcpy(p->key, key, PEER_JOB_BYTES);
    p->on_ready = on_ready;
    p->user = user;
    p->creq.data = p;
    if (uv_tcp_connect(&p->creq, &p->tcp, (struct sockaddr *)&sa, on_connected) != 0) {
        p->on_ready = NULL;
        peer_close(p);
        return NULL;
    }
    return p;
}

int peer_listen(server_t *srv, const char *hostport)
{
    struct sockaddr_in sa;
    struct sockaddr_storage bound;
    int port, len = sizeof(bound), rc;
    char host[48], ip[48];

    if (parse_hostport(hostport, host, sizeof(host), &port) != 0 ||
        uv_ip4_addr(host, port, &sa) != 0) {
        ERR("INIT", "--listen wants IPV4:PORT, not %s", hostport);
        return -EINVAL;
    }
    uv_tcp_init(srv->loop, &srv->tcp_listener);
    srv->tcp_listener.data = srv;
    if ((rc = uv_tcp_bind(&srv->tcp_listener, (struct sockaddr *)&sa, 0)) != 0 ||
        (rc = uv_listen((uv_stream_t *)&srv->tcp_listener, 128, on_incoming)) != 0) {
        ERR("INIT", "listening on %s failed: %s", hostport, uv_strerror(rc));
        return rc;
    }
    srv->tcp_listening = 1;
    uv_tcp_getsockname(&srv->tcp_listener, (struct sockaddr *)&bound, &len);
    port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    if (addr_advertised(host, ip, sizeof(ip)) != 0)
        return -EINVAL;
    snprintf(srv->advertised, sizeof(srv->advertised), "%s:%d", ip, port);
    INFO("INIT", "listening for daemons on %s, advertising %s", hostport, srv->advertised);
    return 0;
}

void peers_stop(server_t *srv)
{
    if (srv->tcp_listening)
        uv_close((uv_handle_t *)&srv->tcp_listener, NULL);
    srv->tcp_listening = 0;
    while (srv->peers != NULL)
        peer_close(srv->peers);
}
