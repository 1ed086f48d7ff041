/*
 * Profile records (see prof.h): what each operation took, gathered in the calling thread and
 * handed to the writer (prof_writer.c). An operation's queued time is its first piece's: later
 * pieces wait behind earlier ones of the same operation, which is the pipeline, not queueing.
 * Execution times are summed over pieces; the daemon runs a comm's pieces one after another,
 * so the sums stay within the call's wall time. Operations level 0 runs among the ranks
 * themselves (coop) never reach the daemon: their whole time counts as level 0.
 */
#include "prof.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "algo_id.h"
#include "desc_check.h"
#include "dtype.h"
#include "futex.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int enabled;
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

void hc_prof_begin(hc_prof_acc_t *acc, const hc_call_t *call)
{
    int collective = call->alltoallv || desc_is_collective(call->op.kind);

    *acc = (hc_prof_acc_t){.t0_ns = now_ns(), .seq = call->comm->prof_colls, .algo = -1};
    if (collective)
        call->comm->prof_colls++;
    cur = acc;
}

void hc_prof_piece(const cqe_t *e, uint32_t reposts)
{
    hc_prof_acc_t *a = cur;

    if (a == NULL)
        return;
    if (reposts > a->retries)
        a->retries = reposts;
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

void hc_prof_coop_wait(uint64_t ns)
{
    if (cur != NULL && cur->pieces == 0)
        cur->queued_ns = ns;
}

void hc_prof_direct(void)
{
    if (cur != NULL)
        cur->direct = 1;
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
    double bus;
    hc_prof_rec_t rec = {
        .op = call->alltoallv ? "alltoallv" : desc_kind_name(call->op.kind),
        .dtype = dtype_name(call->op.dtype),
        .count = call->op.count,
        .bytes = op_bytes(call, &bus),
        .chunk_bytes = comm->chunk_bytes,
        .seq = acc->seq,
        .comm = comm->id,
        .rank = comm->rank,
        .nranks = comm->nranks,
        .nnodes = comm->nnodes,
        .pieces = acc->pieces,
        .retries = acc->retries,
        .result = result,
        .collective = call->alltoallv || desc_is_collective(call->op.kind),
        .algo = acc->algo >= 0 ? algo_name(acc->algo) : "none",
        .algo_by = acc->algo >= 0 ? algo_src_name(acc->algo_src) : NULL,
        .path = acc->direct                              ? "direct"
                : comm->coop != NULL && acc->pieces == 0 ? "coop"
                                                         : "daemon",
        .time_us = us(t_ns),
        .queued_us = us(acc->queued_ns),
        .qos_wait_us = us(acc->qos_wait_ns),
        .start_us = us(acc->t0_ns),
        .peer = -1,
        .root = -1,
    };

    cur = NULL;
    /* Nothing reached the daemon: level 0 ran among the ranks (or nothing ran); over lanes,
     * the whole time is between nodes. */
    if (acc->pieces == 0 && comm->coop != NULL && result == HCCL_SUCCESS)
        acc->l0_ns = t_ns;
    if (acc->direct && result == HCCL_SUCCESS)
        acc->l1_ns = t_ns;
    rec.l1_us = us(acc->l1_ns);
    rec.l0_us = us(acc->l0_ns);
    rec.algbw = t_ns ? (double)rec.bytes / (double)t_ns : 0; /* bytes per ns = GB/s */
    rec.busbw = rec.algbw * bus;
    if (!rec.collective)
        rec.peer = (int64_t)call->op.root;
    else if (call->op.kind == DESC_BROADCAST || call->op.kind == DESC_REDUCE ||
             call->op.kind == DESC_SCATTER)
        rec.root = (int64_t)call->op.root;
    if (desc_is_reduction(call->op.kind) && !call->alltoallv)
        rec.redop = redop_name(call->op.redop);
    snprintf(rec.qos_class, sizeof(rec.qos_class), "%s", comm->qos_class);
    snprintf(rec.comm_name, sizeof(rec.comm_name), "%s", comm->cfg.name);
    hc_prof_write(&rec);
}
