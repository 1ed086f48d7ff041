/*
 * Profile records (see prof.h), one JSON object per line (JSON Lines: `jq -s` reads the file
 * as one array). An operation's queued time is its first piece's: later pieces wait behind
 * earlier ones of the same operation, which is the pipeline, not queueing. Execution times are
 * summed over pieces; the daemon runs a comm's pieces one after another, so the sums stay
 * within the call's wall time. Operations level 0 runs among the ranks themselves (coop) never
 * reach the daemon: their whole time counts as level 0.
 */
#include "prof.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "algo_id.h"
#include "desc_check.h"
#include "dtype.h"
#include "futex.h"
#include "log.h"

#define PROF_PATH_MAX 4096

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int enabled;
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *file;
static int file_failed;
static int64_t my_rank = -1;
static __thread hc_prof_acc_t *cur;

static void read_env(void)
{
    const char *s = getenv("HCCL_PROF_ENABLE");

    enabled = s != NULL && (strcmp(s, "1") == 0 || strcasecmp(s, "true") == 0);
}

int hc_prof_enabled(void)
{
    pthread_once(&once, read_env);
    return enabled;
}

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

void hc_prof_begin(hc_prof_acc_t *acc, const hc_call_t *call)
{
    int collective = call->alltoallv || desc_is_collective(call->op.kind);

    *acc = (hc_prof_acc_t){.t0_ns = now_ns(), .seq = call->comm->prof_colls, .algo = -1};
    if (collective)
        call->comm->prof_colls++;
    cur = acc;
}

void hc_prof_piece(const cqe_t *e)
{
    hc_prof_acc_t *a = cur;

    if (a == NULL)
        return;
    if (a->pieces++ == 0)
        a->queued_ns = e->queued_ns;
    a->qos_wait_ns += e->qos_wait_ns;
    a->l0_ns += e->l0_ns;
    a->l1_ns += e->l1_ns;
    if (e->algo >= 0) {
        a->algo = e->algo;
        a->algo_src = e->algo_src;
    }
}

/* Bytes the way nccl-tests counts them (the larger side), and the bus bandwidth factor. */
static uint64_t op_bytes(const hc_call_t *call, double *bus_p)
{
    uint32_t n = call->comm->nranks;
    uint64_t es = dtype_size(call->op.dtype), elems = call->op.count;

    *bus_p = 1.0;
    if (call->alltoallv) {
        elems = 0;
        for (uint32_t r = 0; r < n; r++)
            elems += call->counts[r];
        *bus_p = (double)(n - 1) / n;
        return elems * es;
    }
    switch (call->op.kind) {
    case DESC_ALLREDUCE: *bus_p = 2.0 * (n - 1) / n; break;
    case DESC_ALLGATHER:
    case DESC_REDUCE_SCATTER:
    case DESC_ALLTOALL:
    case DESC_SCATTER:
        *bus_p = (double)(n - 1) / n;
        elems *= n;
        break;
    case DESC_BARRIER: elems = 0; break;
    default: break;
    }
    return elems * es;
}

static double us(uint64_t ns)
{
    return (double)ns / 1e3;
}

void hc_prof_end(hc_prof_acc_t *acc, const hc_call_t *call, int result)
{
    const hc_comm_t *comm = call->comm;
    uint64_t t_ns = now_ns() - acc->t0_ns;
    double bus, algbw;
    uint64_t bytes = op_bytes(call, &bus);
    const char *kind = call->alltoallv ? "alltoallv" : desc_kind_name(call->op.kind);
    int collective = call->alltoallv || desc_is_collective(call->op.kind);
    json_t *o;

    cur = NULL;
    /* Nothing reached the daemon: level 0 ran among the ranks (or nothing ran). */
    if (acc->pieces == 0 && comm->coop != NULL && result == HCCL_SUCCESS)
        acc->l0_ns = t_ns;
    algbw = t_ns ? (double)bytes / (double)t_ns : 0; /* bytes per ns = GB/s */
    o = json_pack(
        "{s:s, s:I, s:s, s:I, s:i, s:i, s:i, s:i, s:s, s:s, s:I, s:i, "
        "s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:s}",
        "op", kind, "count", (json_int_t)call->op.count, "dtype", dtype_name(call->op.dtype),
        "bytes", (json_int_t)bytes, "comm", (int)comm->id, "rank", (int)comm->rank, "nranks",
        (int)comm->nranks, "nnodes", (int)comm->nnodes, "qos_class", comm->qos_class, "algo",
        acc->algo >= 0 ? algo_name(acc->algo) : "none", "chunk_bytes",
        (json_int_t)comm->chunk_bytes, "pieces", (int)acc->pieces, "time_us", us(t_ns), "queued_us",
        us(acc->queued_ns), "qos_wait_us", us(acc->qos_wait_ns), "l0_us", us(acc->l0_ns), "l1_us",
        us(acc->l1_ns), "algbw_GBps", algbw, "busbw_GBps", algbw * bus, "result", result, "path",
        comm->coop != NULL && acc->pieces == 0 ? "coop" : "daemon");
    if (o == NULL)
        return;
    /* Collectives line up across ranks by sequence; transfers by peer. */
    if (collective)
        json_object_set_new(o, "seq", json_integer((json_int_t)acc->seq));
    if (acc->algo >= 0)
        json_object_set_new(o, "algo_by", json_string(algo_src_name(acc->algo_src)));
    json_object_set_new(o, "comm_name", json_string(comm->cfg.name));
    if (!collective)
        json_object_set_new(o, "peer", json_integer(call->op.root));
    else if (call->op.kind == DESC_BROADCAST || call->op.kind == DESC_REDUCE ||
             call->op.kind == DESC_SCATTER)
        json_object_set_new(o, "root", json_integer(call->op.root));
    if (desc_is_reduction(call->op.kind) && !call->alltoallv)
        json_object_set_new(o, "redop", json_string(redop_name(call->op.redop)));
    /* CLOCK_MONOTONIC: orders the records of all ranks of one node. */
    json_object_set_new(o, "start_us", json_real(us(acc->t0_ns)));
    pthread_mutex_lock(&file_lock);
    FILE *f = prof_file();
    if (f != NULL) {
        json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
        fputc('\n', f);
        fflush(f);
    }
    pthread_mutex_unlock(&file_lock);
    json_decref(o);
}
