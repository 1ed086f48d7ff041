/* QoS policy: rates, classes and rules from an INI file, classification and granting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"
#include "log.h"
#include "sched/qos_conf.h"
#include "server/daemon_conf.h"
#include "server/server.h"
#include "test_list.h"

static char path[64];

static void write_conf(const char *text)
{
    int fd;
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/hccld-qos-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_rates)
{
    uint64_t v;

    ck_assert_int_eq(parse_rate("40Gbit", &v), 0);
    ck_assert_uint_eq(v, 40000000000ull);
    ck_assert_int_eq(parse_rate("2.5Gbit/s", &v), 0);
    ck_assert_uint_eq(v, 2500000000ull);
    ck_assert_int_eq(parse_rate("10G", &v), 0);
    ck_assert_uint_eq(v, 10000000000ull);
    ck_assert_int_eq(parse_rate("5GB/s", &v), 0);
    ck_assert_uint_eq(v, 40000000000ull);
    ck_assert_int_eq(parse_rate("800Mbit", &v), 0);
    ck_assert_uint_eq(v, 800000000ull);
    ck_assert_int_eq(parse_rate("none", &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(parse_rate("0", &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_ne(parse_rate("", &v), 0);
    ck_assert_int_ne(parse_rate("-1G", &v), 0);
    ck_assert_int_ne(parse_rate("10Q", &v), 0);
    /* A bare number has no unit: 5 is refused, not taken as 5 bit/s. */
    ck_assert_int_ne(parse_rate("5", &v), 0);
    ck_assert_int_ne(parse_rate("2.5/s", &v), 0);
    ck_assert_int_ne(parse_rate("nan", &v), 0);
    ck_assert_int_ne(parse_rate("inf", &v), 0);
    /* Found by the conf fuzzer: these overflowed into "no cap". */
    ck_assert_int_ne(parse_rate("1e15TB", &v), 0);
    ck_assert_int_ne(parse_rate("9e14GB/s", &v), 0);
}
END_TEST

START_TEST(test_defaults)
{
    qos_policy_t p;
    int refused;

    qos_policy_defaults(&p);
    ck_assert_int_eq(p.ncls, 3);
    ck_assert_str_eq(p.cls[qos_class_find(&p, "high")].name, "HIGH");
    ck_assert_uint_eq(p.cls[qos_class_find(&p, "HIGH")].max_bw_bps, 40000000000ull);
    ck_assert_uint_eq(p.cls[qos_class_find(&p, "LOW")].latency_us, 200);
    ck_assert_int_eq(p.cls[qos_class_find(&p, "HIGH")].dscp, 46);
    ck_assert_int_eq(p.cls[qos_class_find(&p, "MEDIUM")].dscp, 18);
    ck_assert_int_eq(p.cls[qos_class_find(&p, "LOW")].dscp, 8);
    ck_assert_int_eq(qos_classify(&p, 1000, NULL, 0, "job"), qos_class_find(&p, "MEDIUM"));
    /* Nobody is promoted by asking; anyone may step down. */
    int medium = qos_class_find(&p, "MEDIUM");
    ck_assert_int_eq(qos_grant(&p, medium, "HIGH", &refused), medium);
    ck_assert_int_eq(refused, 1);
    ck_assert_int_eq(qos_grant(&p, medium, "LOW", &refused), qos_class_find(&p, "LOW"));
    ck_assert_int_eq(refused, 0);
    ck_assert_int_eq(qos_grant(&p, medium, "", &refused), medium);
    ck_assert_int_eq(refused, 0);
    ck_assert_int_eq(qos_grant(&p, medium, "BOGUS", &refused), medium);
    ck_assert_int_eq(refused, 1);
}
END_TEST

START_TEST(test_load_rules)
{
    qos_policy_t p;
    char err[256];
    gid_t gids[] = {50, 4242};

    write_conf("[daemon]\nworkers = 2\n"
               "[class.HIGH]\nmax_bw = 25Gbit\n"
               "[class.BULK]\npriority = 3\nmax_bw = 1Gbit/s\nlatency_us = 1000\ndscp = 10\n"
               "chunk_kib = 64\n"
               "[class.LOW]\ndscp = -1\n"
               "[qos]\ndefault = LOW\nadmin_group = hccl-admin\n"
               "[rules]\nuid.1000 = HIGH\ngid.4242 = MEDIUM\njob.bert-* = BULK\n");
    qos_policy_defaults(&p);
    ck_assert_msg(qos_policy_load(path, &p, err, sizeof(err)) == 0, "%s", err);
    unlink(path);
    ck_assert_int_eq(p.ncls, 4);
    ck_assert_uint_eq(p.cls[qos_class_find(&p, "HIGH")].max_bw_bps, 25000000000ull);
    ck_assert_uint_eq(p.cls[qos_class_find(&p, "HIGH")].priority, 0);
    ck_assert_uint_eq(p.cls[qos_class_find(&p, "BULK")].priority, 3);
    ck_assert_str_eq(p.admin_group, "hccl-admin");
    ck_assert_int_eq(p.cls[qos_class_find(&p, "BULK")].dscp, 10);
    ck_assert_uint_eq(p.cls[qos_class_find(&p, "BULK")].chunk_kib, 64);
    ck_assert_uint_eq(p.cls[qos_class_find(&p, "LOW")].chunk_kib, 256);
    ck_assert_uint_eq(p.cls[qos_class_find(&p, "HIGH")].chunk_kib, 1024);
    ck_assert_int_eq(p.cls[qos_class_find(&p, "LOW")].dscp, -1);
    /* First match wins, in file order. */
    ck_assert_int_eq(qos_classify(&p, 1000, gids, 2, "bert-large"), qos_class_find(&p, "HIGH"));
    ck_assert_int_eq(qos_classify(&p, 7, gids, 2, "bert-large"), qos_class_find(&p, "MEDIUM"));
    ck_assert_int_eq(qos_classify(&p, 7, gids, 1, "bert-large"), qos_class_find(&p, "BULK"));
    ck_assert_int_eq(qos_classify(&p, 7, gids, 1, "gpt"), qos_class_find(&p, "LOW"));
}
END_TEST

static void expect_error(const char *text, const char *needle)
{
    qos_policy_t p;
    char err[256];

    write_conf(text);
    qos_policy_defaults(&p);
    ck_assert_int_eq(qos_policy_load(path, &p, err, sizeof(err)), -1);
    unlink(path);
    ck_assert_msg(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
}

START_TEST(test_load_errors)
{
    expect_error("[class.HIGH]\nmax_bw = fast\n", "max_bw = fast");
    expect_error("[class.HIGH]\nmax_bw = 5\n",
                 "max_bw = 5: a rate needs a number with a unit: 40Gbit, 500M, 2.5Gbit/s");
    expect_error("[class.HIGH]\ncolour = red\n", "line 2");
    expect_error("[class.HIGH]\ndscp = 64\n", "dscp = 64");
    expect_error("[class.LOW]\nchunk_kib = 2\n", "chunk_kib = 2");
    expect_error("[rules]\nuid.1000 = PLATINUM\n", "unknown class PLATINUM");
    expect_error("[rules]\nhost.a = HIGH\n", "a rule is");
    expect_error("[rules]\ngroup.no-such-group-hcclD = HIGH\n", "no such group");
    expect_error("[qos]\ndefault = NOPE\n", "unknown class NOPE");
    expect_error("[qos]\nbogus = 1\n", "[qos] bogus = 1");
    expect_error("not ini at all\n", "line 1");

    qos_policy_t p;
    char err[256];
    qos_policy_defaults(&p);
    ck_assert_int_eq(qos_policy_load("/nonexistent/hccld.conf", &p, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot open"));
}
END_TEST

/* The [daemon] section, read by its own reader from the same file; QoS sections ignored. */
START_TEST(test_daemon_section)
{
    daemon_conf_t d = {.chunk = 1 << 20, .log_level = LOG_WARN, .l0_mode = FORM_L0_AUTO};
    char err[512];

    write_conf("[class.HIGH]\nmax_bw = 1Gbit\n[daemon]\nworkers = 3\nchunk_kib = 256\n"
               "log_level = debug\nl0_mode = daemon\n");
    ck_assert_msg(daemon_conf_load(path, &d, err, sizeof(err)) == 0, "%s", err);
    unlink(path);
    ck_assert_uint_eq(d.workers, 3);
    ck_assert_uint_eq(d.chunk, 256 << 10);
    ck_assert_int_eq(d.log_level, LOG_DEBUG);
    ck_assert_int_eq(d.l0_mode, FORM_L0_DAEMON);

    static const char *const bad[][2] = {
        {"[daemon]\nworkers = 257\n", "line 2: bad or unknown setting workers=257"},
        {"[daemon]\n\nchunk_kib = 3\n", "line 3: bad or unknown setting chunk_kib=3"},
        {"[daemon]\nchunk_kib = 99999999999999999999\n", "chunk_kib=99999999999999999999"},
        {"[daemon]\nl0_mode = fast\n", "l0_mode=fast"},
        {"[daemon]\nspeed = 11\n", "speed=11"},
        {"[daemon\nworkers = 1\n", "line 1: not INI syntax"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_conf(bad[i][0]);
        ck_assert_int_eq(daemon_conf_load(path, &d, err, sizeof(err)), -1);
        unlink(path);
        ck_assert_msg(strstr(err, bad[i][1]) != NULL, "error '%s' lacks '%s'", err, bad[i][1]);
    }
    ck_assert_int_eq(daemon_conf_load("/nonexistent/hccld.conf", &d, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot read it"));
}
END_TEST

Suite *qos_suite(void)
{
    Suite *s = suite_create("qos");
    TCase *tc = tcase_create("policy");

    tcase_add_test(tc, test_rates);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_load_rules);
    tcase_add_test(tc, test_load_errors);
    tcase_add_test(tc, test_daemon_section);
    suite_add_tcase(s, tc);
    return s;
}
