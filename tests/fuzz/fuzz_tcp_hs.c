/*
 * The TCP transport's handshake (tcp_hs.c, tcp_wire.c, auth.c), driven through a socketpair
 * exactly as a peer daemon would drive it. Input: one byte whose low bit picks the side under
 * test (0: accepting, 1: connecting), then every byte the other side sends before it closes.
 * The random source is fixed per input (fuzz_common.c), so a seed can hold valid MACs.
 * Checked: a finished handshake saw a valid proof of the key, the code consumed no byte past
 * its records, and every record it sent is well-formed.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "log.h"
#include "transport/tcp_hs.h"

#define MY_NODE 7u
#define MAX_INPUT 65536

static uint8_t rest[MAX_INPUT], sent[MAX_INPUT];

static int lookup(void *ctx, const uint8_t job[AUTH_JOB_BYTES], uint8_t key[AUTH_KEY_BYTES])
{
    if (memcmp(job, fuzz_job, AUTH_JOB_BYTES) != 0)
        return -1;
    memcpy(key, fuzz_key, AUTH_KEY_BYTES);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_rng_install();
    fuzz_log_level(LOG_DEBUG);
    return 0;
}

static size_t read_all(int fd, uint8_t *buf, size_t cap)
{
    size_t n = 0;
    ssize_t r;

    while (n < cap && (r = recv(fd, buf + n, cap - n, MSG_DONTWAIT)) > 0)
        n += (size_t)r;
    return n;
}

/* The record at rec of the peer's bytes holds the MAC only the key holder can compute. */
static void check_proof(const uint8_t *peer, size_t len, int rec, const char *role,
                        const uint8_t *n1, const uint8_t *n2)
{
    tcp_hs_msg_t m;
    uint8_t want[AUTH_MAC_BYTES];

    if (len < (size_t)(rec + 1) * TCP_HS_BYTES || tcp_hs_decode(peer + rec * TCP_HS_BYTES, &m))
        abort();
    auth_mac(fuzz_key, AUTH_KEY_BYTES, role, n1, n2, want);
    if (memcmp(m.mac, want, AUTH_MAC_BYTES) != 0)
        abort();
}

static void check_done(const tcp_hs_t *hs, int connecting, const uint8_t *peer, size_t len, int fd)
{
    int records = connecting ? 1 : 2;
    size_t used = (size_t)records * TCP_HS_BYTES;
    tcp_hs_msg_t hello;

    if (connecting) {
        check_proof(peer, len, 0, "tp-accept", hs->nonce_c, hs->nonce_a);
    } else {
        if (tcp_hs_decode(peer, &hello) != 0 || memcmp(hello.job, fuzz_job, AUTH_JOB_BYTES) ||
            hello.node != hs->peer_node)
            abort();
        check_proof(peer, len, 1, "tp-connect", hs->nonce_a, hs->nonce_c);
    }
    /* What follows the handshake is the data stream's, and must still be in the socket. */
    if (read_all(fd, rest, sizeof(rest)) != len - used || memcmp(rest, peer + used, len - used))
        abort();
}

static void check_sent(int fd)
{
    size_t n = read_all(fd, sent, sizeof(sent));
    tcp_hs_msg_t m;

    if (n % TCP_HS_BYTES != 0)
        abort();
    for (size_t off = 0; off < n; off += TCP_HS_BYTES)
        if (tcp_hs_decode(sent + off, &m) != 0)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *peer = data + 1;
    size_t len = size - 1;
    int sv[2], rc = 0, connecting;
    tcp_hs_t hs;

    if (size < 1 || len > MAX_INPUT)
        return 0;
    connecting = data[0] & 1;
    fuzz_rng_reset();
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    /* Everything the peer says is in the socket before the handshake runs; then it closes. */
    if (len > 0 && send(sv[1], peer, len, MSG_NOSIGNAL) != (ssize_t)len)
        abort();
    shutdown(sv[1], SHUT_WR);
    if (connecting)
        tcp_hs_init_connect(&hs, fuzz_job, fuzz_key, MY_NODE, 1, 0);
    else
        tcp_hs_init_accept(&hs, lookup, NULL);
    /* Each call ends in a result or in a wait for POLLOUT, which draining the peer's end
     * clears; the bound only stops a handshake that loops. */
    for (int i = 0; i < 16 && rc == 0; i++) {
        rc = tcp_hs_progress(&hs, sv[0]);
        if (rc == 0 && tcp_hs_events(&hs) != POLLOUT)
            abort();
        check_sent(sv[1]);
    }
    if (rc == 0)
        abort();
    if (rc == 1)
        check_done(&hs, connecting, peer, len, sv[0]);
    tcp_hs_clear(&hs);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
