#include "fault_loop.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "dtype.h"
#include "ref.h"

enum fl_kind { K_AR, K_AR_INPLACE, K_AG, K_BCAST, K_RS, K_A2A, K_REDUCE, K_SENDRECV, K_NKINDS };
#define K_AGREE K_NKINDS /* the small allreduce with which ranks agree to stop */
enum fl_buf { B_MALLOC, B_MEMALLOC, B_REG, B_NBUFS };

/* Bytes of an op's largest buffer: 16 KiB runs over lanes between the ranks (allreduce and
 * allgather; the rest through the daemons as ever), 1 MiB through the daemons. */
static const uint64_t sizes[] = {16u << 10, FL_BIG_BYTES};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define OPS_PER_ITER (B_NBUFS * NSIZES * K_NKINDS + 1)
_Static_assert(OPS_PER_ITER == FL_OPS_PER_ITER, "FL_OPS_PER_ITER is one iteration's ops");

/* Data type and reduction per iteration: every one exact on the reference's small integers. */
static const struct {
    int dt, op;
} types[] = {{HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM},
             {HCCL_DATA_TYPE_INT32, HCCL_REDUCE_MAX},
             {HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_SUM},
             {HCCL_DATA_TYPE_INT8, HCCL_REDUCE_MIN}};

const char *fl_kind_name(unsigned kind)
{
    static const char *const names[] = {"allreduce", "allreduce in place", "allgather",
                                        "broadcast", "reduce-scatter",     "alltoall",
                                        "reduce",    "send/recv",          "agreement"};

    return kind <= K_AGREE ? names[kind] : "?";
}

typedef struct op_ctx {
    HcclComm comm;
    uint32_t r, n, root;
    int dt, op;
    uint64_t first; /* the reference's element index of element 0 (varies per iteration) */
    uint8_t *s, *o, *want;
} op_ctx_t;

double fl_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* want[q * blk + i] for q < nblk, i < blk: the reduction over the ranks (red), else the value
 * of rank q (by_block) or of `rank`, at reference element first + off + i (+ q * blk unless
 * by_block). */
static void want_fill(const op_ctx_t *x, int red, uint32_t nblk, uint64_t blk, uint32_t rank,
                      int by_block, uint64_t off)
{
    for (uint32_t q = 0; q < nblk; q++)
        for (uint64_t i = 0; i < blk; i++) {
            uint64_t k = x->first + off + (by_block ? 0 : q * blk) + i;
            int64_t v = red ? ref_reduced(x->dt, x->op, x->n, k)
                            : ref_val(x->dt, x->op, by_block ? q : rank, k);
            ref_store(x->dt, x->want, q * blk + i, v);
        }
}

static HcclResult send_recv_ring(const op_ctx_t *x, uint64_t total)
{
    uint32_t to = (x->r + 1) % x->n, from = (x->r + x->n - 1) % x->n;
    HcclResult a, b;

    ref_fill(x->dt, x->op, x->r, x->s, x->first, total);
    if (x->r % 2 == 0) {
        a = HcclSend(x->s, total, x->dt, to, x->comm, NULL);
        b = HcclRecv(x->o, total, x->dt, from, x->comm, NULL);
    } else {
        b = HcclRecv(x->o, total, x->dt, from, x->comm, NULL);
        a = HcclSend(x->s, total, x->dt, to, x->comm, NULL);
    }
    want_fill(x, 0, 1, total, from, 0, 0);
    return a != HCCL_SUCCESS ? a : b;
}

/* Runs one op of `total` elements in x's buffers; the elements of o to compare with want go to
 * *cmp. */
static HcclResult run_op(const op_ctx_t *x, int kind, uint64_t total, uint64_t *cmp)
{
    uint64_t blk = total / x->n;
    uint32_t r = x->r, n = x->n;
    HcclComm c = x->comm;
    HcclResult rc = HCCL_E_PARA;
    int dt = x->dt, op = x->op;

    memset(x->o, 0xEE, total * dtype_size(dt));
    *cmp = total;
    switch (kind) {
    case K_AR:
    case K_AR_INPLACE:
        ref_fill(dt, op, r, kind == K_AR ? x->s : x->o, x->first, total);
        rc = HcclAllReduce(kind == K_AR ? x->s : x->o, x->o, total, dt, op, c, NULL);
        want_fill(x, 1, 1, total, 0, 0, 0);
        break;
    case K_AG:
        ref_fill(dt, op, r, x->s, x->first, blk);
        rc = HcclAllGather(x->s, x->o, blk, dt, c, NULL);
        want_fill(x, 0, n, blk, 0, 1, 0);
        *cmp = n * blk;
        break;
    case K_BCAST:
        if (r == x->root)
            ref_fill(dt, op, r, x->o, x->first, total);
        rc = HcclBroadcast(x->o, total, dt, x->root, c, NULL);
        want_fill(x, 0, 1, total, x->root, 0, 0);
        break;
    case K_RS:
        ref_fill(dt, op, r, x->s, x->first, n * blk);
        rc = HcclReduceScatter(x->s, x->o, blk, dt, op, c, NULL);
        want_fill(x, 1, 1, blk, 0, 0, r * blk);
        *cmp = blk;
        break;
    case K_A2A:
        ref_fill(dt, op, r, x->s, x->first, n * blk);
        rc = HcclAlltoAll(x->s, blk, dt, x->o, blk, dt, c, NULL);
        want_fill(x, 0, n, blk, 0, 1, r * blk);
        *cmp = n * blk;
        break;
    case K_REDUCE:
        ref_fill(dt, op, r, x->s, x->first, total);
        rc = HcclReduce(x->s, x->o, total, dt, op, x->root, c, NULL);
        want_fill(x, 1, 1, total, 0, 0, 0);
        *cmp = r == x->root ? total : 0;
        break;
    case K_SENDRECV: rc = send_recv_ring(x, total); break;
    }
    return rc;
}

static void record(fl_log_t *lg, int kind, HcclResult rc, int exact, double t0)
{
    uint32_t k = lg->nrec;

    lg->rec[k] =
        (fl_rec_t){.index = k, .kind = (uint8_t)kind, .exact = (uint8_t)exact, .rc = rc, .t0 = t0};
    lg->rec[k].t1 = fl_now();
    __atomic_store_n(&lg->nrec, k + 1, __ATOMIC_RELEASE);
}

/* The send and receive buffers of each kind (B_REG: registered with comm, handles in h). */
static int buffers_get(HcclComm comm, uint8_t *b[B_NBUFS][2], void *h[2])
{
    for (int i = 0; i < 2; i++) {
        void *m = NULL;
        b[B_MALLOC][i] = malloc(FL_BIG_BYTES);
        if (HcclMemAlloc(&m, FL_BIG_BYTES) != HCCL_SUCCESS)
            return -1;
        b[B_MEMALLOC][i] = m;
        m = mmap(NULL, FL_BIG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b[B_MALLOC][i] == NULL || m == MAP_FAILED ||
            HcclCommRegister(comm, m, FL_BIG_BYTES, &h[i]) != HCCL_SUCCESS)
            return -1;
        b[B_REG][i] = m;
    }
    return 0;
}

static void buffers_put(HcclComm comm, uint8_t *b[B_NBUFS][2], void *h[2])
{
    for (int i = 0; i < 2; i++) {
        free(b[B_MALLOC][i]);
        HcclMemFree(b[B_MEMALLOC][i]);
        HcclCommDeregister(comm, h[i]);
        munmap(b[B_REG][i], FL_BIG_BYTES);
    }
}

static void log_to(const fl_shared_t *sh, uint32_t r)
{
    char path[96];
    int fd;

    if (sh->log_dir[0] == '\0')
        return;
    snprintf(path, sizeof(path), "%s/rank%u.log", sh->log_dir, r);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
}

/* Whether the ranks agree (MAX over them) to end after this iteration. */
static int agree_stop(fl_shared_t *sh, HcclComm comm, fl_log_t *lg, uint32_t it, double start,
                      uint32_t *failed)
{
    int32_t stop = __atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE) ||
                   (sh->iters > 0 && it + 1 >= sh->iters) ||
                   (sh->run_s > 0 && fl_now() - start >= sh->run_s) ||
                   lg->nrec + 2 * OPS_PER_ITER > FL_MAX_RECS,
            any = 0;
    double t0 = fl_now();
    HcclResult rc =
        HcclAllReduce(&stop, &any, 1, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_MAX, comm, NULL);

    record(lg, K_AGREE, rc, 1, t0);
    *failed += rc != HCCL_SUCCESS;
    return any || rc != HCCL_SUCCESS;
}

/* The loop ended with `failed` ops failed: the comm is broken then, and the harness must not
 * destroy it. Holds it until the test says stop (once every loop ended), so that no rank leaves
 * while others still learn who failed: one that left would be named too; then exits 0. A loop of
 * fixed length does not wait. Returns when no op failed. */
static void loop_end(const fl_shared_t *sh, fl_log_t *lg, uint32_t failed)
{
    __atomic_store_n(&lg->state, 2, __ATOMIC_RELEASE);
    while (failed > 0 && sh->iters == 0 && !__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE))
        usleep(10 * 1000);
    if (failed > 0)
        _exit(0);
}

int fl_rank_loop(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    fl_shared_t *sh = arg;
    fl_log_t *lg = &sh->logs[r];
    uint8_t *bufs[B_NBUFS][2] = {{0}};
    void *handles[2] = {0};
    op_ctx_t x = {.comm = comm, .r = r, .n = n, .want = malloc(FL_BIG_BYTES)};
    uint32_t failed = 0, wrong = 0;
    double start = fl_now();

    log_to(sh, r);
    if (x.want == NULL || buffers_get(comm, bufs, handles) != 0) {
        fprintf(stderr, "rank %u: no buffers\n", r);
        return 10;
    }
    __atomic_store_n(&lg->state, 1, __ATOMIC_RELEASE);
    for (uint32_t it = 0;; it++) {
        x.dt = types[it % 4].dt;
        x.op = types[it % 4].op;
        x.first = it * 131;
        x.root = it % n;
        for (int b = 0; b < B_NBUFS && failed < sh->max_fail; b++)
            for (size_t z = 0; z < NSIZES && failed < sh->max_fail; z++)
                for (int k = 0; k < K_NKINDS && failed < sh->max_fail; k++) {
                    uint64_t cmp;
                    double t0 = fl_now();
                    x.s = bufs[b][0];
                    x.o = bufs[b][1];
                    HcclResult rc = run_op(&x, k, sizes[z] / dtype_size(x.dt), &cmp);
                    int exact =
                        rc == HCCL_SUCCESS && memcmp(x.o, x.want, cmp * dtype_size(x.dt)) == 0;
                    record(lg, k, rc, exact, t0);
                    failed += rc != HCCL_SUCCESS;
                    wrong += rc == HCCL_SUCCESS && !exact;
                }
        if (failed >= sh->max_fail || agree_stop(sh, comm, lg, it, start, &failed))
            break;
    }
    loop_end(sh, lg, failed);
    buffers_put(comm, bufs, handles);
    free(x.want);
    return wrong > 0;
}

/* Two checked ops of `kind`, 1 MiB; the second waits for go (all ranks, or rank `late`). */
static int two_ops(HcclComm comm, uint32_t r, uint32_t n, fl_shared_t *sh, int kind, uint32_t late)
{
    fl_log_t *lg = &sh->logs[r];
    op_ctx_t x = {.comm = comm,
                  .r = r,
                  .n = n,
                  .dt = HCCL_DATA_TYPE_FP32,
                  .op = HCCL_REDUCE_SUM,
                  .s = malloc(FL_BIG_BYTES),
                  .o = malloc(FL_BIG_BYTES),
                  .want = malloc(FL_BIG_BYTES)};
    uint32_t failed = 0, wrong = 0;

    log_to(sh, r);
    if (x.s == NULL || x.o == NULL || x.want == NULL) {
        fprintf(stderr, "rank %u: no buffers\n", r);
        return 10;
    }
    __atomic_store_n(&lg->state, 1, __ATOMIC_RELEASE);
    for (uint32_t k = 0; k < 2 && failed == 0; k++) {
        uint64_t cmp;
        while (k == 1 && (late == UINT32_MAX || late == r) &&
               !__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE))
            usleep(1000);
        x.first = k * 131;
        double t0 = fl_now();
        HcclResult rc = run_op(&x, kind, FL_BIG_BYTES / sizeof(float), &cmp);
        int exact = rc == HCCL_SUCCESS && memcmp(x.o, x.want, cmp * sizeof(float)) == 0;
        record(lg, kind, rc, exact, t0);
        failed += rc != HCCL_SUCCESS;
        wrong += rc == HCCL_SUCCESS && !exact;
    }
    loop_end(sh, lg, failed);
    free(x.s);
    free(x.o);
    free(x.want);
    return wrong > 0;
}

int fl_rank_p2p(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    return two_ops(comm, r, n, arg, K_SENDRECV, UINT32_MAX);
}

int fl_rank_held(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    return two_ops(comm, r, n, arg, K_AR, n - 1);
}

fl_shared_t *fl_shared_new(uint32_t iters, uint32_t max_fail, double run_s)
{
    fl_shared_t *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    if (sh == MAP_FAILED)
        return NULL;
    sh->iters = iters;
    sh->max_fail = max_fail;
    sh->run_s = run_s;
    return sh;
}

void fl_shared_free(fl_shared_t *sh)
{
    if (sh != NULL)
        munmap(sh, sizeof(*sh));
}

int fl_wait_ops(const fl_shared_t *sh, uint32_t n, uint32_t ops, double timeout_s)
{
    double until = fl_now() + timeout_s;

    for (;;) {
        uint32_t ready = 0;
        for (uint32_t r = 0; r < n; r++)
            ready += __atomic_load_n(&sh->logs[r].nrec, __ATOMIC_ACQUIRE) >= ops ||
                     __atomic_load_n(&sh->logs[r].state, __ATOMIC_ACQUIRE) == 2;
        if (ready == n)
            return 0;
        if (fl_now() > until)
            return -1;
        usleep(5000);
    }
}

static void count_rc(fl_sum_t *s, int32_t rc)
{
    for (int i = 0; i < 4; i++)
        if (s->rc_n[i] == 0 || s->rcs[i] == rc) {
            s->rcs[i] = rc;
            s->rc_n[i]++;
            return;
        }
}

void fl_summarize(const fl_shared_t *sh, uint32_t r, double since, fl_sum_t *s)
{
    const fl_log_t *lg = &sh->logs[r];
    uint32_t nrec = __atomic_load_n(&lg->nrec, __ATOMIC_ACQUIRE);
    double prev = nrec > 0 ? lg->rec[0].t0 : 0;

    memset(s, 0, sizeof(*s));
    s->ended = __atomic_load_n(&lg->state, __ATOMIC_ACQUIRE) == 2;
    for (uint32_t k = 0; k < nrec; k++) {
        const fl_rec_t *e = &lg->rec[k];
        double from = prev > since ? prev : since;
        if (e->t1 > from && e->t1 - from > s->max_stall)
            s->max_stall = e->t1 - from;
        prev = e->t1;
        if (e->rc == HCCL_SUCCESS) {
            s->ok++;
            s->wrong += !e->exact;
            s->last_ok = e->t1;
            continue;
        }
        if (s->failed++ == 0) {
            s->first_rc = e->rc;
            s->first_index = e->index;
            s->first_kind = e->kind;
            s->first_fail = e->t1;
        }
        count_rc(s, e->rc);
    }
}
