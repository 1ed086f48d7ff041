/*
 * The memory a client shares with its daemon: a control memfd holding a header, a submission
 * ring (client -> daemon) and a completion ring (daemon -> client), and a separate arena memfd
 * for data. Only the arena is ever shown to the client's peers (ranks of the same tenant that
 * share level-0 work); the rings stay between the client and the daemon.
 * The daemon treats everything in here as hostile: it keeps its own copy of the layout and of
 * its ring indices, copies a descriptor out before it validates it, and never trusts an offset.
 */
#ifndef HCCLD_COMMON_SHM_H
#define HCCLD_COMMON_SHM_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_MAGIC 0x48434c44u /* "HCLD" */
#define SHM_CACHELINE 64
#define SHM_PAGE 4096ull

/* One collective (or one chunk of it), or one point-to-point transfer. */
enum desc_kind {
    DESC_ALLREDUCE = 1,
    DESC_BROADCAST,
    DESC_ALLGATHER,
    DESC_REDUCE_SCATTER,
    DESC_ALLTOALL,
    DESC_REDUCE,
    DESC_SCATTER,
    DESC_BARRIER,
    DESC_SEND,
    DESC_RECV,
    DESC_KIND_MAX
};

/*
 * A descriptor names per-rank blocks: block r of the send side lies at send_off + r*send_stride
 * in the arena (and likewise for recv); `count` is the number of elements in one block. Which
 * blocks exist depends on the kind (allgather has one send block and nranks recv blocks, ...),
 * so zero-copy and staged ranks can post the same piece of an operation with different strides.
 */
typedef struct desc {
    uint64_t tag;     /* the client's, echoed in the completion */
    uint32_t comm_id; /* from CommInitResp */
    uint8_t kind;     /* enum desc_kind */
    uint8_t dtype;    /* HcclDataType */
    uint8_t redop;    /* HcclReduceOp */
    uint8_t flags;
    uint64_t seq; /* collectives: per comm; send/recv: per (comm, peer, direction) */
    uint64_t count;
    uint32_t root; /* root rank, or peer rank for send/recv */
    uint32_t rank; /* the poster's rank in the comm (a process may hold several) */
    uint64_t send_off;
    uint64_t send_stride;
    uint64_t recv_off;
    uint64_t recv_stride;
    uint64_t total; /* elements per block of the whole operation, on every piece */
} desc_t;

#define DESC_F_INLINE 1 /* coop: the send blocks travel in the control block */
#define DESC_F_ZC_OUT 2 /* coop: the receive blocks lie in the poster's arena */
#define DESC_F_MORE 4   /* more pieces of the same operation follow (QoS: still under way) */
/* Its receive blocks overlap its send blocks in the arena (in place, zero copy): it cannot run
 * twice (a piece posted again after a daemon restart, engine_resume_t). */
#define DESC_F_OVERWRITES 8
/* Bits 4-7: 1 + the op's own level-1 algorithm (enum algo_id), chosen by its call; 0: the comm's
 * choice. Every rank of the op must give the same (desc_disagree). */
#define DESC_F_ALGO_SHIFT 4
#define DESC_F_ALGO_MASK 0xf0

/* The op's own level-1 algorithm, or -1 for the comm's choice. */
static inline int desc_algo(const desc_t *d)
{
    return ((d->flags & DESC_F_ALGO_MASK) >> DESC_F_ALGO_SHIFT) - 1;
}

static inline void desc_set_algo(desc_t *d, int algo)
{
    d->flags = (uint8_t)((d->flags & ~DESC_F_ALGO_MASK) |
                         (((unsigned)(algo + 1) << DESC_F_ALGO_SHIFT) & DESC_F_ALGO_MASK));
}

/* A completion, and how the daemon spent the descriptor's time (for HCCL_PROF_ENABLE). */
typedef struct cqe {
    uint64_t tag;
    int32_t status;   /* HcclResult */
    uint32_t culprit; /* HCCL_E_REMOTE: 1 + the comm rank that died or left, 0 if unknown */
    int8_t algo;      /* level-1 algorithm (daemon/algo/algo.h ids), -1: none (inside the node) */
    uint8_t algo_src; /* enum algo_src (algo_id.h): what chose it */
    uint8_t pad[6];
    uint64_t queued_ns;   /* from intake until its op started: peers posting, earlier ops */
    uint64_t qos_wait_ns; /* part of l1_ns: rounds held back by QoS (higher class, cap) */
    uint64_t l0_ns;       /* executing inside the node */
    uint64_t l1_ns;       /* executing between daemons */
} cqe_t;

/*
 * A single-producer single-consumer ring of fixed-size entries. Indices run freely and wrap at
 * 2^32; entries is a power of two. `waiting` is set by a consumer that is about to sleep on a
 * futex on `tail`; the producer wakes it after publishing.
 */
typedef struct ring_hdr {
    alignas(SHM_CACHELINE) uint32_t head;    /* written by the consumer */
    alignas(SHM_CACHELINE) uint32_t tail;    /* written by the producer */
    alignas(SHM_CACHELINE) uint32_t waiting; /* consumer sleeps on tail */
    uint32_t entries;
} ring_hdr_t;

typedef struct shm_hdr {
    uint32_t magic;
    uint32_t version;
    uint64_t seg_bytes;
    /* Set by the daemon before it sleeps: a client that publishes work then writes the doorbell
     * eventfd. Cleared when the daemon wakes. */
    alignas(SHM_CACHELINE) uint32_t daemon_sleeping;
    /* Set by a daemon that stopped (SIGTERM) after its data path did: every piece it took either
     * completed or never began, so a restarted daemon may run every other one again (rejoin).
     * Cleared by the daemon that takes the segment over. */
    uint32_t halted_cleanly;
} shm_hdr_t;

typedef struct shm_layout {
    uint64_t seg_bytes;
    uint64_t sq_off;
    uint32_t sq_entries;
    uint64_t cq_off;
    uint32_t cq_entries;
    uint64_t arena_bytes; /* the arena memfd, mapped on its own */
} shm_layout_t;

/* Durations of ops that the ranks ran among themselves, for the daemon's histogram: a count per
 * power of 4 us (coop_ctl_t.lat4, shm_lane_slot_t.lat4). */
#define SHM_LAT_BUCKETS 12u /* under 1, 4, 16, ... 4^10 us (about 1 s), then the rest */

static inline unsigned shm_lat_bucket(uint64_t us)
{
    unsigned j = 0;

    while (j + 1 < SHM_LAT_BUCKETS && us >= (1ull << (2 * j)))
        j++;
    return j;
}

/*
 * Lane ops (libclient/lane.h): collectives a client's ranks ran among themselves across daemons,
 * which no daemon saw. Each rank with lanes counts its own in a slot of its segment's first page,
 * after the header, where no daemon keeps anything (an older library leaves zeros: none); its
 * daemon reads them for its figures (daemon/server/lane_count.c), trusting them no more than a
 * control block's counters. comm_id 0: a free slot.
 */
#define SHM_LANE_OFF 1024u
#define SHM_LANE_SLOTS 24u
typedef struct shm_lane_slot {
    alignas(SHM_CACHELINE) uint32_t comm_id; /* the daemon's id of the comm (written last) */
    uint32_t rank;
    uint64_t ops;                   /* lane collectives done */
    uint64_t lat_sum_us;            /* their durations, from the call to the result */
    uint32_t lat4[SHM_LAT_BUCKETS]; /* a count per power of 4 us (they wrap at 2^32) */
} shm_lane_slot_t;

static inline shm_lane_slot_t *shm_lane_slots(void *seg)
{
    return (shm_lane_slot_t *)((char *)seg + SHM_LANE_OFF);
}

/* Computes a layout for an arena of arena_bytes (rounded up to pages). */
void shm_layout_make(uint64_t arena_bytes, uint32_t sq_entries, uint32_t cq_entries,
                     shm_layout_t *layout_p);

_Static_assert(sizeof(shm_hdr_t) <= SHM_LANE_OFF &&
                   SHM_LANE_OFF + SHM_LANE_SLOTS * sizeof(shm_lane_slot_t) <= SHM_PAGE,
               "the lane slots lie between the header and the first ring (shm_layout_make)");

static inline ring_hdr_t *shm_ring(void *base, uint64_t off)
{
    return (ring_hdr_t *)((char *)base + off);
}

static inline void *shm_ring_slots(ring_hdr_t *r)
{
    return (char *)r + sizeof(ring_hdr_t);
}

/* A sealed memfd of bytes (its holder can neither shrink it nor grow it), mapped read-write at
 * *base_p; name shows in /proc. Returns the fd, or -errno (logged). */
int shm_memfd_map(const char *name, uint64_t bytes, void **base_p);

#endif /* HCCLD_COMMON_SHM_H */
