/* Small allreduces, allgathers and barriers over a comm's lanes, and the headers of the collectives
 * that go through the daemon instead (lane.h). */
#include "lane.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "desc_check.h"
#include "dtype.h"
#include "futex.h"
#include "log.h"
#include "prof.h"
#include "reduce.h"

#define SLEEP_SLICE_MS 100 /* a waiting rank looks at HcclCommAbort at least this often */

/* The outcome of a lane op: done (rc), or every rank takes it to the daemon. */
enum { LANE_DONE, LANE_FALL_BACK };

static int lanes_state(const hc_lanes_t *ln)
{
    return __atomic_load_n(&ln->state, __ATOMIC_ACQUIRE);
}

static void lanes_set_state(hc_lanes_t *ln, int state, HcclResult broken)
{
    ln->broken = broken;
    __atomic_store_n(&ln->state, state, __ATOMIC_RELEASE);
}

/* The bytes an op moves over the lanes: the result (every rank's block, for an allgather). */
static size_t lanes_bytes(const hc_lanes_t *ln, const hc_op_t *op)
{
    size_t block = op->kind == DESC_BARRIER ? 0 : op->count * dtype_size(op->dtype);

    return op->kind == DESC_ALLGATHER ? block * ln->plan.n : block;
}

static int lanes_take(const hc_lanes_t *ln, const hc_op_t *op)
{
    if (op->own_algo != 0) /* an algorithm between the daemons: the daemon path */
        return 0;
    if (op->kind == DESC_BARRIER)
        return 1;
    return (op->kind == DESC_ALLREDUCE || op->kind == DESC_ALLGATHER) &&
           lanes_bytes(ln, op) <= ln->max;
}

static lane_hdr_t op_hdr(const hc_lanes_t *ln, const hc_op_t *op, uint8_t flags)
{
    int barrier = op->kind == DESC_BARRIER;

    return (lane_hdr_t){.seq = ln->seq,
                        .count = barrier ? 0 : op->count,
                        .kind = op->kind,
                        .dtype = barrier ? 0 : op->dtype,
                        .redop = op->kind == DESC_ALLREDUCE ? op->redop : 0,
                        .flags = flags};
}

/* The lanes of this rank: fold partner first, then one per level. */
static int lanes_used(hc_lanes_t *ln, hc_lane_t **v)
{
    int n = 0;

    for (uint32_t i = 0; i <= HC_LANE_LEVELS_MAX; i++)
        if (ln->lane[i].fd >= 0)
            v[n++] = &ln->lane[i];
    return n;
}

/* Sends h to every partner without waiting on any (a full socket is a dead or stuck partner,
 * which the daemon path will find; the keeper sends the rest, if there is one). */
static void lanes_tell(hc_lanes_t *ln, const lane_hdr_t *h)
{
    hc_lane_t *v[HC_LANE_LEVELS_MAX + 1];
    int n = lanes_used(ln, v), wake = 0;

    for (int i = 0; i < n; i++) {
        uint64_t k;
        uint32_t gen;
        if (lane_commit(v[i], h, sizeof(*h), NULL, 0, &k) == 0 && lane_pump(v[i], k, &gen) != 1)
            wake = 1;
    }
    if (wake)
        lane_keeper_wake(ln);
}

/* One wait for the socket: spins (yielding the core) until spin_until, then sleeps in poll for
 * at most a slice. 0, or -ETIMEDOUT / -ECANCELED (HcclCommAbort). */
static int lane_wait(hc_comm_t *comm, struct pollfd *pfd, uint64_t spin_until, uint64_t deadline)
{
    uint64_t now = now_ns();

    if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
        return -ECANCELED;
    if (now >= deadline)
        return -ETIMEDOUT;
    if (now < spin_until) {
        sched_yield();
        return 0;
    }
    uint64_t ms = (deadline - now) / 1000000 + 1;
    if (poll(pfd, 1, ms < SLEEP_SLICE_MS ? (int)ms : SLEEP_SLICE_MS) < 0 && errno != EINTR)
        return -errno;
    return 0;
}

/*
 * Sends the message (h, data of len bytes; if do_send) while it receives the partner's message
 * of rx_len bytes into ln->rx (if do_recv), so that neither side blocks on a full socket buffer.
 * The partner's header is checked as soon as it is whole. A connection that fails meanwhile is
 * waited for while the keeper puts it back (lane_keeper.c). Returns 0; 1 when the header differs
 * from want (ln->rx holds it; nothing more is read); or a negative errno (-EPIPE: the partner
 * closed its lane, or it failed and stays down).
 */
static int lane_exchange(hc_comm_t *comm, hc_lane_t *L, const lane_hdr_t *h, const void *data,
                         size_t len, const lane_hdr_t *want, size_t rx_len, int do_send,
                         int do_recv, uint64_t deadline)
{
    uint8_t *rx = comm->lanes->rx;
    uint64_t spin_until = now_ns() + comm->c->spin_ns, mine = 0;
    int sent = !do_send, whole = !do_recv, rc;
    size_t got = 0;

    if (__atomic_load_n(&L->bye, __ATOMIC_ACQUIRE))
        return -EPIPE; /* the partner closed the comm */
    if (do_send && (rc = lane_commit(L, h, sizeof(*h), data, len, &mine)) != 0)
        return rc;
    while (!sent || !whole) {
        int moved = 0;
        uint32_t gen;
        if (!sent) {
            if ((rc = lane_pump(L, mine, &gen)) < 0) {
                if ((rc = lane_wait_repair(comm, L, gen, rc, deadline)) != 0)
                    return rc;
                continue;
            }
            sent = moved = rc;
        }
        if (!whole) {
            size_t before = got;
            if ((rc = lane_recv_some(L, rx, rx_len, &got, &gen)) < 0) {
                rc = lane_wait_repair(comm, L, gen, rc == -EINPROGRESS ? -EPIPE : rc, deadline);
                if (rc != 0)
                    return rc;
                continue;
            }
            if (got >= sizeof(lane_hdr_t) && memcmp(rx, want, sizeof(*want)) != 0)
                return 1;
            whole = rc;
            moved |= rc || got != before;
        }
        if (moved || (sent && whole))
            continue;
        struct pollfd pfd = {.fd = L->fd,
                             .events = (short)((sent ? 0 : POLLOUT) | (whole ? 0 : POLLIN))};
        if ((rc = lane_wait(comm, &pfd, spin_until, deadline)) != 0)
            return rc;
    }
    return 0;
}

/* How a step combines what it receives into acc. */
enum { LANE_TAKE, LANE_REDUCE, LANE_MERGE };

/* ORs src into dst: an allgather's blocks that only one side holds (the other's are zero). */
static void merge_bytes(uint8_t *dst, const uint8_t *src, size_t bytes)
{
    size_t i = 0;

    for (; i + 8 <= bytes; i += 8) {
        uint64_t a, b;
        memcpy(&a, dst + i, 8);
        memcpy(&b, src + i, 8);
        a |= b;
        memcpy(dst + i, &a, 8);
    }
    for (; i < bytes; i++)
        dst[i] |= src[i];
}

/* One step with the partner on fd: send acc (if do_send), receive its data (if do_recv) and
 * combine into acc as `how` says: take it, reduce as (lower rank's) op (higher rank's), or
 * merge. 0, 1 (its header differs from h) or a negative errno. */
static int lane_step(hc_comm_t *comm, hc_lane_t *L, const lane_hdr_t *h, size_t bytes, int do_send,
                     int do_recv, int me_low, int how, uint64_t deadline)
{
    hc_lanes_t *ln = comm->lanes;
    int rc = lane_exchange(comm, L, h, ln->acc, bytes, h, sizeof(*h) + bytes, do_send, do_recv,
                           deadline);

    if (rc != 0 || !do_recv || bytes == 0)
        return rc;
    const uint8_t *theirs = ln->rx + sizeof(*h);
    if (how == LANE_TAKE) {
        memcpy(ln->acc, theirs, bytes);
    } else if (how == LANE_MERGE) {
        merge_bytes(ln->acc, theirs, bytes);
    } else {
        const void *srcs[2] = {me_low ? ln->acc : theirs, me_low ? theirs : ln->acc};
        reduce_n((HcclDataType)h->dtype, (HcclReduceOp)h->redop, ln->acc, srcs, 2,
                 (size_t)h->count);
    }
    return 0;
}

/* The schedule of lane.h over acc (bytes of it; 0 for a barrier); *partner_p: the rank of the
 * step that ended it (the one it waited for, on a timeout). An allgather runs the same steps on
 * the whole result, each rank's block in place and the others zero, merging: the partners of a
 * step never both hold a block, so OR-ing their buffers gathers. */
static int lanes_allreduce(hc_comm_t *comm, const lane_hdr_t *h, size_t bytes, uint64_t deadline,
                           uint32_t *partner_p)
{
    hc_lanes_t *ln = comm->lanes;
    const lane_plan_t *p = &ln->plan;
    int how = h->kind == DESC_ALLREDUCE   ? LANE_REDUCE
              : h->kind == DESC_ALLGATHER ? LANE_MERGE
                                          : LANE_TAKE;
    int rc = 0;

    *partner_p = p->fold;
    if (p->fold != UINT32_MAX && p->extra) /* give ours, take the result */
        return lane_step(comm, LANE_FOLD(ln), h, bytes, 1, 1, 1, LANE_TAKE, deadline);
    if (p->fold != UINT32_MAX)
        rc = lane_step(comm, LANE_FOLD(ln), h, bytes, 0, 1, 0, how, deadline);
    for (uint32_t l = 0; rc == 0 && l < p->levels; l++) {
        *partner_p = lane_plan_partner(p, l);
        rc = lane_step(comm, LANE_LEVEL(ln, l), h, bytes, 1, 1, !(p->vme & (1u << l)), how,
                       deadline);
    }
    if (rc == 0 && p->fold != UINT32_MAX) {
        *partner_p = p->fold;
        rc = lane_step(comm, LANE_FOLD(ln), h, bytes, 1, 0, 0, LANE_TAKE, deadline);
    }
    return rc;
}

/* Whether a partner has already said that it gave up on or fell back from collective seq, though
 * its data reached us first (HcclCommAbort on a rank that had sent it): then neither does this
 * rank take the result. */
static int lanes_given_up(hc_lanes_t *ln, uint64_t seq)
{
    hc_lane_t *v[HC_LANE_LEVELS_MAX + 1];
    int n = lanes_used(ln, v);
    lane_hdr_t h;

    for (int i = 0; i < n; i++)
        if (lane_peek(v[i], &h, sizeof(h)) && h.seq == seq &&
            (h.flags & (LANE_F_ABORT | LANE_F_FALLBACK)))
            return 1;
    return 0;
}

/* Runs op over the lanes: LANE_DONE with *rc_p, or LANE_FALL_BACK (the partners were told). */
static int lanes_run(hc_comm_t *comm, const hc_op_t *op, HcclResult *rc_p)
{
    hc_lanes_t *ln = comm->lanes;
    size_t bytes = lanes_bytes(ln, op);
    size_t block = op->kind == DESC_ALLGATHER ? bytes / ln->plan.n : bytes;
    uint8_t *mine = ln->acc + (op->kind == DESC_ALLGATHER ? ln->plan.me * block : 0);
    lane_hdr_t h = op_hdr(ln, op, 0);

    uint64_t t0 = now_ns();

    hc_prof_direct();
    if (bytes > block)
        memset(ln->acc, 0, bytes);
    if (block > 0)
        memcpy(mine, op->send, block);
    uint32_t partner;
    int rc = lanes_allreduce(comm, &h, bytes, hc_comm_deadline(comm), &partner);
    if (rc == 0 && lanes_given_up(ln, h.seq))
        rc = 1;
    if (rc == 0) {
        for (size_t b = 0; block > 0 && b < bytes / block; b++)
            memcpy(op->recv + b * op->recv_stride, ln->acc + b * block, block);
        lane_count_op(ln, now_ns() - t0);
        *rc_p = HCCL_SUCCESS;
        return LANE_DONE;
    }
    if (rc == -ETIMEDOUT || rc == -ECANCELED) {
        *rc_p = rc == -ETIMEDOUT ? HCCL_E_TIMEOUT : HCCL_E_SUSPENDING;
        lane_hdr_t a = op_hdr(ln, op, LANE_F_ABORT);
        a.count = (uint64_t)*rc_p;
        lanes_tell(ln, &a);
        lanes_set_state(ln, HC_LANES_BROKEN, *rc_p);
        if (rc == -ETIMEDOUT)
            ERR("COLL",
                "rank %u: %s of %zu bytes over lanes failed: %s, waiting for rank %u (did it "
                "post the same op?)",
                comm->rank, desc_kind_name(op->kind), bytes, HcclGetErrorString(*rc_p), partner);
        else
            ERR("COLL", "rank %u: %s of %zu bytes over lanes failed: %s", comm->rank,
                desc_kind_name(op->kind), bytes, HcclGetErrorString(*rc_p));
        return LANE_DONE;
    }
    /* Another op or size, a partner that fell back or went through the daemon, or one gone:
     * the daemon decides, for every rank alike. */
    lane_hdr_t f = op_hdr(ln, op, LANE_F_FALLBACK);
    lanes_tell(ln, &f);
    WARN("COLL", "rank %u: %s #%llu: %s; it goes through the daemon, and so does every later op",
         comm->rank, desc_kind_name(op->kind), (unsigned long long)h.seq,
         rc == 1 ? "a partner's differs or fell back" : "a partner's lane failed");
    return LANE_FALL_BACK;
}

void hc_lanes_retire(hc_comm_t *comm, HcclResult status)
{
    hc_lanes_t *ln = comm->lanes;
    lane_hdr_t a = {.seq = ln->seq, .count = (uint64_t)status, .flags = LANE_F_ABORT};

    pthread_mutex_lock(&ln->lock);
    lanes_tell(ln, &a);
    lanes_set_state(ln, HC_LANES_BROKEN, status);
    pthread_mutex_unlock(&ln->lock);
}

void hc_lanes_bye(hc_comm_t *comm)
{
    hc_lanes_t *ln = comm->lanes;
    hc_lane_t *v[HC_LANE_LEVELS_MAX + 1];

    if (ln == NULL || !ln->keeper_on)
        return; /* no repairs: nothing to wait for */
    pthread_mutex_lock(&ln->lock);
    if (ln->state != HC_LANES_ON) {
        pthread_mutex_unlock(&ln->lock);
        return;
    }
    /* No op follows; a lane that goes down now is no news (give_up stays quiet). */
    lanes_set_state(ln, HC_LANES_OFF, HCCL_SUCCESS);
    lane_hdr_t bye = {.seq = ln->seq, .flags = LANE_F_BYE};
    uint64_t deadline = now_ns() + (uint64_t)ln->hold_ms * 1000000ull;
    int n = lanes_used(ln, v), wait[HC_LANE_LEVELS_MAX + 1], wake = 0;
    /* Every goodbye first: a partner closing too hears ours while we wait for its. */
    for (int i = 0; i < n; i++) {
        uint64_t k;
        uint32_t gen;
        wait[i] = !__atomic_load_n(&v[i]->bye, __ATOMIC_ACQUIRE) &&
                  lane_commit(v[i], &bye, sizeof(bye), NULL, 0, &k) == 0;
        if (wait[i] && lane_pump(v[i], k, &gen) != 1)
            wake = 1;
    }
    if (wake)
        lane_keeper_wake(ln); /* it sends what the sockets did not take */
    for (int i = 0; i < n; i++) {
        /* The partner's goodbye (0), its answer or another header (1: what it says no longer
         * matters), or its lane ended for good. */
        int rc = wait[i]
                     ? lane_exchange(comm, v[i], NULL, NULL, 0, &bye, sizeof(bye), 0, 1, deadline)
                     : 0;
        if (rc == -ETIMEDOUT)
            INFO("COLL", "rank %u: rank %u did not answer the lanes' goodbye within %u ms",
                 comm->rank, v[i]->peer, ln->hold_ms);
    }
    pthread_mutex_unlock(&ln->lock);
}

int hc_lanes_before(hc_comm_t *comm, const hc_op_t *op, HcclResult *rc_p)
{
    hc_lanes_t *ln = comm->lanes;

    if (lanes_state(ln) == HC_LANES_OFF)
        return 0;
    pthread_mutex_lock(&ln->lock);
    if (ln->state == HC_LANES_BROKEN) {
        *rc_p = ln->broken;
        pthread_mutex_unlock(&ln->lock);
        return 1;
    }
    if (ln->state == HC_LANES_OFF) { /* retired meanwhile */
        pthread_mutex_unlock(&ln->lock);
        return 0;
    }
    if (!lanes_take(ln, op)) {
        lane_hdr_t d = op_hdr(ln, op, LANE_F_DAEMON);
        lanes_tell(ln, &d);
        ln->announced = 1;
        return 0; /* hc_lanes_after unlocks */
    }
    if (lanes_run(comm, op, rc_p) == LANE_DONE) {
        ln->seq++;
        pthread_mutex_unlock(&ln->lock);
        return 1;
    }
    ln->announced = 0;
    return 0;
}

/* Takes every partner's header of the daemon-path collective just done; 0 when each says it
 * ran the same one through the daemon. */
static int lanes_drain(hc_comm_t *comm, const hc_op_t *op)
{
    hc_lanes_t *ln = comm->lanes;
    hc_lane_t *v[HC_LANE_LEVELS_MAX + 1];
    int n = lanes_used(ln, v);
    lane_hdr_t want = op_hdr(ln, op, LANE_F_DAEMON);
    uint64_t deadline = hc_comm_deadline(comm);

    for (int i = 0; i < n; i++)
        if (lane_exchange(comm, v[i], NULL, NULL, 0, &want, sizeof(want), 0, 1, deadline) != 0)
            return -1;
    return 0;
}

void hc_lanes_after(hc_comm_t *comm, const hc_op_t *op, HcclResult rc)
{
    hc_lanes_t *ln = comm->lanes;

    if (lanes_state(ln) == HC_LANES_OFF)
        return;
    if (rc != HCCL_SUCCESS) {
        lanes_set_state(ln, HC_LANES_BROKEN, rc);
    } else if (!ln->announced) {
        lanes_set_state(ln, HC_LANES_OFF, HCCL_SUCCESS); /* a fall back that succeeded */
    } else if (lanes_drain(comm, op) != 0) {
        WARN("COLL",
             "rank %u: a partner did not run collective #%llu through the daemon too; "
             "every later op goes through the daemon",
             comm->rank, (unsigned long long)ln->seq);
        lanes_set_state(ln, HC_LANES_OFF, HCCL_SUCCESS);
    }
    ln->seq++;
    ln->announced = 0;
    pthread_mutex_unlock(&ln->lock);
}
