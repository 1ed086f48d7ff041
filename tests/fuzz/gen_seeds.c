/*
 * Writes the binary seeds of tests/fuzz/corpus (frame, desc, tcp_hs, peer, rdma_wire) with the
 * project's
 * own encoders, so that they stay valid when the formats change: `make fuzz-seeds`. The text
 * seeds (rank tables, configs, HCCL_ALGO strings) are written by hand.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frame.h"
#include "fuzz_common.h"
#include "hccl/hccl.h"
#include "server/peer.h"
#include "shm.h"
#include "transport/rdma_wire.h"
#include "transport/tcp_wire.h"

#define PEER_ROLE_ACCEPT "hccld-accept"
#define PEER_ROLE_CONNECT "hccld-connect"

static const char *out_dir;

/* A seed under construction: its bytes and where they go. */
typedef struct seed {
    uint8_t buf[8192];
    size_t len;
} seed_t;

static void seed_bytes(seed_t *s, const void *p, size_t n)
{
    if (s->len + n > sizeof(s->buf))
        abort();
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static void seed_frame(seed_t *s, const Hccld__Msg *m)
{
    size_t n = frame_encode(m, s->buf + s->len, sizeof(s->buf) - s->len);

    if (n == 0)
        abort();
    s->len += n;
}

static void seed_write(const char *target, const char *name, const seed_t *s)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", out_dir, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
    if ((f = fopen(path, "wb")) == NULL || fwrite(s->buf, 1, s->len, f) != s->len ||
        fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static ProtobufCBinaryData bin(const uint8_t *p, size_t n)
{
    return (ProtobufCBinaryData){.len = n, .data = (uint8_t *)p};
}

static void frame_seeds(void)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Hello hello = HCCLD__HELLO__INIT;
    Hccld__RootInfo info = HCCLD__ROOT_INFO__INIT;
    Hccld__CommInitReq init = HCCLD__COMM_INIT_REQ__INIT;
    Hccld__Membership mem = HCCLD__MEMBERSHIP__INIT;
    Hccld__QosReq qos = HCCLD__QOS_REQ__INIT;
    Hccld__StatusResp st = HCCLD__STATUS_RESP__INIT;
    Hccld__CommStatus cs = HCCLD__COMM_STATUS__INIT, *csp = &cs;
    char *nodes[] = {"10.0.0.1:60000", "10.0.0.2:60000"};
    uint32_t rank_node[] = {0, 0, 1, 1};
    uint64_t lat[] = {0, 3, 17, 2};
    seed_t s = {.len = 0};
    uint8_t chunk = 0, hdr[4] = {0xff, 0xff, 0x01, 0x00}; /* announces 128 KiB: too large */

    hello.version = PROTO_VERSION;
    hello.pid = 4242;
    hello.arena_bytes = 64ull << 20;
    hello.job_name = "bert-large";
    hello.qos_class = "HIGH";
    m.req_id = 1;
    m.body_case = HCCLD__MSG__BODY_HELLO;
    m.hello = &hello;
    seed_bytes(&s, &chunk, 1);
    seed_frame(&s, &m);
    seed_write("frame", "hello", &s);

    info.version = 1;
    info.job_id = bin(fuzz_job, FUZZ_JOB_BYTES);
    info.job_key = bin(fuzz_key, FUZZ_KEY_BYTES);
    info.root_addr = "10.0.0.1:60000";
    info.root_socket = "/run/hccld/hccld.sock";
    init.info = &info;
    init.nranks = 4;
    init.rank = 1;
    init.algo = "allreduce=level0:NA;level1:H-D_R/allgather=level0:NA;level1:ring";
    m.req_id = 2;
    m.body_case = HCCLD__MSG__BODY_COMM_INIT_REQ;
    m.comm_init_req = &init;
    seed_frame(&s, &m);
    s.buf[0] = 7; /* the same two frames, read 7 bytes at a time */
    seed_write("frame", "hello-comminit-split", &s);

    s.len = 0;
    chunk = 3;
    seed_bytes(&s, &chunk, 1);
    mem.nranks = 4;
    mem.n_nodes = 2;
    mem.nodes = nodes;
    mem.n_rank_node = 4;
    mem.rank_node = rank_node;
    mem.n_data_nodes = 2;
    mem.data_nodes = nodes;
    mem.qos_class = "MEDIUM";
    m.body_case = HCCLD__MSG__BODY_MEMBERSHIP;
    m.membership = &mem;
    seed_frame(&s, &m);
    seed_write("frame", "membership", &s);

    s.len = 1;
    qos.op = HCCLD__QOS_REQ__OP__SET;
    qos.cls = "LOW";
    qos.has_max_bw = 1;
    qos.max_bw_bps = 800000000;
    m.body_case = HCCLD__MSG__BODY_QOS_REQ;
    m.qos_req = &qos;
    seed_frame(&s, &m);
    seed_write("frame", "qos-set", &s);

    s.len = 1;
    st.version = "0.1.0";
    st.n_comms = 1;
    st.comms = &csp;
    cs.comm_id = 3;
    cs.level0 = "coop";
    cs.algo = "ring";
    st.n_lat_bucket = 4;
    st.lat_bucket = lat;
    m.body_case = HCCLD__MSG__BODY_STATUS_RESP;
    m.status_resp = &st;
    seed_frame(&s, &m);
    seed_write("frame", "status-resp", &s);

    /* Near misses: an oversized length, and a frame cut short. */
    s.len = 1;
    seed_bytes(&s, hdr, sizeof(hdr));
    seed_write("frame", "oversized", &s);
    s.len = 1;
    seed_frame(&s, &m);
    s.len -= 5;
    seed_write("frame", "truncated", &s);
}

static void desc_seed(const char *name, uint8_t kind, uint8_t dtype, uint64_t count,
                      uint64_t send_off, uint64_t recv_off, uint64_t stride, uint64_t arena)
{
    desc_input_t in;
    seed_t s = {.len = 0};

    memset(&in, 0, sizeof(in));
    in.nranks = 4;
    in.rank = 1;
    in.arena = arena;
    in.a = (desc_t){.tag = 9,
                    .comm_id = 1,
                    .kind = kind,
                    .dtype = dtype,
                    .redop = HCCL_REDUCE_SUM,
                    .seq = 5,
                    .count = count,
                    .root = 0,
                    .rank = 1,
                    .send_off = send_off,
                    .send_stride = stride,
                    .recv_off = recv_off,
                    .recv_stride = stride,
                    .total = count};
    in.b = in.a;
    in.b.rank = 2;
    seed_bytes(&s, &in, sizeof(in));
    seed_write("desc", name, &s);
}

static void desc_seeds(void)
{
    desc_seed("allreduce", DESC_ALLREDUCE, HCCL_DATA_TYPE_FP32, 1024, 0, 4096, 4096, 1 << 20);
    desc_seed("allgather", DESC_ALLGATHER, HCCL_DATA_TYPE_FP16, 256, 0, 512, 512, 1 << 20);
    desc_seed("alltoall", DESC_ALLTOALL, HCCL_DATA_TYPE_INT8, 100, 0, 400, 100, 800);
    desc_seed("scatter-root", DESC_SCATTER, HCCL_DATA_TYPE_INT64, 8, 0, 256, 64, 4096);
    desc_seed("barrier", DESC_BARRIER, 0, 0, 0, 0, 0, 4096);
    desc_seed("send", DESC_SEND, HCCL_DATA_TYPE_BFP16, 2048, 0, 0, 0, 4096);
    /* Near misses: one byte past the arena, overlapping blocks. */
    desc_seed("alltoall-past-end", DESC_ALLTOALL, HCCL_DATA_TYPE_INT8, 100, 0, 401, 100, 800);
    desc_seed("allgather-overlap", DESC_ALLGATHER, HCCL_DATA_TYPE_FP32, 256, 0, 1024, 1020,
              1 << 20);
}

static void hs_record(seed_t *s, const tcp_hs_msg_t *m)
{
    uint8_t rec[TCP_HS_BYTES];

    tcp_hs_encode(m, rec);
    seed_bytes(s, rec, sizeof(rec));
}

static void tcp_hs_seeds(void)
{
    static const uint8_t data[] = "first bytes of the data stream";
    uint8_t nonce_me[FUZZ_NONCE_BYTES], nonce_peer[FUZZ_NONCE_BYTES];
    tcp_hs_msg_t hello = {.type = TCP_HS_HELLO, .node = 3, .conn_id = 1};
    tcp_hs_msg_t confirm = {.type = TCP_HS_CONFIRM};
    tcp_hs_msg_t accept = {.type = TCP_HS_ACCEPT}, refuse = {.type = TCP_HS_REFUSE, .reason = 13};
    seed_t s = {.len = 0};
    uint8_t role = 0;

    /* The side under test draws the first nonce of the fixed stream. */
    fuzz_rng_nonce(0, nonce_me);
    memset(nonce_peer, 0x5a, sizeof(nonce_peer));

    memcpy(hello.job, fuzz_job, AUTH_JOB_BYTES);
    memcpy(hello.nonce, nonce_peer, AUTH_NONCE_BYTES);
    auth_mac(fuzz_key, AUTH_KEY_BYTES, "tp-connect", nonce_me, nonce_peer, confirm.mac);
    seed_bytes(&s, &role, 1);
    hs_record(&s, &hello);
    hs_record(&s, &confirm);
    seed_bytes(&s, data, sizeof(data));
    seed_write("tcp_hs", "accept-ok", &s);
    s.len = 1;
    hs_record(&s, &hello);
    confirm.mac[0] ^= 1;
    hs_record(&s, &confirm);
    seed_write("tcp_hs", "accept-bad-mac", &s);
    s.len = 1;
    hello.job[0] ^= 1;
    hs_record(&s, &hello);
    seed_write("tcp_hs", "accept-unknown-job", &s);

    s.len = 0;
    role = 1;
    memcpy(accept.nonce, nonce_peer, AUTH_NONCE_BYTES);
    auth_mac(fuzz_key, AUTH_KEY_BYTES, "tp-accept", nonce_me, nonce_peer, accept.mac);
    seed_bytes(&s, &role, 1);
    hs_record(&s, &accept);
    seed_bytes(&s, data, sizeof(data));
    seed_write("tcp_hs", "connect-ok", &s);
    s.len = 1;
    hs_record(&s, &refuse);
    seed_write("tcp_hs", "connect-refused", &s);
}

static void peer_seeds(void)
{
    uint8_t nonce_me[FUZZ_NONCE_BYTES], nonce_peer[FUZZ_NONCE_BYTES], mac[AUTH_MAC_BYTES];
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__PeerHello hello = HCCLD__PEER_HELLO__INIT;
    Hccld__PeerProof proof = HCCLD__PEER_PROOF__INIT;
    Hccld__PeerChallenge chal = HCCLD__PEER_CHALLENGE__INIT;
    Hccld__PeerResult res = HCCLD__PEER_RESULT__INIT;
    Hccld__JoinReq join = HCCLD__JOIN_REQ__INIT;
    uint8_t job[FUZZ_JOB_BYTES];
    seed_t s = {.len = 0};
    uint8_t lead = 0; /* accepting side, everything in one read */

    fuzz_rng_nonce(0, nonce_me);
    memset(nonce_peer, 0xa5, sizeof(nonce_peer));

    hello.version = PEER_PROTO_VERSION;
    hello.job_id = bin(fuzz_job, FUZZ_JOB_BYTES);
    hello.nonce = bin(nonce_peer, FUZZ_NONCE_BYTES);
    hello.addr = "10.0.0.2:60000";
    m.body_case = HCCLD__MSG__BODY_PEER_HELLO;
    m.peer_hello = &hello;
    seed_bytes(&s, &lead, 1);
    seed_frame(&s, &m);
    auth_mac(fuzz_key, FUZZ_KEY_BYTES, PEER_ROLE_CONNECT, nonce_me, nonce_peer, mac);
    proof.mac = bin(mac, AUTH_MAC_BYTES);
    m.body_case = HCCLD__MSG__BODY_PEER_PROOF;
    m.peer_proof = &proof;
    seed_frame(&s, &m);
    join.nranks = 4;
    join.rank = 2;
    join.data_addr = "10.0.0.2:41000";
    m.body_case = HCCLD__MSG__BODY_JOIN_REQ;
    m.join_req = &join;
    seed_frame(&s, &m);
    seed_write("peer", "accept-ok", &s);
    s.buf[0] = 5 << 1; /* the same, 5 bytes per read */
    seed_write("peer", "accept-ok-split", &s);

    s.len = 1;
    s.buf[0] = 0;
    memcpy(job, fuzz_job, sizeof(job));
    job[0] ^= 1;
    hello.job_id = bin(job, FUZZ_JOB_BYTES);
    hello.agreed = 1;
    m.body_case = HCCLD__MSG__BODY_PEER_HELLO;
    m.peer_hello = &hello;
    seed_frame(&s, &m);
    seed_write("peer", "accept-unknown-job", &s);

    s.len = 0;
    lead = 1; /* connecting side */
    seed_bytes(&s, &lead, 1);
    auth_mac(fuzz_key, FUZZ_KEY_BYTES, PEER_ROLE_ACCEPT, nonce_me, nonce_peer, mac);
    chal.nonce = bin(nonce_peer, FUZZ_NONCE_BYTES);
    chal.mac = bin(mac, AUTH_MAC_BYTES);
    m.body_case = HCCLD__MSG__BODY_PEER_CHALLENGE;
    m.peer_challenge = &chal;
    seed_frame(&s, &m);
    res.result = HCCL_SUCCESS;
    res.message = "";
    m.body_case = HCCLD__MSG__BODY_PEER_RESULT;
    m.peer_result = &res;
    seed_frame(&s, &m);
    seed_write("peer", "connect-ok", &s);
    s.len = 1;
    res.result = HCCL_E_NOT_FOUND;
    res.message = "unknown job";
    seed_frame(&s, &m);
    seed_write("peer", "connect-unknown-job", &s);
}

/* One seed per record of the RDMA wire format: the selector byte, then the record. */
static void rdma_wire_seed(const char *name, uint8_t kind, const void *rec, size_t n)
{
    seed_t s = {.len = 0};

    seed_bytes(&s, &kind, 1);
    seed_bytes(&s, rec, n);
    seed_write("rdma_wire", name, &s);
}

static void rdma_wire_seeds(void)
{
    rdma_hello_t hello = {.depth = 16, .slot = 64u << 10, .node = 3, .conn_id = 0x5eed};
    rdma_accept_pd_t acc = {.depth = 16, .slot = 64u << 10};
    rdma_hdr_t data = {
        .type = RDMA_MSG_DATA, .credits = 2, .frag_len = 8, .tag = 0x1234, .len = 24, .off = 16};
    rdma_hdr_t credit = {.type = RDMA_MSG_CREDIT, .credits = 4};
    rdma_hdr_t confirm = {.type = RDMA_MSG_CONFIRM, .frag_len = AUTH_MAC_BYTES};
    rdma_hdr_t resume = {.type = RDMA_MSG_RESUME, .credits = 1, .len = 42};
    rdma_hdr_t bye = {.type = RDMA_MSG_BYE};
    uint8_t buf[RDMA_HDR_BYTES + AUTH_MAC_BYTES];

    memcpy(hello.job, fuzz_job, AUTH_JOB_BYTES);
    memset(hello.nonce, 0x5a, AUTH_NONCE_BYTES);
    rdma_hello_encode(&hello, buf);
    rdma_wire_seed("hello", 0, buf, RDMA_HELLO_BYTES);
    hello.again = 1;
    rdma_hello_encode(&hello, buf);
    rdma_wire_seed("again", 0, buf, RDMA_HELLO_BYTES);
    memset(acc.nonce, 0xa5, AUTH_NONCE_BYTES);
    memset(acc.mac, 0x3c, AUTH_MAC_BYTES);
    rdma_accept_encode(&acc, buf);
    rdma_wire_seed("accept", 1, buf, RDMA_ACCEPT_BYTES);
    rdma_refuse_encode(13, buf);
    rdma_wire_seed("refuse", 2, buf, RDMA_REFUSE_BYTES);
    rdma_hdr_encode(&data, buf);
    memset(buf + RDMA_HDR_BYTES, 0x77, data.frag_len);
    rdma_wire_seed("data", 3, buf, RDMA_HDR_BYTES + data.frag_len);
    rdma_hdr_encode(&credit, buf);
    rdma_wire_seed("credit", 3, buf, RDMA_HDR_BYTES);
    rdma_hdr_encode(&confirm, buf);
    memset(buf + RDMA_HDR_BYTES, 0x11, AUTH_MAC_BYTES);
    rdma_wire_seed("confirm", 3, buf, RDMA_HDR_BYTES + AUTH_MAC_BYTES);
    rdma_hdr_encode(&resume, buf);
    rdma_wire_seed("resume", 3, buf, RDMA_HDR_BYTES);
    rdma_hdr_encode(&bye, buf);
    rdma_wire_seed("bye", 3, buf, RDMA_HDR_BYTES);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    out_dir = argv[1];
    frame_seeds();
    desc_seeds();
    tcp_hs_seeds();
    peer_seeds();
    rdma_wire_seeds();
    return 0;
}
