/*
 * Point-to-point throughput of the RDMA transport, as two daemons would see it: a receiving
 * process listens on rxe0's address (10.77.0.1), a sending process connects from rxe1's
 * (10.77.0.2) and sends MIB MiB in messages of MSG bytes, WINDOW of them in flight; each side
 * drives only its own connection and sleeps in poll() on its fds. Prints the sender's time
 * from its first isend to its last completion, in GB/s (10^9 bytes/s).
 *
 *   bench_rdma [MIB [MSG [WINDOW]]]       defaults: 128 MiB, 1 MiB messages, window 8
 * HCCLD_RDMA_TEST_SERVER / HCCLD_RDMA_TEST_CLIENT change the two addresses.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "transport/rdma.h"

#define DEADLINE_S 600

static const uint8_t job_id[AUTH_JOB_BYTES] = "bench-job-01234";
static const uint8_t job_key[AUTH_KEY_BYTES] = "bench-key-01234";

static size_t total_bytes, msg_bytes;
static int window;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *s = getenv(name);

    return s != NULL && *s != '\0' ? s : dflt;
}

static int lookup(void *ctx, const uint8_t id[AUTH_JOB_BYTES], uint8_t key_out[AUTH_KEY_BYTES])
{
    if (memcmp(id, job_id, AUTH_JOB_BYTES) != 0)
        return -ENOENT;
    memcpy(key_out, job_key, AUTH_KEY_BYTES);
    return 0;
}

static void wait_fds(tp_conn_t *c, int timeout_ms)
{
    struct pollfd pfd[2];

    poll(pfd, (nfds_t)tp_poll_fds(c, pfd, 2), timeout_ms);
}

/* Runs c's handshake to its end: 1, or the error. */
static int settle(tp_conn_t *c)
{
    double end = now_s() + DEADLINE_S;
    int st;

    while ((st = tp_conn_state(c)) == 0 && now_s() < end)
        wait_fds(c, 100);
    return st;
}

/* Keeps window requests of dir in flight over nmsg messages; each buffer's first word says
 * which message it holds. 0, or -1 (reported). */
static int stream(tp_conn_t *c, int send, size_t nmsg, uint8_t **buf)
{
    tp_req_t **r = calloc((size_t)window, sizeof(*r));
    size_t *which = calloc((size_t)window, sizeof(*which));
    size_t posted = 0, done = 0;
    double end = now_s() + DEADLINE_S;
    int rc = 0;

    while (done < nmsg && rc == 0 && now_s() < end) {
        int progressed = 0;
        for (int w = 0; w < window && rc == 0; w++) {
            int fin = 0;
            if (r[w] == NULL && posted < nmsg) {
                if (send)
                    memcpy(buf[w], &posted, sizeof(posted));
                rc = send ? tp_isend(c, buf[w], msg_bytes, NULL, 1, &r[w])
                          : tp_irecv(c, buf[w], msg_bytes, NULL, 1, &r[w]);
                which[w] = posted++;
            }
            if (rc != 0 || r[w] == NULL)
                continue;
            rc = tp_test(r[w], &fin);
            if (!fin)
                continue;
            r[w] = NULL;
            done++;
            progressed = 1;
            if (!send && memcmp(buf[w], &which[w], sizeof(which[w])) != 0) {
                fprintf(stderr, "bench_rdma: message %zu arrived out of order\n", which[w]);
                rc = -EBADMSG;
            }
        }
        if (!progressed && rc == 0)
            wait_fds(c, 100);
    }
    free(r);
    free(which);
    if (rc != 0 || done < nmsg) {
        fprintf(stderr, "bench_rdma: %s failed after %zu messages: %s\n",
                send ? "sending" : "receiving", done, rc != 0 ? strerror(-rc) : "timed out");
        return -1;
    }
    return 0;
}

static uint8_t **buffers(void)
{
    uint8_t **b = calloc((size_t)window, sizeof(*b));

    for (int w = 0; w < window; w++) {
        b[w] = malloc(msg_bytes);
        memset(b[w], 0x5a + w, msg_bytes); /* touched before the clock starts */
    }
    return b;
}

static int receiver(int addr_pipe)
{
    char addr[TP_ADDR_MAX];
    tp_listener_t *l;
    tp_conn_t *c = NULL;
    double end = now_s() + DEADLINE_S;
    int rc;

    if (tp_rdma.listen(env_or("HCCLD_RDMA_TEST_SERVER", "10.77.0.1"), &l, addr, sizeof(addr)))
        return 1;
    if (write(addr_pipe, addr, sizeof(addr)) != (ssize_t)sizeof(addr))
        return 1;
    close(addr_pipe);
    while (c == NULL && now_s() < end) {
        struct pollfd pfd = {.fd = tp_listen_fd(l), .events = POLLIN};
        if (tp_accept(l, lookup, NULL, &c) != 0) {
            c = NULL;
            poll(&pfd, 1, 100);
        }
    }
    if (c == NULL || settle(c) != 1)
        return 1;
    rc = stream(c, 0, total_bytes / msg_bytes, buffers());
    tp_close(c);
    tp_listen_close(l);
    return rc == 0 ? 0 : 1;
}

static int sender(const char *addr)
{
    tp_conn_t *c;
    uint8_t **b = buffers();
    double t0, dt;

    if (tp_rdma_connect_from(env_or("HCCLD_RDMA_TEST_CLIENT", "10.77.0.2"), addr, job_id, job_key,
                             1, &c) != 0 ||
        settle(c) != 1)
        return 1;
    t0 = now_s();
    if (stream(c, 1, total_bytes / msg_bytes, b) != 0)
        return 1;
    dt = now_s() - t0;
    printf("bench_rdma: %zu MiB in %zu-byte messages, %d in flight: %.3f s, %.4f GB/s "
           "(%.1f MB/s)\n",
           total_bytes >> 20, msg_bytes, window, dt, (double)total_bytes / dt / 1e9,
           (double)total_bytes / dt / 1e6);
    tp_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    char addr[TP_ADDR_MAX];
    int fds[2], status = 0, rc;
    pid_t pid;

    log_init("bench_rdma", LOG_WARN);
    total_bytes = (size_t)(argc > 1 ? atol(argv[1]) : 128) << 20;
    msg_bytes = argc > 2 ? (size_t)atol(argv[2]) : 1u << 20;
    window = argc > 3 ? atoi(argv[3]) : 8;
    if (msg_bytes < sizeof(size_t) || total_bytes < msg_bytes || window < 1) {
        fprintf(stderr, "usage: bench_rdma [MIB [MSG_BYTES [WINDOW]]]\n");
        return 2;
    }
    if (pipe(fds) != 0)
        return 1;
    pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(fds[0]);
        _exit(receiver(fds[1]));
    }
    close(fds[1]);
    if (read(fds[0], addr, sizeof(addr)) != (ssize_t)sizeof(addr)) {
        fprintf(stderr, "bench_rdma: the receiver did not start\n");
        waitpid(pid, &status, 0);
        return 1;
    }
    rc = sender(addr);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_rdma: the receiver failed\n");
        rc = 1;
    }
    return rc;
}
