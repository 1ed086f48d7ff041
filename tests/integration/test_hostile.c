/* A hostile client while a normal job runs: the daemon survives, the job's results stay right. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "harness.h"
#include "ring.h"
#include "rootinfo.h"
#include "shm.h"
#include "suites.h"
#include "uds.h"

static int loop_job(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    enum { CNT = 50000 };
    int64_t *a = malloc(CNT * 8), *b = malloc(CNT * 8);

    for (int it = 0; it < 200; it++) {
        for (int i = 0; i < CNT; i++)
            a[i] = (int64_t)r * 1000003 + i * it;
        if (HcclAllReduce(a, b, CNT, HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM, comm, NULL) != 0)
            return 1;
        for (int i = 0; i < CNT; i++)
            if (b[i] != (int64_t)1000003 * n * (n - 1) / 2 + (int64_t)n * i * it)
                return 2;
    }
    free(a);
    free(b);
    return 0;
}

static void send_raw(const void *p, size_t len)
{
    int fd = uds_connect(harness_socket());

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, p, len), (ssize_t)len);
    /* The daemon closes the connection on a bad frame: reading gives EOF, not a hang. */
    char c;
    alarm(10);
    ck_assert_int_le(read(fd, &c, 1), 0);
    alarm(0);
    close(fd);
}

static void garbage_frames(void)
{
    uint8_t junk[4096];
    uint8_t huge[8] = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4};

    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    junk[0] = 200; /* length 200, then bytes that are not a Msg */
    junk[1] = junk[2] = junk[3] = 0;
    send_raw(junk, sizeof(junk));
    send_raw(huge, sizeof(huge));
}

/* A new connection to the daemon at sock that said Hello (1 MiB arena) into *c, and the Welcome
 * (free it). */
static Hccld__Msg *hello_at(uds_conn_t *c, const char *sock)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__Hello h = HCCLD__HELLO__INIT;
    int fd = uds_connect(sock);

    ck_assert_int_ge(fd, 0);
    uds_conn_init(c, fd);
    h.version = PROTO_VERSION;
    h.arena_bytes = 1 << 20;
    m.body_case = HCCLD__MSG__BODY_HELLO;
    m.hello = &h;
    ck_assert_int_eq(uds_send(fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(c, &resp, 5000), 0);
    ck_assert_int_eq(resp->welcome->result, 0);
    return resp;
}

static Hccld__Msg *hello(uds_conn_t *c)
{
    return hello_at(c, harness_socket());
}

/* Asks the daemon at sock for count lane sockets, as a lane's repair does (lane_keeper.c): the
 * answer's result; the sockets that came with it go to fds, their number to *nfds. */
static int lane_sockets(const char *sock, uint32_t count, int *fds, int *nfds)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp;
    Hccld__LaneSocketsReq req = HCCLD__LANE_SOCKETS_REQ__INIT;
    uds_conn_t c;

    frame_msg_free(hello_at(&c, sock));
    for (int i = 0; i < c.nfds; i++)
        close(c.fds[i]);
    c.nfds = 0;
    req.count = count;
    m.req_id = 7;
    m.body_case = HCCLD__MSG__BODY_LANE_SOCKETS_REQ;
    m.lane_sockets_req = &req;
    ck_assert_int_eq(uds_send(c.fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(&c, &resp, 5000), 0);
    ck_assert_int_eq(resp->body_case, HCCLD__MSG__BODY_LANE_SOCKETS_RESP);
    ck_assert_uint_eq(resp->req_id, 7);
    int result = resp->lane_sockets_resp->result;
    frame_msg_free(resp);
    *nfds = c.nfds;
    memcpy(fds, c.fds, (size_t)c.nfds * sizeof(int));
    c.nfds = 0;
    uds_conn_close(&c);
    return result;
}

/* A lane's repair asks its daemon for sockets: counts out of 1..8 get HCCL_E_PARA and no socket;
 * 8 get 8 unconnected TCP sockets bound to the daemon's data address (127.0.0.1 here); a daemon
 * without one (--listen none) answers HCCL_E_UNAVAIL. The daemon serves on. */
static void lying_lane_requests(void)
{
    static const uint32_t bad[] = {0, 9, 1000, UINT32_MAX};
    int fds[UDS_MAX_FDS], n;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(lane_sockets(harness_socket(), bad[i], fds, &n), HCCL_E_PARA);
        ck_assert_int_eq(n, 0);
    }
    ck_assert_int_eq(lane_sockets(harness_socket(), 8, fds, &n), HCCL_SUCCESS);
    ck_assert_int_eq(n, 8);
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a;
        socklen_t len = sizeof(a);
        int type = 0;
        socklen_t tlen = sizeof(type);
        ck_assert_int_eq(getsockopt(fds[i], SOL_SOCKET, SO_TYPE, &type, &tlen), 0);
        ck_assert_int_eq(type, SOCK_STREAM);
        ck_assert_int_eq(getsockname(fds[i], (struct sockaddr *)&a, &len), 0);
        ck_assert_int_eq(a.sin_family, AF_INET);
        ck_assert_uint_eq(ntohl(a.sin_addr.s_addr), INADDR_LOOPBACK);
        ck_assert_int_eq(getpeername(fds[i], (struct sockaddr *)&a, &len), -1); /* unconnected */
        close(fds[i]);
    }
    char sock[256];
    harness_daemon_opts_t o = {.listen = "none"};
    pid_t lone = harness_daemon_spawn_opts(&o, sock, sizeof(sock));
    ck_assert_int_gt(lone, 0);
    ck_assert_int_eq(lane_sockets(sock, 1, fds, &n), HCCL_E_UNAVAIL);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(harness_daemon_stop_within(lone, 10), 0);
}

/* Speaks the protocol, joins a 1-rank comm, then posts descriptors that lie. */
static void lying_descriptors(void)
{
    HcclRootInfo ri;
    Hccld__RootInfo *info;
    uds_conn_t c;
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = hello(&c);
    Hccld__CommInitReq ci = HCCLD__COMM_INIT_REQ__INIT;
    int fd = c.fd;

    ck_assert_int_eq(c.nfds, 3);
    Hccld__Welcome w = *resp->welcome;
    uint8_t *seg = mmap(NULL, w.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c.fds[0], 0);
    ck_assert_ptr_ne(seg, MAP_FAILED);
    frame_msg_free(resp);

    ck_assert_int_eq(HcclGetRootInfo(&ri), 0);
    info = rootinfo_unpack(&ri);
    ci.info = info;
    ci.nranks = 1;
    m.body_case = HCCLD__MSG__BODY_COMM_INIT_REQ;
    m.comm_init_req = &ci;
    ck_assert_int_eq(uds_send(fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(&c, &resp, 5000), 0);
    ck_assert_int_eq(resp->comm_init_resp->result, 0);
    uint32_t comm_id = resp->comm_init_resp->comm_id;
    frame_msg_free(resp);
    hccld__root_info__free_unpacked(info, NULL);

    ring_t sq, cq;
    ring_attach(&sq, shm_ring(seg, w.sq_off), w.sq_entries, sizeof(desc_t));
    ring_attach(&cq, shm_ring(seg, w.cq_off), w.cq_entries, sizeof(cqe_t));
    desc_t bad[] = {
        {.comm_id = comm_id,
         .kind = DESC_ALLREDUCE,
         .dtype = 4,
         .count = 1000,
         .send_off = w.arena_bytes - 100,
         .recv_off = 0},
        {.comm_id = comm_id, .kind = DESC_ALLREDUCE, .dtype = 4, .count = UINT64_MAX / 2},
        {.comm_id = comm_id,
         .kind = DESC_ALLREDUCE,
         .dtype = 4,
         .count = 10,
         .send_off = UINT64_MAX - 8},
        {.comm_id = comm_id, .kind = 99, .dtype = 4, .count = 10},
        {.comm_id = comm_id, .kind = DESC_ALLREDUCE, .dtype = 44, .count = 10},
        {.comm_id = comm_id, .kind = DESC_ALLREDUCE, .dtype = 4, .redop = 9, .count = 10},
        {.comm_id = comm_id + 1000, .kind = DESC_ALLREDUCE, .dtype = 4, .count = 10},
        {.comm_id = comm_id, .rank = 5, .kind = DESC_ALLREDUCE, .dtype = 4, .count = 10},
        {.comm_id = comm_id, .kind = DESC_SEND, .dtype = 4, .count = 10, .root = 7},
        {.comm_id = comm_id, .kind = DESC_ALLREDUCE, .dtype = 4, .count = 10, .seq = 12345},
    };
    int nbad = sizeof(bad) / sizeof(bad[0]);
    for (int i = 0; i < nbad; i++) {
        bad[i].tag = 1000 + (uint64_t)i;
        ck_assert_int_eq(ring_push(&sq, &bad[i]), 0);
    }
    uint64_t one = 1;
    ck_assert_int_eq(write(c.fds[2], &one, 8), 8);
    int got = 0;
    for (int spins = 0; spins < 5000 && got < nbad; spins++) {
        cqe_t e;
        if (ring_pop(&cq, &e) == 0) {
            ck_assert_msg(e.status == HCCL_E_PARA, "descriptor %llu completed with %d",
                          (unsigned long long)e.tag - 1000, e.status);
            got++;
        } else {
            usleep(1000);
        }
    }
    ck_assert_int_eq(got, nbad);
    /* Now scribble over the ring indices: the daemon must drop us, not crash. */
    sq.hdr->tail = sq.hdr->head + 100000;
    ck_assert_int_eq(write(c.fds[2], &one, 8), 8);
    usleep(100000);
    munmap(seg, w.seg_bytes);
    uds_conn_close(&c);
}

/* A Rejoin (a client back after a daemon restart) with fds, on a fresh connection: the Welcome's
 * result and message are compared, then the connection is closed. */
static void rejoin_refused(uint32_t version, const int *fds, int nfds, int want, const char *why)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__Rejoin r = HCCLD__REJOIN__INIT;
    uds_conn_t c;
    int fd = uds_connect(harness_socket());

    ck_assert_int_ge(fd, 0);
    uds_conn_init(&c, fd);
    r.version = version;
    r.arena_bytes = 1 << 20;
    m.body_case = HCCLD__MSG__BODY_REJOIN;
    m.rejoin = &r;
    ck_assert_int_eq(uds_send(fd, &m, fds, nfds), 0);
    ck_assert_int_eq(uds_recv(&c, &resp, 5000), 0);
    ck_assert_int_eq(resp->body_case, HCCLD__MSG__BODY_WELCOME);
    ck_assert_int_eq(resp->welcome->result, want);
    ck_assert_str_eq(resp->welcome->message, why);
    frame_msg_free(resp);
    uds_conn_close(&c);
}

/* Segments a restarted daemon must not take: a wrong version, none, memfds that are not sealed or
 * not of its sizes, a plain file, sealed ones of the right sizes without its header. A comm
 * asked for again with a secret nobody else has waits alone and fails at its hold. */
static void span_records(void);

static void lying_rejoins(void)
{
    shm_layout_t l;
    void *seg, *arena;
    int raw[2], file = open("/tmp", O_TMPFILE | O_RDWR, 0600);

    shm_layout_make(1 << 20, 256, 256, &l);
    raw[0] = memfd_create("fake-seg", 0);
    raw[1] = memfd_create("fake-arena", 0);
    ck_assert_int_eq(ftruncate(raw[0], (off_t)l.seg_bytes), 0);
    ck_assert_int_eq(ftruncate(raw[1], (off_t)l.arena_bytes), 0);
    char mismatch[160];
    snprintf(mismatch, sizeof(mismatch),
             "protocol version mismatch: libhccl speaks client protocol %u, this hccld %u (use "
             "libhccl and hccld of one release)",
             PROTO_VERSION + 1, PROTO_VERSION);
    rejoin_refused(PROTO_VERSION + 1, NULL, 0, HCCL_E_NOT_SUPPORT, mismatch);
    rejoin_refused(PROTO_VERSION, NULL, 0, HCCL_E_PARA,
                   "a rejoin comes with the segment and the arena");
    rejoin_refused(PROTO_VERSION, raw, 2, HCCL_E_PARA,
                   "the segment or arena is not one this daemon makes");
    ck_assert_int_ge(file, 0);
    rejoin_refused(PROTO_VERSION, (int[]){file, file}, 2, HCCL_E_PARA,
                   "the segment or arena is not one this daemon makes");
    int sealed[2] = {shm_memfd_map("fake-seg", l.seg_bytes, &seg),
                     shm_memfd_map("fake-arena", l.arena_bytes, &arena)};
    ck_assert_int_ge(sealed[0], 0);
    ck_assert_int_ge(sealed[1], 0);
    rejoin_refused(PROTO_VERSION, sealed, 2, HCCL_E_PARA,
                   "the segment's header or rings are not this version's");
    for (int i = 0; i < 2; i++)
        close(raw[i]), close(sealed[i]);
    close(file);
    munmap(seg, l.seg_bytes);
    munmap(arena, l.arena_bytes);

    /* A proper client asks for a comm id with a secret of its own making. */
    Hccld__Msg m = HCCLD__MSG__INIT, *resp;
    Hccld__CommRejoinReq q = HCCLD__COMM_REJOIN_REQ__INIT;
    uint8_t secret[32] = {7};
    uint64_t next[2] = {0, 0};
    uds_conn_t c;
    frame_msg_free(hello(&c));
    int fd = c.fd;
    q.comm_id = 1;
    q.nranks = 2;
    q.rank = 0;
    q.token = (ProtobufCBinaryData){sizeof(secret), secret};
    q.hold_ms = 200;
    q.chunk_bytes = 1 << 20;
    q.n_send_next = q.n_recv_next = 2;
    q.send_next = q.recv_next = next;
    m.body_case = HCCLD__MSG__BODY_COMM_REJOIN_REQ;
    m.comm_rejoin_req = &q;
    ck_assert_int_eq(uds_send(fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(&c, &resp, 5000), 0);
    ck_assert_int_eq(resp->body_case, HCCLD__MSG__BODY_COMM_INIT_RESP);
    ck_assert_int_eq(resp->comm_init_resp->result, HCCL_E_REMOTE);
    ck_assert_str_eq(resp->comm_init_resp->message, "rank(s) did not come back within 200 ms: 1");
    frame_msg_free(resp);
    uds_conn_close(&c);
    span_records();
}

/* Asks for comm id as rank `rank` of 2 with record rec (len bytes); the answer's result. */
static HcclResult rejoin_with_record(uint32_t id, uint32_t rank, const uint8_t *rec, size_t len,
                                     char *msg, size_t cap)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp;
    Hccld__CommRejoinReq q = HCCLD__COMM_REJOIN_REQ__INIT;
    uint8_t secret[32] = {9};
    uint64_t next[2] = {0, 0};
    HcclResult rc = HCCL_E_INTERNAL;
    uds_conn_t c;

    frame_msg_free(hello(&c));
    q.comm_id = id;
    q.nranks = 2;
    q.rank = rank;
    q.token = (ProtobufCBinaryData){sizeof(secret), secret};
    q.hold_ms = 200;
    q.chunk_bytes = 1 << 20;
    q.n_send_next = q.n_recv_next = 2;
    q.send_next = q.recv_next = next;
    q.span_record = (ProtobufCBinaryData){len, (uint8_t *)rec};
    m.body_case = HCCLD__MSG__BODY_COMM_REJOIN_REQ;
    m.comm_rejoin_req = &q;
    ck_assert_int_eq(uds_send(c.fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(&c, &resp, 10000), 0);
    ck_assert_int_eq(resp->body_case, HCCLD__MSG__BODY_COMM_INIT_RESP);
    rc = (HcclResult)resp->comm_init_resp->result;
    snprintf(msg, cap, "%s", resp->comm_init_resp->message);
    frame_msg_free(resp);
    uds_conn_close(&c);
    return rc;
}

/* Records of a comm across daemons that a rank hands back after a restart (form/record.c):
 * garbage is refused by name; a well-formed one that lies (its peers are a closed port on
 * this host) forms a comm that hurts nobody but its own rank, and goes with it. */
static void span_records(void)
{
    char msg[256];
    uint8_t junk[40];

    memset(junk, 0xa5, sizeof(junk));
    ck_assert_int_eq(rejoin_with_record(77, 1, junk, sizeof(junk), msg, sizeof(msg)), HCCL_E_PARA);
    ck_assert_str_eq(
        msg, "its record of the comm across daemons is not one, or puts the rank elsewhere");

    Hccld__SpanRecord sr = HCCLD__SPAN_RECORD__INIT;
    Hccld__Membership mb = HCCLD__MEMBERSHIP__INIT;
    char *data[2] = {"127.0.0.1:1", "127.0.0.1:1"};
    uint32_t rank_node[2] = {0, 1};
    uint8_t job[16] = {1, 2, 3}, key[16] = {4, 5, 6}, buf[512];
    mb.nranks = 2;
    mb.n_data_nodes = 2;
    mb.data_nodes = data;
    mb.n_rank_node = 2;
    mb.rank_node = rank_node;
    mb.qos_class = "";
    mb.retry_l1 = 1;
    mb.retry_hold_ms = 200;
    mb.retry_max_cnt = 1;
    sr.membership = &mb;
    sr.me = 1;
    sr.job_id = (ProtobufCBinaryData){sizeof(job), job};
    sr.job_key = (ProtobufCBinaryData){sizeof(key), key};
    size_t len = hccld__span_record__pack(&sr, buf);
    /* Rank 0 sits on node 0, not on this one. */
    ck_assert_int_eq(rejoin_with_record(78, 0, buf, len, msg, sizeof(msg)), HCCL_E_PARA);
    ck_assert_str_eq(
        msg, "its record of the comm across daemons is not one, or puts the rank elsewhere");
    /* Rank 1 is this node's: the comm forms and dials a closed port; it breaks alone. */
    ck_assert_int_eq(rejoin_with_record(79, 1, buf, len, msg, sizeof(msg)), HCCL_SUCCESS);
}

START_TEST(test_hostile_while_job_runs)
{
    pid_t job[2];
    int half_open[8];

    ck_assert_int_eq(harness_spawn_ranks(2, loop_job, NULL, 120, job), 0);
    for (int i = 0; i < 8; i++)
        half_open[i] = uds_connect(harness_socket()); /* connect, never speak */
    garbage_frames();
    lying_descriptors();
    lying_rejoins();
    lying_lane_requests();
    ck_assert_int_eq(harness_wait(job, 2, 120), 0);
    for (int i = 0; i < 8; i++)
        if (half_open[i] >= 0)
            close(half_open[i]);
    /* The daemon still serves a new job. */
    ck_assert_int_eq(harness_run_ranks(2, loop_job, NULL, 120), 0);
}
END_TEST

/* ---- Tenants apart: a process maps only its own tenant's shared memory ---- */

typedef struct tenant_arg {
    int out;  /* write end: "<tenant> <inode>" per memfd mapping, then "<tenant> done" */
    int go;   /* read end: one byte per rank once the test has looked */
    char who; /* 'A' or 'B' */
} tenant_arg_t;

/* Reports the inodes of the hccld memfds this process maps, while its comm is up. */
static int report_memfds(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const tenant_arg_t *t = arg;
    float x[256], y[256];
    char line[512], msg[64];
    FILE *maps;
    int found = 0;

    for (int i = 0; i < 256; i++)
        x[i] = (float)(r + i);
    if (HcclAllReduce(x, y, 256, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) != 0)
        return 1;
    if ((maps = fopen("/proc/self/maps", "r")) == NULL)
        return 2;
    while (fgets(line, sizeof(line), maps) != NULL) {
        unsigned long long ino;
        if (strstr(line, "/memfd:hccld") == NULL || sscanf(line, "%*s %*s %*s %*s %llu", &ino) != 1)
            continue;
        int len = snprintf(msg, sizeof(msg), "%c %llu\n", t->who, ino);
        if (write(t->out, msg, (size_t)len) != len)
            return 3;
        found++;
    }
    fclose(maps);
    int len = snprintf(msg, sizeof(msg), "%c done %d\n", t->who, found);
    if (write(t->out, msg, (size_t)len) != len || read(t->go, msg, 1) != 1)
        return 4;
    /* Still working after the look. */
    if (HcclAllReduce(x, y, 256, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) != 0)
        return 5;
    for (int i = 0; i < 256; i++)
        if (y[i] != (float)(n * (n - 1) / 2 + n * i))
            return 6;
    return 0;
}

/* Two tenants (jobs) of two ranks each on one daemon, both running: every hccld memfd a
 * process maps is its own or its job's (cooperating ranks of one tenant share theirs), never
 * the other tenant's. */
START_TEST(test_tenants_map_only_their_own)
{
    int out[2], go[2], done = 0;
    pid_t a[2], b[2];
    unsigned long long ino[2][64];
    unsigned nino[2] = {0, 0};
    char line[128];
    FILE *in;

    ck_assert_int_eq(pipe(out), 0);
    ck_assert_int_eq(pipe(go), 0);
    tenant_arg_t ta = {.out = out[1], .go = go[0], .who = 'A'};
    tenant_arg_t tb = {.out = out[1], .go = go[0], .who = 'B'};
    setenv("HCCL_JOB_NAME", "tenant-a", 1);
    ck_assert_int_eq(harness_spawn_ranks(2, report_memfds, &ta, 60, a), 0);
    setenv("HCCL_JOB_NAME", "tenant-b", 1);
    ck_assert_int_eq(harness_spawn_ranks(2, report_memfds, &tb, 60, b), 0);
    unsetenv("HCCL_JOB_NAME");
    close(out[1]);
    in = fdopen(out[0], "r");
    ck_assert_ptr_nonnull(in);
    alarm(60);
    while (done < 4 && fgets(line, sizeof(line), in) != NULL) {
        char who;
        unsigned long long v;
        int k;
        if (sscanf(line, "%c done %d", &who, &k) == 2) {
            ck_assert_msg(k > 0, "a rank of tenant %c maps no hccld memfd", who);
            done++;
        } else if (sscanf(line, "%c %llu", &who, &v) == 2 && nino[who == 'B'] < 64) {
            ino[who == 'B'][nino[who == 'B']++] = v;
        }
    }
    alarm(0);
    ck_assert_int_eq(done, 4);
    for (unsigned i = 0; i < nino[0]; i++)
        for (unsigned j = 0; j < nino[1]; j++)
            ck_assert_msg(ino[0][i] != ino[1][j], "tenants A and B both map memfd inode %llu",
                          ino[0][i]);
    ck_assert_int_eq(write(go[1], "gggg", 4), 4);
    ck_assert_int_eq(harness_wait(a, 2, 60), 0);
    ck_assert_int_eq(harness_wait(b, 2, 60), 0);
    fclose(in);
    close(go[0]);
    close(go[1]);
}
END_TEST

Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_hostile_while_job_runs);
    tcase_add_test(tc, test_tenants_map_only_their_own);
    suite_add_tcase(s, tc);
    return s;
}
