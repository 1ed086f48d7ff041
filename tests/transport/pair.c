#include "pair.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const tp_fixture_t *fx;
const tp_test_job_t the_job = {.id = "job-0123456789a", .key = "key-0123456789a"};

long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

int pair_lookup(void *ctx, const uint8_t job_id[AUTH_JOB_BYTES], uint8_t key_out[AUTH_KEY_BYTES])
{
    const tp_test_job_t *j = ctx;

    if (memcmp(job_id, j->id, AUTH_JOB_BYTES) != 0)
        return -ENOENT;
    memcpy(key_out, j->key, AUTH_KEY_BYTES);
    return 0;
}

int pair_fds(pair_t *p, struct pollfd *pfd)
{
    int n = 0;

    if (p->l != NULL && p->a == NULL)
        pfd[n++] = (struct pollfd){.fd = fx->tp->listen_fd(p->l), .events = POLLIN};
    if (p->c != NULL)
        n += fx->tp->poll_fds(p->c, pfd + n, (PAIR_MAX_FDS - 1) / 2);
    if (p->a != NULL)
        n += fx->tp->poll_fds(p->a, pfd + n, (PAIR_MAX_FDS - 1) / 2);
    return n;
}

void pair_wait(pair_t *p)
{
    struct pollfd pfd[PAIR_MAX_FDS];

    poll(pfd, (nfds_t)pair_fds(p, pfd), 50);
}

int pair_dial(const char *addr, const uint8_t *id, const uint8_t *key, tp_conn_t **c_p)
{
    if (fx->connect_from != NULL)
        return fx->connect_from(fx->client_ip, addr, id, key, 7, c_p);
    return fx->tp->connect(addr, id, key, 7, c_p);
}

int pair_connect(pair_t *p, const char *addr, const uint8_t *id, const uint8_t *key)
{
    return pair_dial(addr, id, key, &p->c);
}

void pair_start(pair_t *p, const uint8_t *id, const uint8_t *key)
{
    memset(p, 0, sizeof(*p));
    ck_assert_int_eq(fx->tp->listen(fx->server_ip, &p->l, p->addr, sizeof(p->addr)), 0);
    ck_assert_int_eq(pair_connect(p, p->addr, id, key), 0);
}

void pair_settle(pair_t *p)
{
    long long start = now_ms(), end = start + fx->deadline_ms;

    while ((p->c_state == 0 || p->a_state == 0) && now_ms() < end) {
        if (p->a == NULL && fx->tp->accept(p->l, pair_lookup, (void *)&the_job, &p->a) != 0)
            p->a = NULL;
        if (p->c_state == 0)
            p->c_state = fx->tp->conn_state(p->c);
        if (p->a != NULL && p->a_state == 0)
            p->a_state = fx->tp->conn_state(p->a);
        if (p->c_state == 0 || p->a_state == 0)
            pair_wait(p);
    }
    p->ms = now_ms() - start;
    ck_assert_msg(p->a != NULL, "no connection accepted");
}

void pair_open(pair_t *p, const uint8_t *id, const uint8_t *key)
{
    pair_start(p, id, key);
    pair_settle(p);
}

void pair_ready(pair_t *p)
{
    pair_open(p, the_job.id, the_job.key);
    ck_assert_int_eq(p->c_state, 1);
    ck_assert_int_eq(p->a_state, 1);
}

void pair_close(pair_t *p)
{
    if (p->c != NULL)
        fx->tp->close(p->c);
    if (p->a != NULL)
        fx->tp->close(p->a);
    if (p->l != NULL)
        fx->tp->listen_close(p->l);
}

int wait_all(pair_t *p, tp_req_t **r, int n, int *status)
{
    long long end = now_ms() + fx->deadline_ms;
    int left = n;

    for (int i = 0; i < n; i++)
        status[i] = 1;
    while (left > 0 && now_ms() < end) {
        for (int i = 0; i < n; i++) {
            int done = 0, rc;
            if (status[i] != 1)
                continue;
            rc = fx->tp->test(r[i], &done);
            if (done) {
                status[i] = rc;
                left--;
            }
        }
        if (left > 0)
            pair_wait(p);
    }
    return left == 0 ? 0 : -ETIMEDOUT;
}

void drive(pair_t *p, tp_req_t **r, int n, int *done_out, long long ms)
{
    long long end = now_ms() + ms;

    while (now_ms() < end) {
        for (int i = 0; i < n; i++) {
            int done = 0;
            if (done_out[i])
                continue;
            ck_assert_int_eq(fx->tp->test(r[i], &done), 0);
            done_out[i] = done;
        }
        pair_wait(p);
    }
}

uint8_t *pattern(size_t len, unsigned seed)
{
    uint8_t *b = malloc(len + 1);

    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)(i * 31 + seed + (i >> 12));
    return b;
}
