/*
 * QoS policy through hccld-ctl and clients: exit codes (0 ok, 1 refused, 2 usage), a non-admin
 * change refused, a client asking for a class above what the rules give gets the rules' class,
 * one asking for a lower class gets it, and `qos assign` moves a job at once. Also
 * `hccld-ctl topology` (hwloc's view of the node) and `hccld-ctl metrics` (Prometheus).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

START_TEST(test_ctl_exit_codes)
{
    char out[4096];

    ck_assert_int_eq(harness_ctl(0, out, sizeof(out), "qos list"), 0);
    ck_assert_ptr_nonnull(strstr(out, "MEDIUM"));
    ck_assert_int_eq(harness_ctl(0, out, sizeof(out), "--json qos list"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"default\":\"MEDIUM\""));
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "qos set GOLD --priority 1"), 1);
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "qos set LOW"), 1);
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "qos set LOW --max-bw fast"), 2);
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "qos bogus"), 2);
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "qos list extra"), 2);
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "frobnicate"), 2);
}
END_TEST

/* Runs hccld-ctl with args and asserts exit status 2 and exactly this first line (the second
 * points at --help; the whole usage is never printed for a mistake). */
static void ctl_says(const char *args, const char *line)
{
    char out[4096], want[1024];

    ck_assert_int_eq(harness_ctl(0, out, sizeof(out), args), 2);
    snprintf(want, sizeof(want), "hccld-ctl: %s\nTry 'hccld-ctl --help'.\n", line);
    ck_assert_str_eq(out, want);
}

/* Each mistake gets one line that names it and the fix. */
START_TEST(test_ctl_messages)
{
    char out[4096], cmd[1024];

    ctl_says("stauts", "unknown command 'stauts' (did you mean status?)");
    ctl_says("frobnicate", "unknown command 'frobnicate' (status, topology, comms, metrics, links, "
                           "watch or qos)");
    ctl_says("comms --jsn", "comms: unknown option '--jsn' (did you mean --json?)");
    ctl_says("--jason status", "unknown option --jason (did you mean --json?)");
    ctl_says("qos set HIGH --max-bw 5",
             "qos set: --max-bw '5': a rate needs a number with a unit: 40Gbit, 500M, 2.5Gbit/s "
             "(bit/s: bit, K, M, G, T), 5GB/s (bytes/s: B, KB, MB, GB, TB), or none");
    ctl_says("qos set HIGH --max-bw banana",
             "qos set: --max-bw 'banana': a rate needs a number with a unit: 40Gbit, 500M, "
             "2.5Gbit/s (bit/s: bit, K, M, G, T), 5GB/s (bytes/s: B, KB, MB, GB, TB), or none");
    ctl_says("qos set HIGH --max-bw", "qos set: --max-bw needs a value");
    ctl_says("qos set HIGH --priorty 3",
             "qos set: unknown option --priorty (did you mean --priority?)");
    ctl_says("qos set HIGH --priority 300",
             "qos set: --priority '300': a whole number from 0 to 255");
    ctl_says("qos lst", "qos: unknown subcommand 'lst' (did you mean qos list?)");
    ctl_says("qos set", "qos set: which class? (qos set [--max-bw RATE] [--priority N] CLASS)");
    ctl_says("watch --stal-s 3", "watch: unknown option --stal-s (did you mean --stall-s?)");
    ctl_says("", "which command? status, topology, comms, metrics, links, watch, qos");

    /* --version; HCCLD_SOCKET alone finds the admin socket beside it. */
    snprintf(cmd, sizeof(cmd), "exec %s/hccld-ctl --version", harness_bin_dir());
    ck_assert_int_eq(harness_sh(0, out, sizeof(out), cmd), 0);
    ck_assert_str_eq(out, "hccld-ctl (hcclD) " HCCLD_VERSION "\n");
    snprintf(cmd, sizeof(cmd), "HCCLD_ADMIN_SOCKET= HCCLD_SOCKET=%s exec %s/hccld-ctl qos list",
             harness_socket(), harness_bin_dir());
    ck_assert_int_eq(harness_sh(0, out, sizeof(out), cmd), 0);
    ck_assert_ptr_nonnull(strstr(out, "MEDIUM"));

    /* The client socket asked as if it were the admin socket says which it is. */
    snprintf(cmd, sizeof(cmd), "exec %s/hccld-ctl --admin-socket %s status 2>&1", harness_bin_dir(),
             harness_socket());
    ck_assert_int_eq(harness_sh(0, out, sizeof(out), cmd), 1);
    snprintf(cmd, sizeof(cmd),
             "hccld-ctl: %s refused: this is hccld's client socket, for libhccl; hccld-ctl talks "
             "to its admin socket %s (--admin-socket)\n",
             harness_socket(), harness_admin_socket());
    ck_assert_str_eq(out, cmd);
}
END_TEST

/* A client pointed at the admin socket is told so, and gets HCCL_E_PARA. */
START_TEST(test_client_on_admin_socket)
{
    char log[256], want[512];
    HcclRootInfo ri;
    int saved;

    setenv("HCCLD_SOCKET", harness_admin_socket(), 1);
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_E_PARA);
    snprintf(want, sizeof(want),
             "the daemon refused us: this is hccld's admin socket, for hccld-ctl; libhccl talks "
             "to its client socket %s (HCCLD_SOCKET)",
             harness_socket());
    ck_assert(harness_stderr_back_has(saved, log, want));
}
END_TEST

/* Someone who may reach the admin socket but is neither root nor in the admin group. */
START_TEST(test_non_admin_refused)
{
    char out[4096], why[4096], dir[256];
    struct stat st, dst;

    /* Let uid 65534 reach the socket: the daemon's check, not the file mode, must refuse. */
    snprintf(dir, sizeof(dir), "%s", harness_admin_socket());
    *strrchr(dir, '/') = '\0';
    ck_assert_int_eq(stat(harness_admin_socket(), &st), 0);
    ck_assert_int_eq(stat(dir, &dst), 0);
    ck_assert_int_eq(chmod(harness_admin_socket(), 0666), 0);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    int rc = harness_ctl(65534, why, sizeof(why), "qos set LOW --max-bw 1Gbit");
    int list = harness_ctl(65534, out, sizeof(out), "--json qos list");
    chmod(harness_admin_socket(), st.st_mode & 07777);
    chmod(dir, dst.st_mode & 07777);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(why, "permission denied") != NULL, "%s", why);
    ck_assert_int_eq(list, 0); /* reading is allowed */
    ck_assert_ptr_nonnull(
        strstr(out, "\"name\":\"LOW\",\"priority\":2,\"max_bw_bps\":10000000000"));
}
END_TEST

/* In a child: connect with HCCL_JOB_NAME=job and HCCL_QOS_CLASS=asked, then check in the
 * daemon's status that this pid got class want. */
static int class_is(const char *job, const char *asked, const char *want)
{
    pid_t pid = fork();
    int status;

    if (pid == 0) {
        char out[16384], needle[128];
        HcclRootInfo ri;
        setenv("HCCL_JOB_NAME", job, 1);
        setenv("HCCL_QOS_CLASS", asked, 1);
        if (HcclGetRootInfo(&ri) != HCCL_SUCCESS)
            _exit(3);
        if (harness_ctl(0, out, sizeof(out), "--json status") != 0)
            _exit(4);
        snprintf(needle, sizeof(needle), "\"pid\":%d,", (int)getpid());
        const char *me = strstr(out, needle);
        snprintf(needle, sizeof(needle), "\"class\":\"%s\"", want);
        const char *cls = me ? strstr(me, needle) : NULL;
        const char *end = me ? strchr(me, '}') : NULL;
        if (cls == NULL || cls > end) {
            fprintf(stderr, "job %s asking %s: want %s in %.300s\n", job, asked, want,
                    me ? me : out);
            _exit(1);
        }
        _exit(0);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

START_TEST(test_granting)
{
    ck_assert_int_eq(class_is("qos-a", "", "MEDIUM"), 0);
    ck_assert_int_eq(class_is("qos-a", "HIGH", "MEDIUM"), 0); /* no promotion by asking */
    ck_assert_int_eq(class_is("qos-a", "low", "LOW"), 0);     /* stepping down is fine */
    ck_assert_int_eq(class_is("qos-a", "PLATINUM", "MEDIUM"), 0);
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "qos assign --job 'qos-b*' HIGH"), 0);
    ck_assert_int_eq(class_is("qos-b1", "", "HIGH"), 0);
    ck_assert_int_eq(class_is("qos-b2", "HIGH", "HIGH"), 0);
    ck_assert_int_eq(class_is("qos-a", "HIGH", "MEDIUM"), 0);
}
END_TEST

START_TEST(test_topology)
{
    char out[8192];
    unsigned packages = 0, cores = 0, pus = 0;

    ck_assert_int_eq(harness_ctl(0, out, sizeof(out), "--json topology"), 0);
    const char *p = strstr(out, "\"packages\":"), *c = strstr(out, "\"cores\":"),
               *u = strstr(out, "\"pus\":");
    ck_assert_msg(p && c && u, "%s", out);
    ck_assert_int_eq(sscanf(p, "\"packages\":%u", &packages), 1);
    ck_assert_int_eq(sscanf(c, "\"cores\":%u", &cores), 1);
    ck_assert_int_eq(sscanf(u, "\"pus\":%u", &pus), 1);
    ck_assert_uint_ge(packages, 1);
    ck_assert_uint_ge(cores, packages);
    ck_assert_uint_ge(pus, cores);
    ck_assert_uint_eq(pus, (unsigned)sysconf(_SC_NPROCESSORS_ONLN));
    ck_assert_int_eq(harness_ctl(0, out, sizeof(out), "topology"), 0);
    ck_assert_ptr_nonnull(strstr(out, "hardware threads"));
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "topology extra"), 2);
}
END_TEST

/* A comm of one LOW rank appears in `comms` with its class and node count. */
START_TEST(test_comms)
{
    pid_t pid = fork();
    int status;

    if (pid == 0) {
        char out[16384], needle[160];
        HcclRootInfo ri;
        HcclComm comm;
        uint32_t id = 0;
        setenv("HCCL_JOB_NAME", "qos-comms", 1);
        setenv("HCCL_QOS_CLASS", "LOW", 1);
        if (HcclGetRootInfo(&ri) != HCCL_SUCCESS ||
            HcclCommInitRootInfo(1, &ri, 0, &comm) != HCCL_SUCCESS)
            _exit(3);
        if (harness_ctl(0, out, sizeof(out), "--json comms") != 0)
            _exit(4);
        /* Comm ids are the daemon's; find ours by its class and size. */
        snprintf(needle, sizeof(needle), "\"nranks\":1,\"joined\":1,\"nnodes\":1");
        const char *me = strstr(out, needle);
        const char *cls = me ? strstr(me, "\"class\":\"LOW\"") : NULL;
        if (cls == NULL || cls > strchr(me, '}') || sscanf(out, "[{\"id\":%u", &id) != 1) {
            fprintf(stderr, "comms: %.500s\n", out);
            _exit(1);
        }
        if (harness_ctl(0, out, sizeof(out), "comms") != 0 || strstr(out, "class LOW") == NULL)
            _exit(5);
        _exit(HcclCommDestroy(comm) == HCCL_SUCCESS ? 0 : 6);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %d", status);
}
END_TEST

static unsigned long long op_count(void)
{
    char out[16384];
    const char *p;
    unsigned long long n = 0;

    ck_assert_int_eq(harness_ctl(0, out, sizeof(out), "metrics"), 0);
    p = strstr(out, "\nhccld_op_duration_seconds_count ");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p, "\nhccld_op_duration_seconds_count %llu", &n), 1);
    return n;
}

static int five_allreduces(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float x = 1, y = 0;

    for (int i = 0; i < 5; i++)
        if (HcclAllReduce(&x, &y, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) !=
                HCCL_SUCCESS ||
            y != (float)n)
            return 1;
    return 0;
}

/* Prometheus text: every family typed, the histogram ending in +Inf, a line per class; ops
 * the daemon runs inside the node count in the histogram too. */
START_TEST(test_metrics)
{
    static char out[1 << 20]; /* the per-peer families of earlier multinode tests too */
    unsigned long long before = op_count();

    setenv("HCCL_L0_MODE", "daemon", 1);
    ck_assert_int_eq(harness_run_ranks(2, five_allreduces, NULL, 30), 0);
    unsetenv("HCCL_L0_MODE");
    ck_assert_uint_ge(op_count(), before + 5);
    ck_assert_int_eq(harness_ctl(0, out, sizeof(out), "metrics"), 0);
    ck_assert_msg(strlen(out) + 1 < sizeof(out), "the exposition outgrew the test's buffer");
    ck_assert_ptr_nonnull(strstr(out, "# TYPE hccld_ops_total counter\nhccld_ops_total "));
    ck_assert_ptr_nonnull(strstr(out, "# TYPE hccld_op_duration_seconds histogram"));
    ck_assert_ptr_nonnull(strstr(out, "hccld_op_duration_seconds_bucket{le=\"+Inf\"} "));
    ck_assert_ptr_nonnull(strstr(out, "hccld_op_duration_seconds_count "));
    ck_assert_ptr_nonnull(
        strstr(out, "hccld_class_max_bytes_per_second{class=\"HIGH\"} 5000000000"));
    ck_assert_ptr_nonnull(strstr(out, "hccld_class_rate_bytes_per_second{class=\"LOW\"} "));
    ck_assert_int_eq(harness_ctl(0, NULL, 0, "metrics --json"), 2);
}
END_TEST

Suite *qos_suite(void)
{
    Suite *s = suite_create("qos");
    TCase *tc = tcase_create("policy");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ctl_exit_codes);
    tcase_add_test(tc, test_ctl_messages);
    tcase_add_test(tc, test_client_on_admin_socket);
    tcase_add_test(tc, test_non_admin_refused);
    tcase_add_test(tc, test_granting);
    tcase_add_test(tc, test_topology);
    tcase_add_test(tc, test_metrics);
    tcase_add_test(tc, test_comms);
    suite_add_tcase(s, tc);
    return s;
}
