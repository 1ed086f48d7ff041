/*
 * Two endpoints of one transport in this process, for the transport tests: a listener, the
 * connecting side and the accepting side, all driven from one thread by a poll loop with a
 * deadline, so a bug shows as a failure and never as a hang. The fixture says which transport
 * and where; the TCP runner (tests/unit/test_tcp.c) and the RDMA one (tests/rdma/test_rdma.c)
 * each set one, and both run the conformance suite (conformance.c) with it.
 */
#ifndef HCCLD_TESTS_TRANSPORT_PAIR_H
#define HCCLD_TESTS_TRANSPORT_PAIR_H

#include <check.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

typedef struct tp_fixture {
    const char *name; /* prefixes what the tests print */
    const transport_ops_t *tp;
    const char *server_ip; /* the listener's address */
    const char *client_ip; /* the connecting side's source address (connect_from), or NULL */
    int (*connect_from)(const char *src_ip, const char *addr, const uint8_t job_id[AUTH_JOB_BYTES],
                        const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, tp_conn_t **c_p);
    long long deadline_ms; /* any wait of a test */
    size_t big;            /* a large message */
    size_t huge; /* more than the transport and the kernel buffer at once: caught mid-transfer */
    long long mid_ms; /* how long a huge transfer may be driven and still be in the middle */
    /* Called before and after a transfer of `bytes` each way (begin 1, then 0); may assert
     * that the traffic really crossed the wire. NULL: nothing. */
    void (*traffic)(int begin, size_t bytes);
} tp_fixture_t;

/* The fixture of the running test: set before each test by the `use` function given to
 * tp_conformance_add (a checked fixture), so that one binary may run several. */
extern const tp_fixture_t *fx;

typedef struct tp_test_job {
    uint8_t id[AUTH_JOB_BYTES];
    uint8_t key[AUTH_KEY_BYTES];
} tp_test_job_t;

extern const tp_test_job_t the_job;

typedef struct pair {
    tp_listener_t *l;
    tp_conn_t *c; /* connecting side */
    tp_conn_t *a; /* accepting side */
    int c_state, a_state;
    long long ms;           /* how long the handshake took */
    char addr[TP_ADDR_MAX]; /* the listener's */
} pair_t;

long long now_ms(void);
/* The key lookup of the accepting side: ctx is a tp_test_job_t. */
int pair_lookup(void *ctx, const uint8_t job_id[AUTH_JOB_BYTES], uint8_t key_out[AUTH_KEY_BYTES]);
/* The fds of the pair (and of the listener while accepting); returns how many (at most
 * PAIR_MAX_FDS: a striped connection has several). */
#define PAIR_MAX_FDS 33
int pair_fds(pair_t *p, struct pollfd *pfd);
/* Sleeps until one of them is ready, 50 ms at most. */
void pair_wait(pair_t *p);
/* Starts a connection with (job id, key) to a new listener; pair_settle runs both handshakes
 * until each side settles. pair_open does both; pair_ready also asserts both are ready. */
void pair_start(pair_t *p, const uint8_t *id, const uint8_t *key);
/* The connecting side's connect to addr (from the fixture's client address): its result. */
int pair_connect(pair_t *p, const char *addr, const uint8_t *id, const uint8_t *key);
/* The same for another connection, *c_p. */
int pair_dial(const char *addr, const uint8_t *id, const uint8_t *key, tp_conn_t **c_p);
void pair_settle(pair_t *p);
void pair_open(pair_t *p, const uint8_t *id, const uint8_t *key);
void pair_ready(pair_t *p);
void pair_close(pair_t *p);
/* Tests every request until all are done; status[i] gets each result. 0 or -ETIMEDOUT. */
int wait_all(pair_t *p, tp_req_t **r, int n, int *status);
/* Drives both sides for ms, asserting the requests r not done yet stay sound (done_out[i]
 * set for those that finish). */
void drive(pair_t *p, tp_req_t **r, int n, int *done_out, long long ms);
/* len bytes of a pattern that seed varies (one spare byte allocated past the end). */
uint8_t *pattern(size_t len, unsigned seed);

/* Adds the cases every transport must pass to tc, with use (which sets fx) run before each of
 * tc's tests, these and the runner's own. */
void tp_conformance_add(TCase *tc, void (*use)(void));

#endif
