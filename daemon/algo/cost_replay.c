/*
 * The timed replay behind algo_cost: every node's real schedule runs in virtual time. A node
 * enters a round at time T; a send of b bytes is on the wire until T + o + beta * b (the k-th
 * send of the round waits k * o for the processor, o = overhead_us, and sends to one peer
 * queue on their link) and arrives
 * at T + alpha + beta * b (with shared_nic, the sends of one round queue behind each other,
 * and the round lasts at least as long as all it receives takes to cross the link); a
 * receive completes when its data has arrived and the node is in that round, plus o; a round
 * lasts at least o per message it sends or receives; a local REDUCE takes gamma * b. The round
 * ends when its last step does, plus gamma * b for each b bytes it received to reduce (the
 * executor, exec/l1.c, applies those one after another once the transfers are done). Sends never
 * wait for receivers, so the replay only waits for data: it sweeps the nodes, moving each through
 * as many rounds as the data sent so far allows, until all are done. Where daemons outnumber
 * the cores of their host (host_load > 1) the result is at least host_load times a node's mean
 * processor work: the work bound of a schedule on too few processors, next to the span the
 * replay computes. A node's work is o per message sent or received, gamma per byte reduced,
 * and beta per byte sent or received: daemons that share a host talk through its kernel
 * (loopback, veth), where moving a byte is a copy on each side, not time on a wire.
 */
#include <errno.h>
#include <stdlib.h>

#include "algo/algo.h"
#include "algo/cost.h"

#define ELEM_BYTES 4

typedef struct fifo {
    double *at; /* arrival times of sends not yet received, oldest at head */
    uint32_t head, len, cap;
    double free; /* when this pair's link takes the next send: sends to one peer queue */
} fifo_t;

typedef struct rnode {
    sched_t s;
    uint8_t *taken; /* per step: a receive that has its data */
    uint32_t round;
    double t;      /* when the current round started */
    double end;    /* when the steps completed so far complete */
    double wire;   /* when the link is free for the round's next send (shared_nic) */
    double in;     /* bytes received in this round */
    double red;    /* time the round's received reductions take after its transfers */
    uint32_t msgs; /* messages sent and received in this round */
    double work;   /* processor time over all rounds: o per message, gamma per byte reduced */
} rnode_t;

typedef struct replay {
    const link_cost_t *lc;
    uint32_t n;
    rnode_t *nodes;
    fifo_t *chan; /* n * n, indexed src * n + dst */
    int err;
} replay_t;

static void fifo_push(replay_t *rp, fifo_t *f, double at)
{
    if (f->head + f->len == f->cap) {
        uint32_t cap = f->cap ? 2 * f->cap : 4;
        double *na = realloc(f->at, cap * sizeof(double));
        if (na == NULL) {
            rp->err = -ENOMEM;
            return;
        }
        f->at = na;
        f->cap = cap;
    }
    f->at[f->head + f->len++] = at;
}

static double bytes_of(const step_t *st)
{
    return (double)st->len * ELEM_BYTES;
}

static void later(double *t, double v)
{
    if (v > *t)
        *t = v;
}

/* Sends and local steps of the round just entered. */
static void post(replay_t *rp, uint32_t i)
{
    rnode_t *nd = &rp->nodes[i];
    const link_cost_t *lc = rp->lc;

    for (uint32_t k = nd->s.round_start[nd->round]; k < nd->s.round_start[nd->round + 1]; k++) {
        const step_t *st = &nd->s.steps[k];
        double b = bytes_of(st), start, wire;

        if (st->op == STEP_REDUCE) {
            later(&nd->end, nd->t + lc->gamma_us_per_byte * b);
            nd->work += lc->gamma_us_per_byte * b;
        } else if (st->op == STEP_SEND) {
            nd->work += lc->overhead_us + lc->beta_us_per_byte * b;
            /* Sends leave one after another as the processor gets to them. */
            fifo_t *f = &rp->chan[(size_t)i * rp->n + st->peer];
            start = nd->t + lc->overhead_us * ++nd->msgs;
            if (lc->shared_nic)
                later(&start, nd->wire);
            later(&start, f->free);
            wire = start + lc->beta_us_per_byte * b;
            nd->wire = wire;
            f->free = wire;
            later(&nd->end, wire);
            fifo_push(rp, f, wire + lc->alpha_us);
        }
    }
}

/* Takes the receives of the round whose data was sent; returns how many still wait. Taking
 * them in step order keeps the pairing of each (src, dst) pair in order. */
static uint32_t take(replay_t *rp, uint32_t i)
{
    rnode_t *nd = &rp->nodes[i];
    uint32_t left = 0;

    for (uint32_t k = nd->s.round_start[nd->round]; k < nd->s.round_start[nd->round + 1]; k++) {
        const step_t *st = &nd->s.steps[k];
        fifo_t *f = &rp->chan[(size_t)st->peer * rp->n + i];
        double at;

        if ((st->op != STEP_RECV && st->op != STEP_RECV_REDUCE) || nd->taken[k])
            continue;
        if (f->len == 0) {
            left++;
            continue;
        }
        at = f->at[f->head++];
        f->len--;
        nd->taken[k] = 1;
        nd->in += bytes_of(st);
        nd->msgs++;
        later(&nd->end, (at > nd->t ? at : nd->t) + rp->lc->overhead_us);
        nd->work += rp->lc->overhead_us + rp->lc->beta_us_per_byte * bytes_of(st);
        if (st->op == STEP_RECV_REDUCE) {
            nd->red += rp->lc->gamma_us_per_byte * bytes_of(st);
            nd->work += rp->lc->gamma_us_per_byte * bytes_of(st);
        }
    }
    return left;
}

static void enter(replay_t *rp, uint32_t i, double t)
{
    rnode_t *nd = &rp->nodes[i];

    nd->t = nd->end = nd->wire = t;
    nd->in = nd->red = 0;
    nd->msgs = 0;
    if (nd->round < nd->s.nrounds)
        post(rp, i);
}

static void finish_round(replay_t *rp, uint32_t i)
{
    rnode_t *nd = &rp->nodes[i];
    double t = nd->end + nd->red;

    /* The data a round receives also crosses the node's one link, one after the other, and
     * the processor handles the round's messages one at a time. */
    if (rp->lc->shared_nic)
        later(&t, nd->t + rp->lc->beta_us_per_byte * nd->in);
    later(&t, nd->t + rp->lc->overhead_us * nd->msgs);
    nd->round++;
    enter(rp, i, t);
}

static void run(replay_t *rp)
{
    int moved = 1;

    while (moved && rp->err == 0) {
        moved = 0;
        for (uint32_t i = 0; i < rp->n; i++) {
            rnode_t *nd = &rp->nodes[i];
            while (nd->round < nd->s.nrounds && rp->err == 0 && take(rp, i) == 0) {
                finish_round(rp, i);
                moved = 1;
            }
        }
    }
}

static int replay_init(replay_t *rp, int algo, int kind, uint64_t count)
{
    rp->nodes = calloc(rp->n, sizeof(*rp->nodes));
    rp->chan = calloc((size_t)rp->n * rp->n, sizeof(*rp->chan));
    if (rp->nodes == NULL || rp->chan == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < rp->n; i++) {
        rnode_t *nd = &rp->nodes[i];
        int rc = algo_build(algo, kind, rp->n, i, 0, count, &nd->s);
        if (rc != 0)
            return rc;
        nd->taken = calloc(nd->s.nsteps + 1, 1);
        if (nd->taken == NULL)
            return -ENOMEM;
    }
    return 0;
}

static void replay_free(replay_t *rp)
{
    for (uint32_t i = 0; rp->nodes != NULL && i < rp->n; i++) {
        sched_free(&rp->nodes[i].s);
        free(rp->nodes[i].taken);
    }
    for (size_t c = 0; rp->chan != NULL && c < (size_t)rp->n * rp->n; c++)
        free(rp->chan[c].at);
    free(rp->nodes);
    free(rp->chan);
}

double algo_cost_replay(int algo, int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc)
{
    replay_t rp = {.lc = lc, .n = nnodes};
    double worst = -1;

    if (!algo_serves(algo, kind) || nnodes == 0 || lc == NULL)
        return -1;
    if (replay_init(&rp, algo, kind, (bytes + ELEM_BYTES - 1) / ELEM_BYTES) == 0) {
        for (uint32_t i = 0; i < nnodes; i++)
            enter(&rp, i, 0);
        run(&rp);
        double work = 0;
        worst = rp.err == 0 ? 0 : -1;
        for (uint32_t i = 0; i < nnodes && worst >= 0; i++) {
            if (rp.nodes[i].round < rp.nodes[i].s.nrounds)
                worst = -1;
            else
                later(&worst, rp.nodes[i].end);
            work += rp.nodes[i].work;
        }
        if (worst >= 0 && lc->host_load > 1)
            later(&worst, lc->host_load * work / nnodes);
    }
    replay_free(&rp);
    return worst;
}
