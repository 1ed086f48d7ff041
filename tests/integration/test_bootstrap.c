/*
 * Communicators whose root info the ranks agree on without exchanging anything: HCCL rank tables
 * (HcclCommInitClusterInfo), launcher environments (torchrun, Slurm, Open MPI through
 * HcclCommInitFromEnv) and splits of communicators across daemons. Daemons run on loopback
 * (127.0.0.1, a free port each), so rank tables name them "127.0.0.1:PORT".
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define MAXD 3
#define MAXR (MAXD * 3)
#define COUNT 1000

typedef struct cluster {
    pid_t pids[MAXD];
    char socks[MAXD][256];
    char addrs[MAXD][64];
    unsigned n;
    char dir[64];
    char table[128];
} cluster_t;

/* Daemon 0 is the test's own daemon; the others are started here. */
static void cluster_start(cluster_t *c, unsigned n)
{
    memset(c, 0, sizeof(*c));
    c->n = n;
    snprintf(c->socks[0], sizeof(c->socks[0]), "%s", harness_socket());
    for (unsigned i = 1; i < n; i++) {
        c->pids[i] = harness_daemon_spawn(c->socks[i], sizeof(c->socks[i]));
        ck_assert_int_gt(c->pids[i], 0);
    }
    for (unsigned i = 0; i < n; i++)
        ck_assert_int_eq(harness_daemon_addr(c->socks[i], c->addrs[i], sizeof(c->addrs[i])), 0);
    snprintf(c->dir, sizeof(c->dir), "/tmp/hccl-rt-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(c->dir));
    snprintf(c->table, sizeof(c->table), "%s/rank_table.json", c->dir);
}

static void cluster_stop(cluster_t *c)
{
    for (unsigned i = 1; i < c->n; i++) {
        ck_assert_msg(harness_alive(c->pids[i]), "daemon %u died", i);
        harness_daemon_stop(c->pids[i]);
    }
    unlink(c->table);
    rmdir(c->dir);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* HCCL's form: every value a string; `numbers` writes rank ids and the count as JSON numbers.
 * Server s holds ranks s * per .. s * per + per - 1, or with `cyclic` s, s + n, s + 2n, ... */
static void write_table(const cluster_t *c, unsigned per, int numbers, int cyclic)
{
    char text[4096];
    size_t n = 0;

    n +=
        (size_t)snprintf(text + n, sizeof(text) - n,
                         numbers ? "{\"version\":\"1.0\",\"server_count\":%u,\"server_list\":["
                                 : "{\"version\":\"1.0\",\"server_count\":\"%u\",\"server_list\":[",
                         c->n);
    for (unsigned s = 0; s < c->n; s++) {
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s{\"server_id\":\"%s\",\"device\":[",
                              s ? "," : "", c->addrs[s]);
        for (unsigned d = 0; d < per; d++)
            n += (size_t)snprintf(text + n, sizeof(text) - n,
                                  numbers
                                      ? "%s{\"device_id\":%u,\"device_ip\":\"192.168.%u.%u\","
                                        "\"rank_id\":%u}"
                                      : "%s{\"device_id\":\"%u\",\"device_ip\":\"192.168.%u.%u\","
                                        "\"rank_id\":\"%u\"}",
                                  d ? "," : "", d, s, d, cyclic ? d * c->n + s : s * per + d);
        n += (size_t)snprintf(text + n, sizeof(text) - n, "]}");
    }
    snprintf(text + n, sizeof(text) - n, "],\"status\":\"completed\"}");
    write_file(c->table, text);
}

/* Allreduce of COUNT elements, checked element by element: rank r gives (r + 1) * base + i. */
static int allreduce_check(HcclComm comm, HcclStream stream, int32_t *x, int32_t *y, uint32_t r,
                           int32_t base)
{
    for (int i = 0; i < COUNT; i++) {
        x[i] = (int32_t)(r + 1) * base + i;
        y[i] = -1;
    }
    return HcclAllReduce(x, y, COUNT, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, stream) ==
                   HCCL_SUCCESS
               ? 0
               : 1;
}

/* The sum over the given ranks of (rank + 1) * base + i, for every i. */
static int sum_ok(const int32_t *y, const uint32_t *ranks, uint32_t n, int32_t base)
{
    int32_t s = 0;

    for (uint32_t k = 0; k < n; k++)
        s += (int32_t)(ranks[k] + 1) * base;
    for (int i = 0; i < COUNT; i++)
        if (y[i] != s + (int32_t)n * i) {
            fprintf(stderr, "element %d: got %d, want %d\n", i, y[i], s + (int32_t)n * i);
            return 0;
        }
    return 1;
}

/* comm must be rank r of n: an allreduce over it is checked. */
static int comm_works(HcclComm comm, uint32_t r, uint32_t n)
{
    int32_t x[COUNT], y[COUNT];
    uint32_t got_n = 0, got_r = 99, all[MAXR * 2];

    if (HcclGetRankSize(comm, &got_n) != HCCL_SUCCESS || got_n != n ||
        HcclGetRankId(comm, &got_r) != HCCL_SUCCESS || got_r != r) {
        fprintf(stderr, "rank %u of %u: comm says rank %u of %u\n", r, n, got_r, got_n);
        return 1;
    }
    for (uint32_t k = 0; k < n; k++)
        all[k] = k;
    if (allreduce_check(comm, NULL, x, y, r, 100) != 0 || !sum_ok(y, all, n, 100))
        return 2;
    return 0;
}

typedef int (*child_fn)(uint32_t r, uint32_t n, void *arg);

/* Forks n processes, rank r on the daemon of socks[r]; returns how many failed. */
static int run_children(uint32_t n, char *const *socks, child_fn fn, void *arg, unsigned timeout_s)
{
    pid_t pids[MAXR];

    for (uint32_t r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(timeout_s);
            setenv("HCCLD_SOCKET", socks[r], 1);
            _exit(fn(r, n, arg));
        }
        ck_assert_int_gt(pids[r], 0);
    }
    return harness_wait(pids, n, timeout_s);
}

static int expect_rc(const char *what, uint32_t r, HcclResult got, HcclResult want)
{
    if (got == want)
        return 0;
    fprintf(stderr, "rank %u: %s gave %d (%s), want %d\n", r, what, got, HcclGetErrorString(got),
            want);
    return 1;
}

/* Two comms from the same rank table: the second one is another job (the per-process count). */
static int table_child(uint32_t r, uint32_t n, void *arg)
{
    const char *path = arg;
    HcclComm a = NULL, b = NULL;
    int st;

    if (expect_rc("HcclCommInitClusterInfo", r, HcclCommInitClusterInfo(path, r, &a),
                  HCCL_SUCCESS) != 0)
        return 10;
    if ((st = comm_works(a, r, n)) != 0)
        return st;
    if (expect_rc("second HcclCommInitClusterInfo", r, HcclCommInitClusterInfo(path, r, &b),
                  HCCL_SUCCESS) != 0)
        return 11;
    if ((st = comm_works(b, r, n)) != 0 || (st = comm_works(a, r, n)) != 0)
        return 20 + st;
    return HcclCommDestroy(a) == HCCL_SUCCESS && HcclCommDestroy(b) == HCCL_SUCCESS ? 0 : 12;
}

static int run_table(cluster_t *c, unsigned per, int cyclic, child_fn fn, unsigned timeout_s)
{
    char *socks[MAXR];

    for (uint32_t r = 0; r < c->n * per; r++)
        socks[r] = c->socks[cyclic ? r % c->n : r / per];
    return run_children(c->n * per, socks, fn, c->table, timeout_s);
}

START_TEST(test_ranktable_allreduce)
{
    /* per 3, cyclic: each server's rank ids alternate with the others' (any layout runs). */
    for (unsigned nd = 2; nd <= 3; nd++)
        for (unsigned per = 1; per <= 3; per++) {
            cluster_t c;
            int cyclic = per == 3;
            cluster_start(&c, nd);
            write_table(&c, per, per == 2, cyclic);
            ck_assert_msg(run_table(&c, per, cyclic, table_child, 60) == 0,
                          "%u daemons x %u ranks%s", nd, per, cyclic ? ", cyclic" : "");
            cluster_stop(&c);
        }
}
END_TEST

/* HcclCommInitClusterInfoConfig: the config's name and hcclAlgo count, a bad magic word is
 * HCCL_E_PARA before anything is asked of the daemon. */
static int table_config_child(uint32_t r, uint32_t n, void *arg)
{
    const char *path = arg;
    char name[COMM_NAME_MAX_LENGTH];
    HcclCommConfig cfg;
    HcclComm a = NULL;
    int st;

    HcclCommConfigInit(&cfg);
    memset(&cfg, 0, 8 + 4); /* size and magic word */
    if (expect_rc("bad magic", r, HcclCommInitClusterInfoConfig(path, r, &cfg, &a), HCCL_E_PARA))
        return 10;
    HcclCommConfigInit(&cfg);
    snprintf(cfg.hcclCommName, sizeof(cfg.hcclCommName), "rt_comm");
    snprintf(cfg.hcclAlgo, sizeof(cfg.hcclAlgo), "level0:NA;level1:ring");
    if (expect_rc("HcclCommInitClusterInfoConfig", r,
                  HcclCommInitClusterInfoConfig(path, r, &cfg, &a), HCCL_SUCCESS) != 0)
        return 11;
    if ((st = comm_works(a, r, n)) != 0)
        return st;
    if (HcclGetCommName(a, name) != HCCL_SUCCESS || strcmp(name, "rt_comm") != 0)
        return 12;
    return HcclCommDestroy(a) == HCCL_SUCCESS ? 0 : 13;
}

START_TEST(test_ranktable_config)
{
    cluster_t c;

    cluster_start(&c, 2);
    write_table(&c, 1, 0, 0);
    ck_assert_int_eq(run_table(&c, 1, 0, table_config_child, 60), 0);
    cluster_stop(&c);
}
END_TEST

static const char *const good_head = "{\"version\":\"1.0\",\"server_count\":\"1\",\"status\":"
                                     "\"completed\",\"server_list\":[{\"server_id\":\"127.0.0.1\","
                                     "\"device\":[";

/* Rank tables that must be refused before any daemon is asked, with their exact result. */
START_TEST(test_ranktable_invalid)
{
    static const struct {
        const char *devices_or_text;
        HcclResult want;
    } cases[] = {
        {"{\"version\":\"1.0\",\"server_list\":[", HCCL_E_PARA}, /* malformed JSON */
        {"[1,2]", HCCL_E_PARA},
        {"{\"rank_id\":\"0\"},{\"rank_id\":\"0\"}", HCCL_E_PARA},   /* duplicate rank id */
        {"{\"rank_id\":\"0\"},{\"rank_id\":\"2\"}", HCCL_E_PARA},   /* out of range */
        {"{\"rank_id\":\"0\"},{\"device_id\":\"1\"}", HCCL_E_PARA}, /* missing rank id */
        {"{\"rank_id\":\"-1\"},{\"rank_id\":\"0\"}", HCCL_E_PARA},
        {"{\"rank_id\":\"0x1\"},{\"rank_id\":\"0\"}", HCCL_E_PARA},
        {"{\"rank_id\":\"0\",\"device_id\":\"3\"},{\"rank_id\":\"1\",\"device_id\":\"3\"}",
         HCCL_E_PARA}, /* duplicate device id */
    };
    char dir[] = "/tmp/hccl-rt-XXXXXX", path[128], text[1024];
    HcclComm comm = NULL;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/rt.json", dir);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *t = cases[i].devices_or_text;
        if (t[0] == '{' && t[1] == '"' && t[2] != 'v')
            snprintf(text, sizeof(text), "%s%s]}]}", good_head, t);
        else
            snprintf(text, sizeof(text), "%s", t);
        write_file(path, text);
        ck_assert_msg(HcclCommInitClusterInfo(path, 0, &comm) == cases[i].want, "case %zu: %s", i,
                      text);
    }
    /* Header problems: version, status, server count, server ids. */
    static const char *const headers[] = {
        "{\"version\":\"2.0\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"127.0.0.1\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"2\",\"server_list\":[{\"server_id\":"
        "\"127.0.0.1\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"status\":\"initializing\",\"server_list\":"
        "[{\"server_id\":\"127.0.0.1\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"not-an-ip\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"127.0.0.1:99999\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"2\",\"server_list\":[{\"server_id\":"
        "\"127.0.0.1\",\"device\":[{\"rank_id\":\"0\"}]},{\"server_id\":\"127.0.0.1:60000\","
        "\"device\":[{\"rank_id\":\"1\"}]}]}", /* the same server twice */
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"127.0.0.1\",\"device\":[]}]}",
    };
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        write_file(path, headers[i]);
        ck_assert_msg(HcclCommInitClusterInfo(path, 0, &comm) == HCCL_E_PARA, "header %zu", i);
    }
    /* A rank the table lacks. */
    snprintf(text, sizeof(text), "%s{\"rank_id\":\"0\"},{\"rank_id\":\"1\"}]}]}", good_head);
    write_file(path, text);
    ck_assert_int_eq(HcclCommInitClusterInfo(path, 2, &comm), HCCL_E_PARA);
    ck_assert_int_eq(HcclCommInitClusterInfo(NULL, 0, &comm), HCCL_E_PTR);
    ck_assert_int_eq(HcclCommInitClusterInfo(path, 0, NULL), HCCL_E_PTR);
    unlink(path);
    ck_assert_int_eq(HcclCommInitClusterInfo(path, 0, &comm), HCCL_E_NOT_FOUND);
    ck_assert_int_eq(HcclCommInitClusterInfo(dir, 0, &comm), HCCL_E_NOT_FOUND);
    rmdir(dir);
    /* RANK_TABLE_FILE without a rank anywhere in the environment. */
    setenv("RANK_TABLE_FILE", path, 1);
    ck_assert_int_eq(HcclCommInitFromEnv(&comm), HCCL_E_PARA);
    unsetenv("RANK_TABLE_FILE");
}
END_TEST

static int wrong_server_child(uint32_t r, uint32_t n, void *arg)
{
    HcclComm comm = NULL;

    /* Rank 1 is listed under daemon 1 but talks to daemon 0. */
    return expect_rc("HcclCommInitClusterInfo", r, HcclCommInitClusterInfo(arg, 1, &comm),
                     HCCL_E_PARA);
}

START_TEST(test_ranktable_wrong_server)
{
    cluster_t c;
    char *socks[1];

    cluster_start(&c, 2);
    write_table(&c, 1, 0, 0);
    socks[0] = c.socks[0];
    ck_assert_int_eq(run_children(1, socks, wrong_server_child, c.table, 30), 0);
    cluster_stop(&c);
}
END_TEST

/* Rank 0 (on the root daemon) comes late: the member daemon's join finds the job unknown at
 * the root and retries until rank 0 opens it. */
static int late_root_child(uint32_t r, uint32_t n, void *arg)
{
    HcclComm comm = NULL;
    int st;

    setenv("HCCL_CONNECT_TIMEOUT", "30", 1);
    if (r == 0)
        usleep(1500 * 1000);
    if (expect_rc("HcclCommInitClusterInfo", r, HcclCommInitClusterInfo(arg, r, &comm),
                  HCCL_SUCCESS) != 0)
        return 10;
    st = comm_works(comm, r, n);
    return HcclCommDestroy(comm) == HCCL_SUCCESS ? st : 11;
}

START_TEST(test_member_before_root)
{
    cluster_t c;

    cluster_start(&c, 2);
    write_table(&c, 1, 0, 0);
    ck_assert_int_eq(run_table(&c, 1, 0, late_root_child, 60), 0);
    /* And with two ranks per daemon, both of the root's late. */
    write_table(&c, 2, 0, 0);
    ck_assert_int_eq(run_table(&c, 2, 0, late_root_child, 60), 0);
    cluster_stop(&c);
}
END_TEST

static int lonely_member_child(uint32_t r, uint32_t n, void *arg)
{
    HcclComm comm = NULL;
    time_t t0 = time(NULL);
    int st;

    setenv("HCCL_CONNECT_TIMEOUT", "2", 1);
    st = expect_rc("HcclCommInitClusterInfo", 1, HcclCommInitClusterInfo(arg, 1, &comm),
                   HCCL_E_TIMEOUT);
    if (time(NULL) - t0 > 8) {
        fprintf(stderr, "the timeout took %ld s\n", (long)(time(NULL) - t0));
        st = 1;
    }
    return st;
}

/* Rank 0 never comes: rank 1's daemon retries, then gives up with HCCL_E_TIMEOUT in time. */
START_TEST(test_root_never_comes)
{
    cluster_t c;
    char *socks[1];

    cluster_start(&c, 2);
    write_table(&c, 1, 0, 0);
    socks[0] = c.socks[1];
    ck_assert_int_eq(run_children(1, socks, lonely_member_child, c.table, 30), 0);
    cluster_stop(&c);
}
END_TEST

/* Different HCCL_JOB_KEYs: the member's daemon cannot prove the key and fails at once, long
 * before the join timeout; the root's rank then times out. */
static int key_child(uint32_t r, uint32_t n, void *arg)
{
    HcclComm comm = NULL;
    time_t t0 = time(NULL);
    int st;

    setenv("HCCL_CONNECT_TIMEOUT", "6", 1);
    setenv("HCCL_JOB_KEY",
           r == 0 ? "00112233445566778899aabbccddeeff" : "ffeeddccbbaa99887766554433221100", 1);
    if (r == 1)
        usleep(500 * 1000);
    st = expect_rc("HcclCommInitClusterInfo", r, HcclCommInitClusterInfo(arg, r, &comm),
                   r == 0 ? HCCL_E_TIMEOUT : HCCL_E_TCP_CONNECT);
    if (r == 1 && time(NULL) - t0 > 3) {
        fprintf(stderr, "the wrong key took %ld s to fail\n", (long)(time(NULL) - t0));
        st = 1;
    }
    return st;
}

static int bad_key_child(uint32_t r, uint32_t n, void *arg)
{
    HcclComm comm = NULL;

    setenv("HCCL_JOB_KEY", "not-hex", 1);
    return expect_rc("HcclCommInitClusterInfo", r, HcclCommInitClusterInfo(arg, r, &comm),
                     HCCL_E_PARA);
}

START_TEST(test_job_key)
{
    cluster_t c;
    char *socks[2];

    cluster_start(&c, 2);
    write_table(&c, 1, 0, 0);
    socks[0] = c.socks[0];
    socks[1] = c.socks[1];
    ck_assert_int_eq(run_children(2, socks, key_child, c.table, 30), 0);
    ck_assert_int_eq(run_children(1, socks, bad_key_child, c.table, 30), 0);
    cluster_stop(&c);
}
END_TEST

typedef struct env_arg {
    const cluster_t *c;
    int kind; /* 0 torchrun, 1 torchrun with HCCL_ROOT_PORT, 2 Slurm, 3 Open MPI */
    unsigned per;
} env_arg_t;

static void setenv_u(const char *name, unsigned v)
{
    char buf[16];

    snprintf(buf, sizeof(buf), "%u", v);
    setenv(name, buf, 1);
}

static int env_child(uint32_t r, uint32_t n, void *arg)
{
    const env_arg_t *a = arg;
    const char *root = a->c->addrs[0], *colon = strrchr(root, ':');
    HcclComm comm = NULL;
    char job[48];
    int st;

    /* One launcher job id per run, as a launcher gives one per job. */
    snprintf(job, sizeof(job), "test-%d-%d-%u", (int)getppid(), a->kind, a->per);
    switch (a->kind) {
    case 0:
    case 1:
        setenv_u("RANK", r);
        setenv_u("WORLD_SIZE", n);
        setenv_u("LOCAL_RANK", r % a->per);
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", "29500", 1); /* torch's store: never the daemon's port */
        setenv("TORCHELASTIC_RUN_ID", job, 1);
        if (a->kind == 0) {
            setenv("HCCL_ROOT_ADDR", root, 1);
        } else {
            setenv("HCCL_ROOT_PORT", colon + 1, 1);
            setenv("HCCL_JOB_KEY", "0123456789abcdef0123456789abcdef", 1);
        }
        break;
    case 2:
        setenv_u("SLURM_PROCID", r);
        setenv_u("SLURM_NTASKS", n);
        setenv_u("SLURM_LOCALID", r % a->per);
        setenv("SLURM_JOB_ID", job, 1);
        setenv("SLURM_STEP_ID", "0", 1);
        setenv("SLURM_STEP_NODELIST", "localhost,node[02-03]", 1);
        setenv("HCCL_ROOT_PORT", colon + 1, 1);
        break;
    default:
        setenv_u("OMPI_COMM_WORLD_RANK", r);
        setenv_u("OMPI_COMM_WORLD_SIZE", n);
        setenv_u("OMPI_COMM_WORLD_LOCAL_RANK", r % a->per);
        setenv("OMPI_MCA_ess_base_jobid", job, 1);
        setenv("HCCL_ROOT_ADDR", root, 1);
        break;
    }
    if (expect_rc("HcclCommInitFromEnv", r, HcclCommInitFromEnv(&comm), HCCL_SUCCESS) != 0)
        return 10;
    st = comm_works(comm, r, n);
    return HcclCommDestroy(comm) == HCCL_SUCCESS ? st : 11;
}

/* torchrun-style environments across 2 daemons (and Slurm's and Open MPI's). */
START_TEST(test_launcher_env)
{
    cluster_t c;
    char *socks[MAXR];

    cluster_start(&c, 2);
    for (int kind = 0; kind < 4; kind++)
        for (unsigned per = 1; per <= 2; per++) {
            env_arg_t a = {.c = &c, .kind = kind, .per = per};
            for (uint32_t r = 0; r < 2 * per; r++)
                socks[r] = c.socks[r / per];
            ck_assert_msg(run_children(2 * per, socks, env_child, &a, 60) == 0,
                          "launcher %d, 2 daemons x %u ranks", kind, per);
        }
    cluster_stop(&c);
}
END_TEST

/* What the environment lacks is refused at once. */
START_TEST(test_launcher_env_invalid)
{
    HcclComm comm = NULL;

    ck_assert_int_eq(HcclCommInitFromEnv(NULL), HCCL_E_PTR);
    ck_assert_int_eq(HcclCommInitFromEnv(&comm), HCCL_E_PARA); /* nothing at all */
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    ck_assert_int_eq(HcclCommInitFromEnv(&comm), HCCL_E_PARA); /* Open MPI needs HCCL_ROOT_ADDR */
    setenv("HCCL_ROOT_ADDR", "127.0.0.1:70000", 1);
    ck_assert_int_eq(HcclCommInitFromEnv(&comm), HCCL_E_PARA);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("HCCL_ROOT_ADDR", "127.0.0.1", 1);
    ck_assert_int_eq(HcclCommInitFromEnv(&comm), HCCL_E_PARA); /* rank >= size */
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    unsetenv("HCCL_ROOT_ADDR");
    ck_assert_int_eq(HcclCommInitFromEnv(&comm), HCCL_E_PARA); /* no MASTER_ADDR */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_STEP_NODELIST", "node[1-", 1);
    ck_assert_int_eq(HcclCommInitFromEnv(&comm), HCCL_E_PARA); /* malformed node list */
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_STEP_NODELIST");
}
END_TEST

/* 2 daemons x 2 ranks: rows {0,1} {2,3} stay on one daemon, columns {0,2} {1,3} span both. */
static int grid_split(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    HcclComm row = NULL, col = NULL, rev = NULL;
    HcclStream s1 = NULL, s2 = NULL;
    int32_t xr[COUNT], yr[COUNT], xc[COUNT], yc[COUNT];
    uint32_t rows[2] = {r / 2 * 2, r / 2 * 2 + 1}, cols[2] = {r % 2, r % 2 + 2}, rr, cr;

    if (HcclCommSplit(comm, r / 2, r, &row) != HCCL_SUCCESS ||
        HcclCommSplit(comm, r % 2, r, &col) != HCCL_SUCCESS)
        return 1;
    if (HcclGetRankId(row, &rr) != HCCL_SUCCESS || rr != r % 2 ||
        HcclGetRankId(col, &cr) != HCCL_SUCCESS || cr != r / 2)
        return 2;
    /* Both at once: each on its own stream, then wait for both. */
    if (HcclStreamCreate(&s1) != HCCL_SUCCESS || HcclStreamCreate(&s2) != HCCL_SUCCESS)
        return 3;
    if (allreduce_check(row, s1, xr, yr, r, 1000) != 0 ||
        allreduce_check(col, s2, xc, yc, r, 10) != 0 || HcclStreamSynchronize(s1) != HCCL_SUCCESS ||
        HcclStreamSynchronize(s2) != HCCL_SUCCESS)
        return 4;
    if (!sum_ok(yr, rows, 2, 1000) || !sum_ok(yc, cols, 2, 10))
        return 5;
    /* A split of a split across daemons: reversed, so its root is the other daemon. */
    if (HcclCommSplit(col, 7, 10 - cr, &rev) != HCCL_SUCCESS || comm_works(rev, 1 - cr, 2) != 0)
        return 6;
    if (comm_works(row, r % 2, 2) != 0 || comm_works(col, r / 2, 2) != 0 ||
        comm_works(comm, r, n) != 0)
        return 7;
    HcclStreamDestroy(s1);
    HcclStreamDestroy(s2);
    if (HcclCommDestroy(rev) != HCCL_SUCCESS || HcclCommDestroy(row) != HCCL_SUCCESS ||
        HcclCommDestroy(col) != HCCL_SUCCESS)
        return 8;
    return 0;
}

static int run_grid(rank_fn fn)
{
    cluster_t c;
    char *socks[4];
    pid_t pids[4];
    int failed;

    cluster_start(&c, 2);
    for (uint32_t r = 0; r < 4; r++)
        socks[r] = c.socks[r / 2];
    ck_assert_int_eq(harness_spawn_ranks_on(4, socks, fn, NULL, 90, pids), 0);
    failed = harness_wait(pids, 4, 90);
    cluster_stop(&c);
    return failed;
}

START_TEST(test_split_grid_across_daemons)
{
    ck_assert_int_eq(run_grid(grid_split), 0);
}
END_TEST

static int nocolor_split(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    HcclComm child = (HcclComm)1, bad = (HcclComm)1;
    uint32_t color = r % 2 == 0 ? 5 : HCCL_SPLIT_NOCOLOR;
    HcclResult rc;

    if (HcclCommSplit(comm, color, 0, &child) != HCCL_SUCCESS)
        return 1;
    if (r % 2 == 1 && child != NULL)
        return 2;
    if (r % 2 == 0 && (child == NULL || comm_works(child, r / 2, 2) != 0))
        return 3;
    /* One child whose ranks alternate between the daemons (its rank: the key). */
    rc = HcclCommSplit(comm, 0, (r % 2) * 2 + r / 2, &bad);
    if (expect_rc("interleaved split", r, rc, HCCL_SUCCESS) != 0 ||
        comm_works(bad, (r % 2) * 2 + r / 2, n) != 0 || HcclCommDestroy(bad) != HCCL_SUCCESS)
        return 4;
    if (HcclCommSplit(NULL, 0, 0, &bad) != HCCL_E_PTR ||
        HcclCommSplit(comm, 0, 0, NULL) != HCCL_E_PTR)
        return 5;
    if (comm_works(comm, r, n) != 0)
        return 6;
    return child == NULL || HcclCommDestroy(child) == HCCL_SUCCESS ? 0 : 7;
}

START_TEST(test_split_nocolor_across_daemons)
{
    ck_assert_int_eq(run_grid(nocolor_split), 0);
}
END_TEST

Suite *bootstrap_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc = tcase_create("bootstrap");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_ranktable_allreduce);
    tcase_add_test(tc, test_ranktable_config);
    tcase_add_test(tc, test_ranktable_invalid);
    tcase_add_test(tc, test_ranktable_wrong_server);
    tcase_add_test(tc, test_member_before_root);
    tcase_add_test(tc, test_root_never_comes);
    tcase_add_test(tc, test_job_key);
    tcase_add_test(tc, test_launcher_env);
    tcase_add_test(tc, test_launcher_env_invalid);
    tcase_add_test(tc, test_split_grid_across_daemons);
    tcase_add_test(tc, test_split_nocolor_across_daemons);
    suite_add_tcase(s, tc);
    return s;
}
