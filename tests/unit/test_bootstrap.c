/* The pure parts of agreed bootstraps: Slurm node lists, rank tables, rank layouts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hccl/hccl.h"
#include "nodelist.h"
#include "ranktable.h"
#include "span/place.h"
#include "test_list.h"

typedef struct hosts {
    char v[64][NODELIST_HOST_MAX];
    size_t n;
    size_t stop_at; /* stop after this many hosts (0: never) */
} hosts_t;

static int collect(const char *host, void *arg)
{
    hosts_t *h = arg;

    if (h->n < 64)
        snprintf(h->v[h->n], sizeof(h->v[h->n]), "%s", host);
    h->n++;
    return h->stop_at != 0 && h->n == h->stop_at ? 7 : 0;
}

/* Expands list and compares with the space-separated want. */
static void expect_hosts(const char *list, const char *want)
{
    hosts_t h = {.n = 0};
    char buf[1024], *save, *tok;
    size_t i = 0;

    ck_assert_msg(nodelist_each(list, collect, &h) == 0, "%s", list);
    snprintf(buf, sizeof(buf), "%s", want);
    for (tok = strtok_r(buf, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save), i++) {
        ck_assert_msg(i < h.n, "%s: only %zu hosts", list, h.n);
        ck_assert_str_eq(h.v[i], tok);
    }
    ck_assert_msg(i == h.n, "%s: %zu hosts, want %zu", list, h.n, i);
}

START_TEST(test_nodelist_expand)
{
    char first[64];
    hosts_t h = {.stop_at = 2};

    expect_hosts("node01", "node01");
    expect_hosts("node[01-04,7]", "node01 node02 node03 node04 node7");
    expect_hosts("a,b[1-2],c", "a b1 b2 c");
    expect_hosts("n[8-11]", "n8 n9 n10 n11");
    expect_hosts("n[098-101]", "n098 n099 n100 n101");
    expect_hosts("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
    expect_hosts("gpu[3]x", "gpu3x");
    expect_hosts("[1-2]", "1 2");
    expect_hosts("10.0.0.1,10.0.0.2", "10.0.0.1 10.0.0.2");
    ck_assert_int_eq(nodelist_first("node[07-09],x", first, sizeof(first)), 0);
    ck_assert_str_eq(first, "node07");
    /* A callback may stop early; its value comes back. */
    ck_assert_int_eq(nodelist_each("a,b,c,d", collect, &h), 7);
    ck_assert_uint_eq(h.n, 2);
}
END_TEST

START_TEST(test_nodelist_malformed)
{
    static const char *const bad[] = {"",          "node[1-",  "node1]", "node[]",  "node[a-b]",
                                      "node[3-1]", "node[1,]", "a,,b",   ",a",      "a,",
                                      "n[[1]]",    "n[1-2",    "n[-1]",  "n[1-2-3]"};
    char first[64];
    hosts_t h = {.n = 0};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(nodelist_each(bad[i], collect, &h) == -EINVAL, "\"%s\"", bad[i]);
    ck_assert_int_eq(nodelist_each(NULL, collect, &h), -EINVAL);
    /* The whole list is checked even when only the first host is wanted. */
    ck_assert_int_eq(nodelist_first("good,bad[", first, sizeof(first)), -EINVAL);
    ck_assert_int_eq(nodelist_each("n[0-99999999]", collect, &h), -E2BIG);
    ck_assert_int_eq(nodelist_first("averyveryverylonghostname", first, 8), -E2BIG);
}
END_TEST

static int parse(const char *text, ranktable_t *rt)
{
    char err[256] = "";
    int rc = ranktable_parse(text, strlen(text), rt, err, sizeof(err));

    if (rc != HCCL_SUCCESS)
        ck_assert_msg(err[0] != '\0', "no reason given for %d", rc);
    return rc;
}

START_TEST(test_ranktable_valid)
{
    ranktable_t rt;

    /* HCCL's form (strings), servers in any order, devices in any order within a server. */
    ck_assert_int_eq(
        parse("{\"version\":\"1.0\",\"server_count\":\"2\",\"server_list\":["
              "{\"server_id\":\"10.0.0.2:7000\",\"device\":[{\"device_id\":\"1\",\"device_ip\":"
              "\"192.168.1.1\",\"rank_id\":\"3\"},{\"device_id\":\"0\",\"rank_id\":\"2\"}]},"
              "{\"server_id\":\"10.0.0.1\",\"device\":[{\"device_id\":\"0\",\"rank_id\":\"0\"},"
              "{\"device_id\":\"1\",\"rank_id\":\"1\"}]}],\"status\":\"completed\",\"extra\":1}",
              &rt),
        HCCL_SUCCESS);
    ck_assert_uint_eq(rt.nranks, 4);
    ck_assert_uint_eq(rt.nservers, 2);
    ck_assert_str_eq(rt.servers[0], "10.0.0.2:7000");
    ck_assert_str_eq(rt.servers[1], "10.0.0.1:60000");
    ck_assert_uint_eq(rt.rank_server[0], 1);
    ck_assert_uint_eq(rt.rank_server[1], 1);
    ck_assert_uint_eq(rt.rank_server[2], 0);
    ck_assert_uint_eq(rt.rank_server[3], 0);
    ranktable_free(&rt);
    /* Numbers instead of strings; no status. */
    ck_assert_int_eq(parse("{\"version\":1.0,\"server_count\":1,\"server_list\":[{\"server_id\":"
                           "\"127.0.0.1:1\",\"device\":[{\"device_id\":0,\"rank_id\":0}]}]}",
                           &rt),
                     HCCL_SUCCESS);
    ck_assert_uint_eq(rt.nranks, 1);
    ranktable_free(&rt);
    /* Servers with different numbers of ranks, their ids alternating. */
    ck_assert_int_eq(parse("{\"version\":\"1.0\",\"server_count\":\"2\",\"server_list\":[{"
                           "\"server_id\":\"10.0.0.1\",\"device\":[{\"rank_id\":\"0\"},{"
                           "\"rank_id\":\"2\"},{\"rank_id\":\"4\"}]},{\"server_id\":"
                           "\"10.0.0.2\",\"device\":[{\"rank_id\":\"3\"},{\"rank_id\":\"1\"}]}]}",
                           &rt),
                     HCCL_SUCCESS);
    ck_assert_uint_eq(rt.nranks, 5);
    for (uint32_t r = 0; r < 5; r++)
        ck_assert_uint_eq(rt.rank_server[r], r % 2);
    ranktable_free(&rt);
}
END_TEST

static const char *const head = "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":"
                                "[{\"server_id\":\"10.0.0.1\",\"device\":[";

START_TEST(test_ranktable_invalid)
{
    static const char *const devices[] = {
        "{\"rank_id\":\"0\"},{\"rank_id\":\"0\"}",
        "{\"rank_id\":\"0\"},{\"rank_id\":\"5\"}",
        "{\"rank_id\":\"1\"}",
        "{\"rank_id\":\"0\"},{}",
        "{\"rank_id\":\"-1\"}",
        "{\"rank_id\":-1}",
        "{\"rank_id\":\"\"}",
        "{\"rank_id\":\" 0\"}",
        "{\"rank_id\":\"99999999999\"}",
        "{\"rank_id\":true}",
        "{\"rank_id\":0.5}",
        "{\"rank_id\":\"0\",\"device_id\":\"x\"}",
        "{\"rank_id\":\"0\",\"device_id\":\"1\"},{\"rank_id\":\"1\",\"device_id\":1}",
        "\"not an object\"",
    };
    static const char *const tables[] = {
        "",
        "{",
        "[]",
        "{\"version\":\"1.0\"}",
        "{\"version\":\"1.1\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"10.0.0.1\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"server_count\":\"1\",\"server_list\":[{\"server_id\":\"10.0.0.1\",\"device\":"
        "[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_list\":[{\"server_id\":\"10.0.0.1\",\"device\":"
        "[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":[]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"10.0.0.1\"}]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"host1\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"10.0.0.1:0\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"server_list\":[{\"server_id\":"
        "\"10.0.0.1:\",\"device\":[{\"rank_id\":\"0\"}]}]}",
        "{\"version\":\"1.0\",\"server_count\":\"1\",\"version\":\"1.0\",\"server_list\":["
        "{\"server_id\":\"10.0.0.1\",\"device\":[{\"rank_id\":\"0\"}]}]}", /* duplicate key */
        "{\"version\":\"1.0\",\"server_count\":\"2\",\"server_list\":[{\"server_id\":"
        "\"10.0.0.1\",\"device\":[{\"rank_id\":\"0\"}]},{\"server_id\":\"10.0.0.1:60000\","
        "\"device\":[{\"rank_id\":\"1\"}]}]}", /* one server twice */
        "{\"version\":\"1.0\",\"server_count\":\"2\",\"server_list\":[{\"server_id\":"
        "\"10.0.0.1\",\"device\":[{\"rank_id\":\"0\"}]},{\"server_id\":\"10.0.0.2\","
        "\"device\":[{\"rank_id\":\"0\"}]}]}", /* one rank on two servers */
    };
    char text[1024];
    ranktable_t rt;

    for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
        snprintf(text, sizeof(text), "%s%s]}]}", head, devices[i]);
        ck_assert_msg(parse(text, &rt) == HCCL_E_PARA, "devices %s", devices[i]);
        ck_assert_ptr_null(rt.servers);
    }
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
        ck_assert_msg(parse(tables[i], &rt) == HCCL_E_PARA, "table %zu", i);
}
END_TEST

/* Positions of every placement: node by node, a node's ranks in rank order; identity only
 * for equal contiguous blocks; bad placements refused. */
START_TEST(test_span_place)
{
    static const struct {
        uint32_t n, nn, L, identity;
        uint32_t node[6], pos[6], first[4];
    } cases[] = {
        {4, 2, 2, 1, {0, 0, 1, 1}, {0, 1, 2, 3}, {0, 2, 4}},
        {3, 2, 2, 0, {0, 0, 1}, {0, 1, 2}, {0, 2, 3}},
        {3, 2, 2, 0, {0, 1, 0}, {0, 2, 1}, {0, 2, 3}},
        {4, 2, 2, 0, {0, 1, 0, 1}, {0, 2, 1, 3}, {0, 2, 4}},
        {5, 3, 2, 0, {1, 0, 0, 2, 1}, {2, 0, 1, 4, 3}, {0, 2, 4, 5}},
        {6, 3, 3, 0, {2, 0, 1, 2, 2, 0}, {3, 0, 2, 4, 5, 1}, {0, 2, 3, 6}},
        {1, 1, 1, 1, {0}, {0}, {0, 1}},
    };
    static const uint32_t out_of_range[] = {0, 2}, empty_node[] = {0, 0, 2};
    span_place_t p;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_int_eq(span_place_init(&p, cases[i].node, cases[i].n, cases[i].nn), 0);
        ck_assert_uint_eq(p.L, cases[i].L);
        ck_assert_int_eq(p.equal && p.in_order, (int)cases[i].identity);
        for (uint32_t g = 0; g < cases[i].n; g++) {
            ck_assert_msg(p.pos[g] == cases[i].pos[g], "case %zu rank %u: position %u, want %u", i,
                          g, p.pos[g], cases[i].pos[g]);
            ck_assert_uint_eq(p.node[g], cases[i].node[g]);
            ck_assert_uint_eq(p.pos_rank[p.pos[g]], g);
        }
        for (uint32_t j = 0; j <= cases[i].nn; j++)
            ck_assert_uint_eq(p.first[j], cases[i].first[j]);
        span_place_free(&p);
    }
    ck_assert_int_eq(span_place_init(&p, out_of_range, 2, 2), -EINVAL);
    ck_assert_int_eq(span_place_init(&p, empty_node, 3, 3), -EINVAL);
}
END_TEST

START_TEST(test_hostport)
{
    char out[64];

    ck_assert_int_eq(hostport_normalize("10.1.2.3", 60000, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "10.1.2.3:60000");
    ck_assert_int_eq(hostport_normalize("10.1.2.3:1234", 60000, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "10.1.2.3:1234");
    ck_assert_int_ne(hostport_normalize("10.1.2", 60000, out, sizeof(out)), 0);
    ck_assert_int_ne(hostport_normalize("10.1.2.3:65536", 60000, out, sizeof(out)), 0);
    ck_assert_int_ne(hostport_normalize("10.1.2.3:+5", 60000, out, sizeof(out)), 0);
    ck_assert_int_ne(hostport_normalize(":5", 60000, out, sizeof(out)), 0);
    ck_assert_int_ne(hostport_normalize("10.1.2.3:5:6", 60000, out, sizeof(out)), 0);
}
END_TEST

Suite *bootstrap_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc = tcase_create("bootstrap");

    tcase_add_test(tc, test_nodelist_expand);
    tcase_add_test(tc, test_nodelist_malformed);
    tcase_add_test(tc, test_ranktable_valid);
    tcase_add_test(tc, test_ranktable_invalid);
    tcase_add_test(tc, test_span_place);
    tcase_add_test(tc, test_hostport);
    suite_add_tcase(s, tc);
    return s;
}
