/*
 * Communicator formation (daemon/form) without a daemon, a socket or a clock: a real engine with
 * fake sessions, the effects (messages to clients and peer daemons, links, events) recorded by a
 * fake form_ops_t, time passed in by the test. The comm state machine's whole table; jobs that
 * form, refuse, time out; ranks that leave or die; splits; the member side of a job whose root
 * is another daemon, its retries and deadlines.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_session.h"
#include "form/form.h"
#include "hccl/hccl.h"
#include "rootinfo.h"
#include "test_list.h"

#define NR 3
#define T0 1000000u /* ms: the tests' clock starts here */

/* What the fake effects saw. */
typedef struct seen {
    Hccld__CommInitResp init[NR]; /* the last init answer of each client (strings dropped) */
    char why[NR][320];
    char cls[NR][32]; /* the class each answer names */
    int answers[NR], fds[NR];
    uint8_t job_id[ROOTINFO_ID_BYTES], job_key[ROOTINFO_KEY_BYTES];
    int root_infos;
    int peer_msgs, memberships, joins;
    Hccld__Membership last_mb; /* result and nranks */
    char mb_why[320];
    int connects, closes, formed, died, broken, lost;
    int self; /* what is_self answers */
} seen_t;

static engine_t *eng;
static fake_t fakes[NR];
static form_client_t clients[NR];
static qos_policy_t qos;
static seen_t seen;
static form_t *f;
static int link_token;     /* the fake link's address */
static int qos_level = -1; /* hcclQos of the next joins (-1: not set) */
static int retry_l0;       /* the next joins wait for a restarted daemon (L0:1, hold 3 s) */
#define HOLD_MS 3000

static uint32_t idx(const form_client_t *c)
{
    return (uint32_t)(c - clients);
}

static int op_client_send(void *ctx, const form_client_t *c, const Hccld__Msg *m, const int *fds,
                          int nfds)
{
    uint32_t i = idx(c);

    ck_assert_uint_lt(i, NR);
    if (m->body_case == HCCLD__MSG__BODY_ROOT_INFO_RESP) {
        const Hccld__RootInfo *ri = m->root_info_resp->info;
        ck_assert_ptr_nonnull(ri);
        memcpy(seen.job_id, ri->job_id.data, sizeof(seen.job_id));
        memcpy(seen.job_key, ri->job_key.data, sizeof(seen.job_key));
        seen.root_infos++;
        return 0;
    }
    ck_assert_int_eq(m->body_case, HCCLD__MSG__BODY_COMM_INIT_RESP);
    seen.init[i] = *m->comm_init_resp;
    snprintf(seen.why[i], sizeof(seen.why[i]), "%s", m->comm_init_resp->message);
    snprintf(seen.cls[i], sizeof(seen.cls[i]), "%s",
             m->comm_init_resp->qos_class != NULL ? m->comm_init_resp->qos_class : "");
    seen.init[i].message = seen.init[i].notice = seen.init[i].qos_class = NULL;
    seen.init[i].arena_bytes = NULL;
    seen.answers[i]++;
    seen.fds[i] = nfds;
    return 0;
}

static int op_peer_send(void *ctx, void *link, const Hccld__Msg *m)
{
    ck_assert_ptr_eq(link, &link_token);
    seen.peer_msgs++;
    if (m->body_case == HCCLD__MSG__BODY_MEMBERSHIP) {
        seen.memberships++;
        seen.last_mb = *m->membership;
        snprintf(seen.mb_why, sizeof(seen.mb_why), "%s", m->membership->message);
    } else if (m->body_case == HCCLD__MSG__BODY_JOIN_REQ) {
        seen.joins++;
    }
    return 0;
}

static void *op_peer_connect(void *ctx, const char *addr, const uint8_t *job_id, const uint8_t *key,
                             unsigned timeout_ms, int agreed)
{
    seen.connects++;
    return &link_token;
}

static void op_peer_close(void *ctx, void *link)
{
    seen.closes++;
}

static void op_comm_formed(void *ctx, const form_comm_t *c)
{
    seen.formed++;
}

static void op_rank_died(void *ctx, const form_comm_t *c, uint32_t rank, int pid)
{
    seen.died++;
}

static void op_comm_broken(void *ctx, const form_comm_t *c, const char *why, HcclResult result)
{
    seen.broken++;
}

static void op_peer_lost(void *ctx, const char *addr, const char *why)
{
    seen.lost++;
}

static void op_name_link(void *ctx, const char *data_addr, const char *node)
{
}

static int op_is_self(void *ctx, const char *addr)
{
    return seen.self;
}

static const form_ops_t ops = {.client_send = op_client_send,
                               .peer_send = op_peer_send,
                               .peer_connect = op_peer_connect,
                               .peer_close = op_peer_close,
                               .comm_formed = op_comm_formed,
                               .rank_died = op_rank_died,
                               .comm_broken = op_comm_broken,
                               .peer_lost = op_peer_lost,
                               .name_link = op_name_link,
                               .is_self = op_is_self};

/* advertised: "" for a daemon that does not listen for peers. */
static void setup_with(const char *advertised, int l0_mode)
{
    memset(&seen, 0, sizeof(seen));
    seen.self = 1;
    qos_policy_defaults(&qos);
    eng = engine_create(1);
    ck_assert_ptr_nonnull(eng);
    for (uint32_t r = 0; r < NR; r++) {
        fake_session_add(eng, &fakes[r], r + 1);
        clients[r] = (form_client_t){.sid = r + 1,
                                     .pid = 100 + (int)r,
                                     .uid = 1000,
                                     .qos_class = qos.default_cls,
                                     .ruled_class = qos.default_cls,
                                     .arena_bytes = fakes[r].l.arena_bytes,
                                     .arena_fd = -1};
        snprintf(clients[r].job_name, sizeof(clients[r].job_name), "job");
    }
    form_env_t env = {.eng = eng,
                      .qos = &qos,
                      .chunk_bytes = 1u << 20,
                      .l0_mode = l0_mode,
                      .socket_path = "/tmp/none.sock",
                      .advertised = advertised,
                      .data_addr = advertised[0] != '\0' ? "127.0.0.1:1" : "",
                      .rdma_addr = ""};
    f = form_new(&env, &ops, NULL);
    ck_assert_ptr_nonnull(f);
}

static void setup(void)
{
    setup_with("", FORM_L0_DAEMON);
}

static void teardown(void)
{
    qos_level = -1;
    retry_l0 = 0;
    form_free(f);
    engine_destroy(eng);
    for (uint32_t r = 0; r < NR; r++)
        fake_session_free(&fakes[r]);
}

/* Rank `rank` of nranks asks to join the job the last root info named (root: root_addr). */
static void join(uint32_t rank, uint32_t nranks, const char *root_addr, const char *algo,
                 uint64_t now)
{
    Hccld__RootInfo ri = HCCLD__ROOT_INFO__INIT;
    Hccld__CommInitReq req = HCCLD__COMM_INIT_REQ__INIT;

    ri.job_id = (ProtobufCBinaryData){sizeof(seen.job_id), seen.job_id};
    ri.job_key = (ProtobufCBinaryData){sizeof(seen.job_key), seen.job_key};
    ri.root_addr = (char *)root_addr;
    req.info = &ri;
    req.nranks = nranks;
    req.rank = rank;
    req.timeout_s = 10;
    req.algo = (char *)algo;
    req.qos_level_set = qos_level >= 0;
    req.qos_level = qos_level >= 0 ? (uint32_t)qos_level : 0;
    req.retry_set = retry_l0;
    req.retry_l0 = retry_l0;
    req.retry_max_cnt = 1;
    req.retry_hold_ms = HOLD_MS;
    form_comm_init(f, &clients[rank], 40 + rank, &req, now);
}

static void root_info(uint64_t now)
{
    Hccld__RootInfoReq req = HCCLD__ROOT_INFO_REQ__INIT;

    req.timeout_s = 10;
    form_root_info(f, &clients[0], 1, &req, now);
    ck_assert_int_eq(seen.root_infos, 1);
}

/* A daemon listening for peers, whose ranks' root infos name another daemon's root. */
static void member_setup(void)
{
    setup_with("127.0.0.1:60001", FORM_L0_DAEMON);
    seen.self = 0;
    root_info(T0);
}

static const form_comm_t *only_comm(void)
{
    const form_comm_t *c = form_comms(f);

    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_null(c->next);
    return c;
}

/* Every transition of the table, against the list of the allowed ones. */
START_TEST(test_form_state_table)
{
    static const struct {
        comm_state_t from;
        comm_event_t ev;
        comm_state_t to;
    } allowed[] = {
        {COMM_JOINING, COMM_EV_JOINED, COMM_FORMING},
        {COMM_JOINING, COMM_EV_FAILED, COMM_CLOSED},
        {COMM_JOINING, COMM_EV_LEFT, COMM_JOINING},
        {COMM_JOINING, COMM_EV_ALL_LEFT, COMM_CLOSED},
        {COMM_FORMING, COMM_EV_FORMED, COMM_ACTIVE},
        {COMM_FORMING, COMM_EV_FAILED, COMM_CLOSED},
        {COMM_FORMING, COMM_EV_BROKEN, COMM_BROKEN},
        {COMM_FORMING, COMM_EV_ALL_LEFT, COMM_CLOSED},
        {COMM_ACTIVE, COMM_EV_LINK_LOST, COMM_SUSPENDED},
        {COMM_ACTIVE, COMM_EV_BROKEN, COMM_BROKEN},
        {COMM_ACTIVE, COMM_EV_LEFT, COMM_ACTIVE},
        {COMM_ACTIVE, COMM_EV_ALL_LEFT, COMM_CLOSED},
        {COMM_SUSPENDED, COMM_EV_LINK_LOST, COMM_SUSPENDED},
        {COMM_SUSPENDED, COMM_EV_LINK_BACK, COMM_RESUMING},
        {COMM_SUSPENDED, COMM_EV_GAVE_UP, COMM_BROKEN},
        {COMM_SUSPENDED, COMM_EV_BROKEN, COMM_BROKEN},
        {COMM_SUSPENDED, COMM_EV_LEFT, COMM_SUSPENDED},
        {COMM_SUSPENDED, COMM_EV_ALL_LEFT, COMM_CLOSED},
        {COMM_RESUMING, COMM_EV_LINK_LOST, COMM_SUSPENDED},
        {COMM_RESUMING, COMM_EV_RESUMED, COMM_ACTIVE},
        {COMM_RESUMING, COMM_EV_GAVE_UP, COMM_BROKEN},
        {COMM_RESUMING, COMM_EV_BROKEN, COMM_BROKEN},
        {COMM_RESUMING, COMM_EV_LEFT, COMM_RESUMING},
        {COMM_RESUMING, COMM_EV_ALL_LEFT, COMM_CLOSED},
        {COMM_BROKEN, COMM_EV_LINK_LOST, COMM_BROKEN},
        {COMM_BROKEN, COMM_EV_LINK_BACK, COMM_BROKEN},
        {COMM_BROKEN, COMM_EV_GAVE_UP, COMM_BROKEN},
        {COMM_BROKEN, COMM_EV_BROKEN, COMM_BROKEN},
        {COMM_BROKEN, COMM_EV_LEFT, COMM_BROKEN},
        {COMM_BROKEN, COMM_EV_ALL_LEFT, COMM_CLOSED},
    };
    size_t n = sizeof(allowed) / sizeof(allowed[0]), hits = 0;

    for (int s = 0; s < COMM_STATE_COUNT; s++)
        for (int e = 0; e < COMM_EV_COUNT; e++) {
            comm_state_t want = COMM_STATE_COUNT;
            for (size_t i = 0; i < n; i++)
                if (allowed[i].from == (comm_state_t)s && allowed[i].ev == (comm_event_t)e)
                    want = allowed[i].to, hits++;
            ck_assert_msg(comm_next(s, e) == want, "%s + %s: %s, expected %s", comm_state_name(s),
                          comm_event_name(e), comm_state_name(comm_next(s, e)),
                          comm_state_name(want));
        }
    ck_assert_uint_eq(hits, n);
    ck_assert_int_eq(comm_next(COMM_STATE_COUNT, COMM_EV_JOINED), COMM_STATE_COUNT);
    ck_assert_int_eq(comm_next(COMM_ACTIVE, COMM_EV_COUNT), COMM_STATE_COUNT);
    ck_assert_str_eq(comm_state_name(COMM_SUSPENDED), "suspended");
    ck_assert_str_eq(comm_state_name(COMM_STATE_COUNT), "?");
    ck_assert_str_eq(comm_event_name(COMM_EV_LINK_BACK), "link_back");
}
END_TEST

/* Three ranks of this node join a root info: the comm forms once the last joins, every rank is
 * answered with it and its own rank, and it is ACTIVE; nothing needs the clock after. */
START_TEST(test_form_local_job)
{
    setup();
    root_info(T0);
    join(2, NR, "", NULL, T0);
    join(0, NR, "", NULL, T0);
    ck_assert_int_eq(seen.answers[0] + seen.answers[2], 0);
    ck_assert_uint_eq(form_next_deadline(f), T0 + 10000);
    join(1, NR, "", NULL, T0 + 5);
    const form_comm_t *c = only_comm();
    ck_assert_int_eq(c->state, COMM_ACTIVE);
    ck_assert_uint_eq(c->nranks, NR);
    ck_assert_uint_eq(c->nlocal, NR);
    for (uint32_t r = 0; r < NR; r++) {
        ck_assert_int_eq(seen.answers[r], 1);
        ck_assert_int_eq(seen.init[r].result, HCCL_SUCCESS);
        ck_assert_uint_eq(seen.init[r].comm_id, c->id);
        ck_assert_uint_eq(seen.init[r].rank, r);
        ck_assert_uint_eq(seen.init[r].nranks, NR);
        ck_assert_uint_eq(seen.init[r].l0_mode, FORM_L0_AUTO);
        ck_assert_int_eq(seen.fds[r], 0);
    }
    ck_assert_int_eq(seen.formed, 1);
    ck_assert_uint_eq(form_next_deadline(f), UINT64_MAX);
    teardown();
}
END_TEST

/* The job times out exactly at its deadline: the rank that joined gets HCCL_E_TIMEOUT naming
 * the ranks that never arrived; a later join finds no job. */
START_TEST(test_form_job_timeout)
{
    setup();
    root_info(T0);
    join(1, NR, "", NULL, T0 + 100);
    form_expire(f, T0 + 9999);
    ck_assert_int_eq(seen.answers[1], 0);
    form_expire(f, T0 + 10000);
    ck_assert_int_eq(seen.answers[1], 1);
    ck_assert_int_eq(seen.init[1].result, HCCL_E_TIMEOUT);
    ck_assert_str_eq(seen.why[1], "timed out: 1 of 3 ranks joined; never arrived: 0,2");
    ck_assert_uint_eq(form_next_deadline(f), UINT64_MAX);
    join(0, NR, "", NULL, T0 + 10001);
    ck_assert_int_eq(seen.init[0].result, HCCL_E_NOT_FOUND);
    ck_assert_ptr_null(form_comms(f));
    teardown();
}
END_TEST

/* Refusals that leave the job open for the right ranks: a rank twice, an unknown HCCL_ALGO. */
START_TEST(test_form_refusals)
{
    setup();
    root_info(T0);
    join(0, 2, "", NULL, T0);
    join(0, 2, "", NULL, T0);
    ck_assert_int_eq(seen.init[0].result, HCCL_E_PARA);
    ck_assert_str_eq(seen.why[0], "this rank already joined");
    join(1, 2, "", "level0:NA;level1:nonsense", T0);
    ck_assert_int_eq(seen.init[1].result, HCCL_E_PARA);
    ck_assert_ptr_nonnull(strstr(seen.why[1], "nonsense"));
    join(1, 2, "", "level0:NA;level1:ring", T0);
    ck_assert_int_eq(seen.init[1].result, HCCL_SUCCESS);
    ck_assert_int_eq(seen.init[0].result, HCCL_SUCCESS);
    ck_assert_int_eq(only_comm()->state, COMM_ACTIVE);
    teardown();
}
END_TEST

/* A rank count unlike the job's fails the job at once: the newcomer and every rank that joined
 * get HCCL_E_PARA naming both counts and the ranks that gave each, and the job is gone. */
START_TEST(test_form_nranks_mismatch)
{
    static const char why[] = "ranks disagree on nRanks: rank 2 passed 2, ranks 0,1 passed 3; "
                              "every rank must pass the same";

    setup();
    root_info(T0);
    join(0, NR, "", NULL, T0);
    join(1, NR, "", NULL, T0);
    join(2, 2, "", NULL, T0);
    for (uint32_t r = 0; r < NR; r++) {
        ck_assert_int_eq(seen.answers[r], 1);
        ck_assert_int_eq(seen.init[r].result, HCCL_E_PARA);
        ck_assert_str_eq(seen.why[r], why);
    }
    join(2, NR, "", NULL, T0);
    ck_assert_int_eq(seen.init[2].result, HCCL_E_NOT_FOUND);
    ck_assert_ptr_null(form_comms(f));
    teardown();
}
END_TEST

/* Destroy by each rank: a rank not in the comm is refused; the record goes with the last. */
START_TEST(test_form_leave)
{
    int ready = -1;

    setup();
    root_info(T0);
    for (uint32_t r = 0; r < NR; r++)
        join(r, NR, "", NULL, T0);
    uint32_t id = only_comm()->id;
    ck_assert_int_eq(form_comm_leave(f, &clients[1], id, 0), HCCL_E_PARA);
    ck_assert_int_eq(form_comm_leave(f, &clients[0], id + 1, 0), HCCL_E_PARA);
    ck_assert_int_eq(form_comm_health(f, &clients[2], id, 2, &ready), HCCL_SUCCESS);
    ck_assert_int_eq(form_comm_leave(f, &clients[0], id, 0), HCCL_SUCCESS);
    ck_assert_int_eq(form_comm_leave(f, &clients[0], id, 0), HCCL_E_PARA);
    ck_assert_int_eq(only_comm()->state, COMM_ACTIVE);
    ck_assert_uint_eq(only_comm()->left, 1);
    ck_assert_int_eq(form_comm_leave(f, &clients[1], id, 1), HCCL_SUCCESS);
    ck_assert_int_eq(form_comm_leave(f, &clients[2], id, 2), HCCL_SUCCESS);
    ck_assert_ptr_null(form_comms(f));
    ck_assert_int_eq(seen.broken, 0);
    teardown();
}
END_TEST

/* A rank's process dies: the comm is BROKEN (told once per death), the others' health says
 * HCCL_E_REMOTE, and the record goes with the last of them. */
START_TEST(test_form_rank_dies)
{
    int ready = -1;

    setup();
    root_info(T0);
    for (uint32_t r = 0; r < NR; r++)
        join(r, NR, "", NULL, T0);
    uint32_t id = only_comm()->id;
    form_client_gone(f, &clients[1]);
    ck_assert_int_eq(only_comm()->state, COMM_BROKEN);
    ck_assert_int_eq(seen.died, 1);
    ck_assert_int_eq(seen.broken, 1);
    ck_assert_int_eq(form_comm_health(f, &clients[0], id, 0, &ready), HCCL_E_REMOTE);
    ck_assert_int_eq(ready, 0);
    form_client_gone(f, &clients[0]);
    form_client_gone(f, &clients[2]);
    ck_assert_ptr_null(form_comms(f));
    teardown();
}
END_TEST

/* A rank of a job not yet complete goes away: its place is free again, and a new process can
 * take it. */
START_TEST(test_form_joined_rank_gone)
{
    setup();
    root_info(T0);
    join(0, 2, "", NULL, T0);
    form_client_gone(f, &clients[0]);
    join(1, 2, "", NULL, T0);
    ck_assert_int_eq(seen.answers[1], 0);
    join(0, 2, "", NULL, T0);
    ck_assert_int_eq(seen.init[0].result, HCCL_SUCCESS);
    ck_assert_int_eq(seen.init[1].result, HCCL_SUCCESS);
    teardown();
}
END_TEST

static void split(uint32_t rank, uint32_t comm, uint32_t color, uint32_t key, uint64_t now)
{
    Hccld__CommSplitReq req = HCCLD__COMM_SPLIT_REQ__INIT;

    req.comm_id = comm;
    req.rank = rank;
    req.color = color;
    req.key = key;
    req.seq = 0;
    req.timeout_s = 5;
    form_comm_split(f, &clients[rank], 60 + rank, &req, now);
}

/* Ranks 0 and 2 take color 7 (ordered by key: 2 first), rank 1 none. */
START_TEST(test_form_split)
{
    setup();
    root_info(T0);
    for (uint32_t r = 0; r < NR; r++)
        join(r, NR, "", NULL, T0);
    uint32_t parent = only_comm()->id;
    split(0, parent, 7, 5, T0);
    split(2, parent, 7, 1, T0);
    ck_assert_uint_eq(form_next_deadline(f), T0 + 5000);
    split(1, parent, HCCL_SPLIT_NOCOLOR, 0, T0);
    ck_assert_int_eq(seen.init[1].result, HCCL_SUCCESS);
    ck_assert_uint_eq(seen.init[1].comm_id, 0);
    ck_assert_uint_eq(seen.init[2].rank, 0);
    ck_assert_uint_eq(seen.init[0].rank, 1);
    ck_assert_uint_eq(seen.init[0].nranks, 2);
    ck_assert_uint_ne(seen.init[0].comm_id, parent);
    ck_assert_uint_eq(seen.init[0].comm_id, seen.init[2].comm_id);
    ck_assert_uint_eq(form_next_deadline(f), UINT64_MAX);
    teardown();
}
END_TEST

/* A split that not every rank calls fails, at its deadline, for those that did. */
START_TEST(test_form_split_timeout)
{
    setup();
    root_info(T0);
    for (uint32_t r = 0; r < NR; r++)
        join(r, NR, "", NULL, T0);
    split(0, only_comm()->id, 1, 0, T0 + 10);
    form_expire(f, T0 + 5009);
    ck_assert_int_eq(seen.answers[0], 1);
    form_expire(f, T0 + 5010);
    ck_assert_int_eq(seen.answers[0], 2);
    ck_assert_int_eq(seen.init[0].result, HCCL_E_TIMEOUT);
    teardown();
}
END_TEST

/* The member side: a root info naming another daemon opens a link; once it is authenticated
 * the rank's join goes out; the root's refusal reaches the rank with its own result, and the
 * link is closed. */
START_TEST(test_form_member_refused)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Membership mb = HCCLD__MEMBERSHIP__INIT;

    member_setup();
    join(1, 2, "127.0.0.2:60000", NULL, T0);
    ck_assert_int_eq(seen.connects, 1);
    ck_assert_int_eq(seen.joins, 0);
    form_link_ready(f, &link_token, HCCL_SUCCESS, T0 + 1);
    ck_assert_int_eq(seen.joins, 1);
    mb.result = HCCL_E_PARA;
    mb.message = "nRanks 2 differs from the other ranks' 4";
    m.body_case = HCCLD__MSG__BODY_MEMBERSHIP;
    m.membership = &mb;
    form_peer_msg(f, &link_token, "127.0.0.2:60000", seen.job_id, &m, T0 + 2);
    ck_assert_int_eq(seen.init[1].result, HCCL_E_PARA);
    ck_assert_str_eq(seen.why[1], "nRanks 2 differs from the other ranks' 4");
    ck_assert_int_eq(seen.closes, 1);
    ck_assert_uint_eq(form_next_deadline(f), T0 + 10000); /* the root info this daemon issued */
    teardown();
}
END_TEST

/* Runs fn with stderr (the log) going to a file; returns what was logged (the caller frees). */
static char *logged(void (*fn)(void))
{
    FILE *tmp = tmpfile();
    int saved = dup(2);
    char *text = calloc(1, 1 << 16);

    ck_assert_ptr_nonnull(tmp);
    ck_assert_ptr_nonnull(text);
    fflush(stderr);
    dup2(fileno(tmp), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(text, 1, (1 << 16) - 1, tmp);
    text[n] = '\0';
    fclose(tmp);
    return text;
}

static void bad_membership(void)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__Membership mb = HCCLD__MEMBERSHIP__INIT;
    char *nodes[2] = {"127.0.0.2:60000", "127.0.0.1:60001"};
    uint32_t rank_node[2] = {0, 0}; /* both ranks on the root's node: not ours */

    form_link_ready(f, &link_token, HCCL_SUCCESS, T0 + 1);
    mb.result = HCCL_SUCCESS;
    mb.nranks = 2;
    mb.n_nodes = mb.n_data_nodes = 2;
    mb.nodes = mb.data_nodes = nodes;
    mb.n_rank_node = 2;
    mb.rank_node = rank_node;
    mb.qos_class = "MEDIUM";
    m.body_case = HCCLD__MSG__BODY_MEMBERSHIP;
    m.membership = &mb;
    form_peer_msg(f, &link_token, nodes[0], seen.job_id, &m, T0 + 2);
}

/* A membership that does not add up (it puts no rank on this daemon) fails the rank with
 * HCCL_E_INTERNAL, leaves no comm behind, and the log never says the comm formed. */
START_TEST(test_form_member_bad_membership)
{
    member_setup();
    join(1, 2, "127.0.0.2:60000", NULL, T0);
    char *log = logged(bad_membership);
    ck_assert_int_eq(seen.init[1].result, HCCL_E_INTERNAL);
    ck_assert_str_eq(seen.why[1], "the membership does not place this daemon's ranks on one node");
    ck_assert_ptr_null(form_comms(f));
    ck_assert_int_eq(seen.formed, 0);
    ck_assert_msg(strstr(log, "formed") == NULL, "the log says it formed: %s", log);
    ck_assert_ptr_nonnull(strstr(log, "does not place"));
    free(log);
    teardown();
}
END_TEST

/* An agreed job whose root does not know it yet: connect again every 150 ms until the join
 * timeout, then HCCL_E_TIMEOUT saying how often it tried. */
START_TEST(test_form_member_retries)
{
    Hccld__RootInfo ri = HCCLD__ROOT_INFO__INIT;
    Hccld__CommInitReq req = HCCLD__COMM_INIT_REQ__INIT;
    uint8_t id[ROOTINFO_ID_BYTES] = {1}, key[ROOTINFO_KEY_BYTES] = {2};

    setup_with("127.0.0.1:60001", FORM_L0_DAEMON);
    seen.self = 0;
    ri.job_id = (ProtobufCBinaryData){sizeof(id), id};
    ri.job_key = (ProtobufCBinaryData){sizeof(key), key};
    ri.root_addr = "127.0.0.2:60000";
    req.info = &ri;
    req.nranks = 2;
    req.rank = 1;
    req.timeout_s = 1;
    req.agreed = 1;
    form_comm_init(f, &clients[1], 9, &req, T0);
    uint64_t now = T0;
    for (int i = 0; i < 20 && seen.answers[1] == 0; i++) {
        form_link_ready(f, &link_token, HCCL_E_NOT_FOUND, now);
        if (seen.answers[1] != 0)
            break;
        ck_assert_uint_eq(form_next_deadline(f), now + 150);
        now += 150;
        form_expire(f, now);
    }
    ck_assert_int_eq(seen.answers[1], 1);
    ck_assert_int_eq(seen.init[1].result, HCCL_E_TIMEOUT);
    ck_assert_int_eq(seen.connects, 7);
    ck_assert_ptr_nonnull(strstr(seen.why[1], "(7 attempts)"));
    ck_assert_uint_eq(form_next_deadline(f), UINT64_MAX);
    teardown();
}
END_TEST

/* A daemon that does not listen for peers refuses a root on another daemon at once. */
START_TEST(test_form_member_not_listening)
{
    setup();
    seen.self = 0;
    root_info(T0);
    join(0, 2, "127.0.0.2:60000", NULL, T0);
    ck_assert_int_eq(seen.init[0].result, HCCL_E_NOT_SUPPORT);
    ck_assert_int_eq(seen.connects, 0);
    teardown();
}
END_TEST

/* The root side: a remote rank whose rank count differs is refused over its link with
 * HCCL_E_PARA; the link of a rank that joined closing while the job forms tells of a lost peer,
 * and frees the rank's place. */
START_TEST(test_form_remote_join)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__JoinReq jr = HCCLD__JOIN_REQ__INIT;

    setup_with("127.0.0.1:60001", FORM_L0_DAEMON);
    root_info(T0);
    join(0, NR, "", NULL, T0);
    jr.nranks = 2;
    jr.rank = 1;
    jr.data_addr = "127.0.0.2:1";
    jr.rdma_addr = jr.lane_addr = "";
    m.body_case = HCCLD__MSG__BODY_JOIN_REQ;
    m.join_req = &jr;
    form_peer_msg(f, &link_token, "127.0.0.2:60000", seen.job_id, &m, T0);
    ck_assert_int_eq(seen.memberships, 1);
    ck_assert_int_eq(seen.last_mb.result, HCCL_E_PARA);
    ck_assert_str_eq(seen.mb_why, "ranks disagree on nRanks: rank 1 passed 2, rank 0 passed 3; "
                                  "every rank must pass the same");
    ck_assert_int_eq(seen.init[0].result, HCCL_E_PARA); /* the job failed for rank 0 too */
    ck_assert_str_eq(seen.why[0], seen.mb_why);
    form_link_gone(f, &link_token, "127.0.0.2:60000");
    ck_assert_int_eq(seen.lost, 0); /* it never joined */
    teardown();

    setup_with("127.0.0.1:60001", FORM_L0_DAEMON);
    root_info(T0);
    join(0, NR, "", NULL, T0);
    jr.nranks = NR;
    form_peer_msg(f, &link_token, "127.0.0.2:60000", seen.job_id, &m, T0);
    ck_assert_int_eq(seen.memberships, 0);
    form_link_gone(f, &link_token, "127.0.0.2:60000");
    ck_assert_int_eq(seen.lost, 1);
    ck_assert_int_eq(seen.answers[0], 0);
    form_expire(f, T0 + 10000);
    ck_assert_int_eq(seen.init[0].result, HCCL_E_TIMEOUT);
    ck_assert_str_eq(seen.why[0], "timed out: 1 of 3 ranks joined; never arrived: 1,2");
    teardown();
}
END_TEST

/* A comm formed with hcclQos levels: the class each level asks for with the default classes
 * (HIGH, MEDIUM, LOW: 5..7 HIGH, 2..4 MEDIUM, 0..1 LOW), never above what the rules give its
 * ranks, and the least favoured of its ranks' for the comm. */
static const char *formed_class(int level, int ruled)
{
    static char cls[32];

    setup();
    for (uint32_t r = 0; r < 2; r++)
        clients[r].ruled_class = ruled;
    qos_level = level;
    root_info(T0);
    join(0, 2, "", NULL, T0);
    join(1, 2, "", NULL, T0);
    ck_assert_int_eq(seen.init[0].result, HCCL_SUCCESS);
    ck_assert_str_eq(seen.cls[0], seen.cls[1]);
    snprintf(cls, sizeof(cls), "%s", seen.cls[0]);
    teardown();
    return cls;
}

START_TEST(test_form_qos_level)
{
    qos_policy_t q;

    qos_policy_defaults(&q);
    int hi = qos_class_find(&q, "HIGH"), lo = qos_class_find(&q, "LOW");
    ck_assert_int_ge(hi, 0);
    ck_assert_int_ge(lo, 0);
    ck_assert_str_eq(formed_class(7, hi), "HIGH");
    ck_assert_str_eq(formed_class(6, hi), "HIGH");
    ck_assert_str_eq(formed_class(3, hi), "MEDIUM");
    ck_assert_str_eq(formed_class(0, hi), "LOW");
    ck_assert_str_eq(formed_class(6, lo), "LOW"); /* asked above the rules: refused */
    ck_assert_str_eq(formed_class(-1, hi), q.cls[q.default_cls].name);
}
END_TEST

/* The comm the ranks formed before the "restart", and its secret as they were told it. */
static uint32_t old_id;
static uint8_t old_secret[FORM_SECRET_BYTES];

/* Three ranks form a comm whose ranks wait for restarts (L0:1), then the daemon "restarts": a
 * new engine and formation, the same clients (their sessions back). */
static void formed_then_restart(void)
{
    setup();
    retry_l0 = 1;
    root_info(T0);
    for (uint32_t r = 0; r < NR; r++)
        join(r, NR, "", NULL, T0);
    const form_comm_t *c = only_comm();
    old_id = c->id;
    ck_assert_uint_eq(c->restart_hold_ms, HOLD_MS);
    for (uint32_t r = 0; r < NR; r++) {
        ck_assert_uint_eq(seen.init[r].resume_token.len, FORM_SECRET_BYTES);
        ck_assert_mem_eq(seen.init[r].resume_token.data, c->secret, FORM_SECRET_BYTES);
    }
    memcpy(old_secret, c->secret, sizeof(old_secret));
    form_free(f);
    engine_destroy(eng);
    for (uint32_t r = 0; r < NR; r++)
        fake_session_free(&fakes[r]);
    memset(&seen, 0, sizeof(seen));
    eng = engine_create(1);
    ck_assert_ptr_nonnull(eng);
    for (uint32_t r = 0; r < NR; r++)
        fake_session_add(eng, &fakes[r], r + 1);
    form_env_t env = {.eng = eng,
                      .qos = &qos,
                      .chunk_bytes = 1u << 20,
                      .l0_mode = FORM_L0_DAEMON,
                      .socket_path = "/tmp/none.sock",
                      .advertised = "",
                      .data_addr = "",
                      .rdma_addr = "",
                      .comm_id_base = old_id - 1}; /* the next new comm would take old_id */
    f = form_new(&env, &ops, NULL);
    ck_assert_ptr_nonnull(f);
}

/* Rank `rank` asks the new daemon for comm `id` with `secret`: it completed collective pieces
 * below coll_next and posted those below coll_posted; sent `sent` pieces to each peer. */
static void rejoin(uint32_t rank, uint32_t id, const uint8_t *secret, uint64_t coll_next,
                   uint64_t coll_posted, uint64_t sent, uint64_t now)
{
    Hccld__CommRejoinReq req = HCCLD__COMM_REJOIN_REQ__INIT;
    uint64_t send_next[NR], recv_next[NR];

    for (uint32_t p = 0; p < NR; p++)
        send_next[p] = recv_next[p] = sent;
    req.comm_id = id;
    req.nranks = NR;
    req.rank = rank;
    req.token = (ProtobufCBinaryData){FORM_SECRET_BYTES, (uint8_t *)secret};
    req.hold_ms = HOLD_MS;
    req.chunk_bytes = 1u << 20;
    req.coll_next = coll_next;
    req.coll_posted = coll_posted;
    req.n_send_next = req.n_recv_next = NR;
    req.send_next = send_next;
    req.recv_next = recv_next;
    form_comm_rejoin(f, &clients[rank], 70 + rank, &req, -1, now);
}

/* Without op retry the answers carry no secret and a stopping daemon ends the comm as before;
 * with it, every rank gets the comm's one secret. */
START_TEST(test_form_token_only_with_retry)
{
    setup();
    root_info(T0);
    for (uint32_t r = 0; r < NR; r++)
        join(r, NR, "", NULL, T0);
    ck_assert_uint_eq(only_comm()->restart_hold_ms, 0);
    for (uint32_t r = 0; r < NR; r++)
        ck_assert_uint_eq(seen.init[r].resume_token.len, 0);
    teardown();
    formed_then_restart();
    teardown();
}
END_TEST

/* After a restart the ranks register the comm again: nobody is answered before the last asks;
 * then each gets the old id, its rank, the same secret, and the comm is ACTIVE here again. A
 * new comm formed afterwards never takes the old id. */
START_TEST(test_form_rejoin)
{
    formed_then_restart();
    rejoin(2, old_id, old_secret, 5, 7, 1, T0 + 10);
    rejoin(0, old_id, old_secret, 4, 6, 1, T0 + 10);
    ck_assert_int_eq(seen.answers[0] + seen.answers[2], 0);
    ck_assert_uint_eq(form_next_deadline(f), T0 + 10 + HOLD_MS);
    rejoin(1, old_id, old_secret, 5, 7, 0, T0 + 20);
    const form_comm_t *c = only_comm();
    ck_assert_uint_eq(c->id, old_id);
    ck_assert_int_eq(c->state, COMM_ACTIVE);
    ck_assert_uint_eq(c->restart_hold_ms, HOLD_MS);
    ck_assert_mem_eq(c->secret, old_secret, FORM_SECRET_BYTES);
    for (uint32_t r = 0; r < NR; r++) {
        ck_assert_int_eq(seen.answers[r], 1);
        ck_assert_int_eq(seen.init[r].result, HCCL_SUCCESS);
        ck_assert_uint_eq(seen.init[r].comm_id, old_id);
        ck_assert_uint_eq(seen.init[r].rank, r);
        ck_assert_uint_eq(seen.init[r].resume_token.len, FORM_SECRET_BYTES);
    }
    ck_assert_uint_eq(form_next_deadline(f), UINT64_MAX);
    /* A new job's comm skips the id taken. */
    retry_l0 = 0;
    memset(&seen, 0, sizeof(seen));
    root_info(T0 + 30);
    join(0, 1, "", NULL, T0 + 30);
    ck_assert_int_eq(seen.init[0].result, HCCL_SUCCESS);
    ck_assert_uint_ne(seen.init[0].comm_id, old_id);
    ck_assert_uint_ne(seen.init[0].comm_id, 0);
    teardown();
}
END_TEST

/* A process without the secret never joins the comm nor spoils the group of those with it; a
 * rank that asks twice, or for a comm known here, is refused with HCCL_E_PARA. */
START_TEST(test_form_rejoin_refusals)
{
    uint8_t wrong[FORM_SECRET_BYTES];

    formed_then_restart();
    memcpy(wrong, old_secret, sizeof(wrong));
    wrong[0] ^= 1;
    rejoin(0, old_id, wrong, 0, 0, 0, T0);
    rejoin(1, old_id, old_secret, 0, 0, 0, T0);
    rejoin(1, old_id, old_secret, 0, 0, 0, T0);
    ck_assert_int_eq(seen.answers[1], 1);
    ck_assert_int_eq(seen.init[1].result, HCCL_E_PARA);
    ck_assert_str_eq(seen.why[1], "the rank asked twice");
    rejoin(0, old_id, old_secret, 0, 0, 0, T0);
    rejoin(2, old_id, old_secret, 0, 0, 0, T0);
    ck_assert_int_eq(seen.init[2].result, HCCL_SUCCESS);
    ck_assert_uint_eq(only_comm()->id, old_id);
    /* The impostor's group waits for ranks that never come, and fails at its hold. */
    ck_assert_int_eq(seen.answers[0], 1);
    form_expire(f, T0 + HOLD_MS - 1);
    ck_assert_int_eq(seen.answers[0], 1);
    rejoin(1, old_id, old_secret, 0, 0, 0, T0 + 1);
    ck_assert_int_eq(seen.init[1].result, HCCL_E_PARA);
    ck_assert_str_eq(seen.why[1], "the comm is already known here");
    teardown();
}
END_TEST

/* Ranks that do not come back within the hold: the others fail with HCCL_E_REMOTE naming
 * them; one whose process goes away while the others wait fails them at once. */
START_TEST(test_form_rejoin_missing)
{
    formed_then_restart();
    rejoin(0, old_id, old_secret, 0, 0, 0, T0);
    form_expire(f, T0 + HOLD_MS - 1);
    ck_assert_int_eq(seen.answers[0], 0);
    form_expire(f, T0 + HOLD_MS);
    ck_assert_int_eq(seen.init[0].result, HCCL_E_REMOTE);
    ck_assert_str_eq(seen.why[0], "rank(s) did not come back within 3000 ms: 1 2");
    ck_assert_ptr_null(form_comms(f));
    rejoin(0, old_id, old_secret, 0, 0, 0, T0 + HOLD_MS);
    rejoin(1, old_id, old_secret, 0, 0, 0, T0 + HOLD_MS);
    form_client_gone(f, &clients[1]);
    ck_assert_int_eq(seen.answers[0], 2);
    ck_assert_int_eq(seen.init[0].result, HCCL_E_REMOTE);
    ck_assert_str_eq(seen.why[0], "rank 1 (pid 101) went away");
    ck_assert_uint_eq(form_next_deadline(f), UINT64_MAX);
    teardown();
}
END_TEST

Suite *form_suite(void)
{
    Suite *s = suite_create("form");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_form_state_table);
    tcase_add_test(tc, test_form_local_job);
    tcase_add_test(tc, test_form_job_timeout);
    tcase_add_test(tc, test_form_refusals);
    tcase_add_test(tc, test_form_nranks_mismatch);
    tcase_add_test(tc, test_form_leave);
    tcase_add_test(tc, test_form_rank_dies);
    tcase_add_test(tc, test_form_joined_rank_gone);
    tcase_add_test(tc, test_form_split);
    tcase_add_test(tc, test_form_split_timeout);
    tcase_add_test(tc, test_form_member_refused);
    tcase_add_test(tc, test_form_member_bad_membership);
    tcase_add_test(tc, test_form_member_retries);
    tcase_add_test(tc, test_form_member_not_listening);
    tcase_add_test(tc, test_form_remote_join);
    tcase_add_test(tc, test_form_qos_level);
    tcase_add_test(tc, test_form_token_only_with_retry);
    tcase_add_test(tc, test_form_rejoin);
    tcase_add_test(tc, test_form_rejoin_refusals);
    tcase_add_test(tc, test_form_rejoin_missing);
    suite_add_tcase(s, tc);
    return s;
}
