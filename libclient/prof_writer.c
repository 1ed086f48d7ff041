/*
 * The profile writer: records queued by the ranks' threads (hc_prof_write), encoded with
 * jansson and appended to HCCL_PROF_FILE by a thread of their own, one JSON object per line
 * (JSON Lines: `jq -s` reads the file as one array). Encoding a record costs about 14 us
 * (its reals, mostly), and the operation it describes may have taken 0.4 us: so the calling
 * thread only copies the record into the queue. The writer wakes on the first record into an
 * empty queue, gathers for up to BATCH_NS (or until the queue is half full), writes the batch
 * and sleeps again: a few wake-ups a second, however many operations. hc_prof_flush (every
 * HcclCommDestroy and HcclCommAbort, and exit) waits until the file holds every record queued
 * before it; a process killed outright loses the records of its last BATCH_NS.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "futex.h"
#include "log.h"
#include "prof.h"
#include "thread.h"

#define PROF_PATH_MAX 4096
#define QUEUE_CAP 1024u
#define WRITE_BATCH 64u
#define BATCH_NS (50ull * 1000000ull)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;  /* the writer's */
static pthread_cond_t space = PTHREAD_COND_INITIALIZER; /* writers of records, when full */
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;  /* flushers */
static hc_prof_rec_t queue[QUEUE_CAP];
static unsigned q_head, q_n;
static int started, busy, flush_req;
static int registered; /* the fork and exit handlers (kept in a child) */
static FILE *file;     /* the writer's alone */
static int file_failed;
static int64_t my_rank = -1;

void hc_prof_note_rank(uint32_t rank)
{
    int64_t none = -1;

    __atomic_compare_exchange_n(&my_rank, &none, (int64_t)rank, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}

/* HCCL_PROF_FILE with %r (rank), %p (pid) and %% expanded; 0, or -1 if it does not fit. */
static int expand_path(char *out, size_t cap)
{
    const char *tmpl = getenv("HCCL_PROF_FILE");
    size_t n = 0;

    if (tmpl == NULL || tmpl[0] == '\0')
        tmpl = "hccl_profiling.json";
    for (const char *p = tmpl; *p != '\0'; p++) {
        int w;
        if (p[0] == '%' && p[1] == 'r')
            w = snprintf(out + n, cap - n, "%lld", (long long)__atomic_load_n(&my_rank, 0));
        else if (p[0] == '%' && p[1] == 'p')
            w = snprintf(out + n, cap - n, "%d", (int)getpid());
        else if (p[0] == '%' && p[1] == '%')
            w = snprintf(out + n, cap - n, "%%");
        else {
            if (n + 1 >= cap)
                return -1;
            out[n++] = *p;
            out[n] = '\0';
            continue;
        }
        if (w < 0 || (size_t)w >= cap - n)
            return -1;
        n += (size_t)w;
        p++;
    }
    out[n] = '\0';
    return 0;
}

/* The file, opened for appending on the first record; NULL (said once) if it cannot be. */
static FILE *prof_file(void)
{
    char path[PROF_PATH_MAX];

    if (file != NULL || file_failed)
        return file;
    if (expand_path(path, sizeof(path)) != 0) {
        ERR("PROF", "HCCL_PROF_FILE is too long; no profile is written");
        file_failed = 1;
    } else if ((file = fopen(path, "a")) == NULL) {
        ERR("PROF", "cannot open HCCL_PROF_FILE %s: %s; no profile is written", path,
            strerror(errno));
        file_failed = 1;
    } else
        INFO("PROF", "profile records go to %s", path);
    return file;
}

static void put_str(json_t *o, const char *key, const char *v)
{
    if (v != NULL)
        json_object_set_new(o, key, json_string(v));
}

static void encode(const hc_prof_rec_t *r, FILE *f)
{
    json_t *o = json_pack(
        "{s:s, s:I, s:s, s:I, s:i, s:i, s:i, s:i, s:s, s:s, s:I, s:i, "
        "s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:s}",
        "op", r->op, "count", (json_int_t)r->count, "dtype", r->dtype, "bytes",
        (json_int_t)r->bytes, "comm", (int)r->comm, "rank", (int)r->rank, "nranks", (int)r->nranks,
        "nnodes", (int)r->nnodes, "qos_class", r->qos_class, "algo", r->algo, "chunk_bytes",
        (json_int_t)r->chunk_bytes, "pieces", (int)r->pieces, "time_us", r->time_us, "queued_us",
        r->queued_us, "qos_wait_us", r->qos_wait_us, "l0_us", r->l0_us, "l1_us", r->l1_us,
        "algbw_GBps", r->algbw, "busbw_GBps", r->busbw, "result", r->result, "path", r->path);

    if (o == NULL)
        return;
    /* Collectives line up across ranks by sequence; transfers by peer. */
    if (r->collective)
        json_object_set_new(o, "seq", json_integer((json_int_t)r->seq));
    json_object_set_new(o, "retries", json_integer(r->retries));
    put_str(o, "algo_by", r->algo_by);
    put_str(o, "comm_name", r->comm_name);
    if (r->peer >= 0)
        json_object_set_new(o, "peer", json_integer(r->peer));
    if (r->root >= 0)
        json_object_set_new(o, "root", json_integer(r->root));
    put_str(o, "redop", r->redop);
    /* CLOCK_MONOTONIC: orders the records of all ranks of one node. */
    json_object_set_new(o, "start_us", json_real(r->start_us));
    /* 15 significant digits: a time in us to the ns after 11 days of uptime, and never the
     * binary tail of a double ("time_us":21076.756000000001). */
    json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    fputc('\n', f);
    json_decref(o);
}

/* Waits (lock held) until the batch is worth writing: BATCH_NS after its first record, half
 * a queue, or a flush asked for. */
static void gather(void)
{
    struct timespec until;
    uint64_t t;

    clock_gettime(CLOCK_REALTIME, &until);
    t = (uint64_t)until.tv_nsec + BATCH_NS;
    until.tv_sec += (time_t)(t / 1000000000ull);
    until.tv_nsec = (long)(t % 1000000000ull);
    while (!flush_req && q_n < QUEUE_CAP / 2)
        if (pthread_cond_timedwait(&wake, &lock, &until) == ETIMEDOUT)
            break;
}

static void *writer_main(void *arg)
{
    hc_prof_rec_t batch[WRITE_BATCH];

    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (q_n == 0 && !flush_req)
            pthread_cond_wait(&wake, &lock);
        gather();
        while (q_n > 0) {
            unsigned k = q_n < WRITE_BATCH ? q_n : WRITE_BATCH;
            for (unsigned i = 0; i < k; i++)
                batch[i] = queue[(q_head + i) % QUEUE_CAP];
            q_head = (q_head + k) % QUEUE_CAP;
            q_n -= k;
            busy = 1;
            pthread_cond_broadcast(&space);
            pthread_mutex_unlock(&lock);
            FILE *f = prof_file();
            for (unsigned i = 0; f != NULL && i < k; i++)
                encode(&batch[i], f);
            pthread_mutex_lock(&lock);
            busy = 0;
        }
        pthread_mutex_unlock(&lock);
        if (file != NULL)
            fflush(file);
        pthread_mutex_lock(&lock);
        if (q_n == 0) {
            flush_req = 0;
            pthread_cond_broadcast(&idle);
        }
    }
    return NULL;
}

/* In a child of fork(): no writer runs there. The parent's queued records are the parent's;
 * its file's unwritten buffer too (dropped here, not written twice); the child opens its own
 * file (its rank and pid may differ). */
static void after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&space, NULL);
    pthread_cond_init(&idle, NULL);
    q_head = q_n = 0;
    started = busy = flush_req = 0;
    if (file != NULL) {
        __fpurge(file);
        fclose(file);
        file = NULL;
    }
    file_failed = 0;
}

/* Starts the writer (lock held); 0, or -1 if no thread could be made (said once). */
static int start_writer(void)
{
    pthread_attr_t a;
    pthread_t t;
    int rc;

    if (started)
        return started > 0 ? 0 : -1;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    rc = thread_start(&t, &a, writer_main, NULL); /* the application's signals are not its */
    pthread_attr_destroy(&a);
    if (rc != 0) {
        ERR("PROF", "cannot start the profile writer: %s; no profile is written", strerror(rc));
        started = -1;
        return -1;
    }
    started = 1;
    if (!registered) { /* once per process image: children inherit both */
        registered = 1;
        pthread_atfork(NULL, NULL, after_fork_child);
        atexit(hc_prof_flush);
    }
    return 0;
}

void hc_prof_write(const hc_prof_rec_t *rec)
{
    pthread_mutex_lock(&lock);
    if (start_writer() == 0) {
        while (q_n == QUEUE_CAP)
            pthread_cond_wait(&space, &lock);
        queue[(q_head + q_n) % QUEUE_CAP] = *rec;
        if (++q_n == 1 || q_n == QUEUE_CAP / 2)
            pthread_cond_signal(&wake);
    }
    pthread_mutex_unlock(&lock);
}

void hc_prof_flush(void)
{
    pthread_mutex_lock(&lock);
    if (started > 0) {
        flush_req = 1;
        pthread_cond_signal(&wake);
        while (flush_req || q_n > 0 || busy)
            pthread_cond_wait(&idle, &lock);
    }
    pthread_mutex_unlock(&lock);
}
