/*
 * Message tags on data connections between daemons: the one place that says how they are laid
 * out. A connection may carry several comms at once (the children of HcclCommSplit share their
 * parent's, see link.c), and the transport matches a message to the oldest receive of
 * its tag, so no two comms, and no two kinds of traffic of one comm, may ever use one tag.
 *
 *   63..62  class: 0 collective, 1 link probe, 2 send/recv, 3 abort notice
 *   61..32  the comm: 30 bits of its job id, the same on every daemon of the comm
 *   31..0   collective: bits 31..8 its sequence number (low 24 bits; one tag per op, and
 *                       pieces of one op keep their order on their tag), bits 7..0 0 for the
 *                       op check (exec/l1.h), else a digest of the op (1..255) for its data:
 *                       nodes that run different ops under one sequence number thus exchange
 *                       no data (their tags differ), and the check, whose tag they share,
 *                       tells them why
 *           link probe: the exchange (probe.c)
 *           send/recv:  sender rank << 16 | receiver rank (comm ranks, below 65536)
 *           abort notice: 0 (abort.c); a restart's drain: 1 (drain.c)
 *
 * All ones (class 3 with low bits not 0) is the transport's own: a striped connection's hello
 * (transport/tp_stripe.c).
 *
 * Job ids are BLAKE2b outputs or random bytes, so two comms on one connection get the same 30
 * bits with a probability of about 2^-30 per pair; a child that would share a connection with
 * a comm of the same bits is refused at creation rather than allowed to cross (link.c).
 */
#ifndef HCCLD_SPAN_TAG_H
#define HCCLD_SPAN_TAG_H

#include <stdint.h>
#include <string.h>

enum { TAG_COLL = 0, TAG_PROBE = 1, TAG_P2P = 2, TAG_ABORT = 3 };

#define TAG_COMM_MASK 0x3fffffffu
#define TAG_RANK_MAX 65536u

/* The comm's discriminator: the first 4 bytes of its job id, as 30 bits. */
static inline uint32_t tag_comm(const uint8_t *job_id)
{
    uint32_t t;

    memcpy(&t, job_id, sizeof(t));
    return t & TAG_COMM_MASK;
}

static inline uint64_t tag_make(unsigned cls, uint32_t comm, uint32_t low)
{
    return (uint64_t)cls << 62 | (uint64_t)(comm & TAG_COMM_MASK) << 32 | low;
}

static inline uint64_t tag_coll(uint32_t comm, uint64_t seq, uint8_t digest)
{
    return tag_make(TAG_COLL, comm, (uint32_t)seq << 8 | digest);
}

static inline uint64_t tag_probe(uint32_t comm, uint32_t exchange)
{
    return tag_make(TAG_PROBE, comm, exchange);
}

static inline uint64_t tag_p2p(uint32_t comm, uint32_t src, uint32_t dst)
{
    return tag_make(TAG_P2P, comm, src << 16 | (dst & 0xffffu));
}

#endif
