/*
 * The control-plane handshake between daemons (daemon/server/peer.c): PeerHello, PeerChallenge,
 * PeerProof and PeerResult frames from the other daemon, fed to peer_input() as on_read would,
 * without a socket. Input: one byte whose low bit picks the side under test (0: accepting,
 * 1: connecting) and whose upper bits give the size of each read (0: everything at once), then
 * the other daemon's byte stream. The random source is fixed per input, so seeds hold valid
 * MACs. Checked: a connection only becomes ready after a valid proof of the job key, and every
 * frame this daemon sends can be encoded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "hccl/hccl.h"
#include "log.h"
#include "server/events.h"
#include "server/server.h"

#define ROLE_ACCEPT "hccld-accept"
#define ROLE_CONNECT "hccld-connect"

static uv_loop_t loop;
/* 128 KiB each: allocated per input, ASan would map and unmap them every time. */
static frame_dec_t peer_dec, check_dec;
static uint8_t sent[FRAME_HDR + FRAME_MAX];

/* The server functions peer.c calls. They see neither a server nor a socket. */
int framed_send(uv_stream_t *stream, const Hccld__Msg *m)
{
    if (frame_encode(m, sent, sizeof(sent)) == 0)
        abort();
    return 0;
}

void framed_alloc(frame_dec_t *dec, uv_buf_t *buf)
{
    abort(); /* only the read callback, which no input reaches, allocates */
}

int formation_key_for(server_t *srv, const uint8_t *job_id, uint8_t *key)
{
    if (memcmp(job_id, fuzz_job, FUZZ_JOB_BYTES) != 0)
        return -1;
    memcpy(key, fuzz_key, FUZZ_KEY_BYTES);
    return 0;
}

static void on_msg(peer_t *p, const Hccld__Msg *m)
{
}

/* As formation does: an authenticated connection delivers messages to it. */
void formation_adopt(peer_t *p)
{
    p->on_msg = on_msg;
}

void events_peer(server_t *srv, const char *peer, int lost, const char *why)
{
    (void)srv, (void)peer, (void)lost, (void)why;
}

int whitelist_allows(const server_t *srv, const char *ip)
{
    return 1;
}

int addr_advertised(const char *listen_host, char *out, size_t cap)
{
    return -1;
}

static void on_ready(peer_t *p, HcclResult result)
{
    /* As formation does: an authenticated connection delivers messages to its owner. */
    if (result == HCCL_SUCCESS)
        formation_adopt(p);
}

static void on_timeout(uv_timer_t *t)
{
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_rng_install();
    fuzz_log_level(LOG_DEBUG);
    if (uv_loop_init(&loop) != 0)
        abort();
    return 0;
}

/* A connection just set up as peer_new() and on_connected() leave it, minus the socket. */
static peer_t *peer_make(int connecting)
{
    peer_t *p = calloc(1, sizeof(*p));

    if (p == NULL)
        abort();
    p->dec = &peer_dec;
    frame_dec_init(p->dec);
    uv_timer_init(&loop, &p->timer);
    uv_timer_start(&p->timer, on_timeout, 10000, 0);
    snprintf(p->ip, sizeof(p->ip), "192.0.2.1");
    snprintf(p->addr, sizeof(p->addr), "192.0.2.1:60000");
    if (connecting) {
        p->state = PEER_WAIT_CHALLENGE;
        memcpy(p->job_id, fuzz_job, PEER_JOB_BYTES);
        memcpy(p->key, fuzz_key, PEER_JOB_BYTES);
        auth_nonce(p->nonce_c);
        p->on_ready = on_ready;
    } else {
        p->state = PEER_WAIT_HELLO;
    }
    return p;
}

static void peer_drop(peer_t *p)
{
    uv_close((uv_handle_t *)&p->timer, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    free(p);
}

/* The idx-th frame of the other daemon's stream. */
static Hccld__Msg *nth_frame(const uint8_t *s, size_t n, int idx)
{
    Hccld__Msg *m = NULL;
    uint8_t *dst;
    size_t room;

    frame_dec_init(&check_dec);
    frame_dec_space(&check_dec, &dst, &room);
    memcpy(dst, s, n < room ? n : room);
    frame_dec_commit(&check_dec, n < room ? n : room);
    for (int i = 0; i <= idx; i++) {
        frame_msg_free(m);
        m = NULL;
        if (frame_dec_next(&check_dec, &m) != 1)
            abort();
    }
    return m;
}

static void check_mac(const ProtobufCBinaryData *mac, const char *role, const uint8_t *n1,
                      const uint8_t *n2)
{
    if (!auth_check(fuzz_key, FUZZ_KEY_BYTES, role, n1, n2, mac->data, mac->len))
        abort();
}

/* A ready connection has seen the other daemon prove the key, in the right frame. */
static void check_ready(const peer_t *p, int connecting, const uint8_t *s, size_t n)
{
    Hccld__Msg *m = nth_frame(s, n, connecting ? 0 : 1);

    if (connecting) {
        if (m->body_case != HCCLD__MSG__BODY_PEER_CHALLENGE)
            abort();
        check_mac(&m->peer_challenge->mac, ROLE_ACCEPT, p->nonce_c, p->nonce_a);
    } else {
        if (m->body_case != HCCLD__MSG__BODY_PEER_PROOF ||
            memcmp(p->job_id, fuzz_job, PEER_JOB_BYTES) != 0)
            abort();
        check_mac(&m->peer_proof->mac, ROLE_CONNECT, p->nonce_a, p->nonce_c);
    }
    frame_msg_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int connecting, rc = 0;
    size_t chunk, off = 1;
    peer_t *p;

    if (size < 1)
        return 0;
    connecting = data[0] & 1;
    chunk = data[0] >> 1 != 0 ? data[0] >> 1 : size;
    fuzz_rng_reset();
    p = peer_make(connecting);
    while (off < size && rc == 0) {
        uint8_t *dst;
        size_t room, n = size - off < chunk ? size - off : chunk;

        frame_dec_space(p->dec, &dst, &room);
        n = n < room ? n : room;
        memcpy(dst, data + off, n);
        frame_dec_commit(p->dec, n);
        off += n;
        rc = peer_input(p);
    }
    if (p->state == PEER_READY)
        check_ready(p, connecting, data + 1, size - 1);
    peer_drop(p);
    return 0;
}
