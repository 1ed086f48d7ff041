/*
 * The tools across daemons: hccl-run --map-by places ranks as Open MPI's option does, and
 * hccl_perf_test's -m (median iteration) and -A (level-1 algorithms compared) run on 2
 * daemons with their results checked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multinode.h"

/* A tool next to the daemon under test (build/bin/NAME). */
static void tool_path(const char *name, char *out, size_t cap)
{
    const char *bin = getenv("HCCLD_BIN") ? getenv("HCCLD_BIN") : "build/bin/hccld";
    const char *slash = strrchr(bin, '/');

    snprintf(out, cap, "%.*s%s", slash ? (int)(slash - bin + 1) : 0, bin, name);
}

/* hccl-run places rank r on daemon want[r] with the local rank and size that go with it. */
static void check_map_by(const cluster_t *c, const char *map, const uint8_t *want, unsigned n)
{
    char run[512], cmd[2048], line[600];
    unsigned seen = 0;

    tool_path("hccl-run", run, sizeof(run));
    snprintf(cmd, sizeof(cmd),
             "%s -n %u --daemons %s,%s --map-by %s -- sh -c 'echo $HCCL_RANK $HCCL_LOCAL_RANK "
             "$HCCL_LOCAL_SIZE $HCCLD_SOCKET'",
             run, n, c->socks[0], c->socks[1], map);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned r, lr, ls, here = 0, size = 0;
        char sock[256];
        ck_assert_int_eq(sscanf(line, "%u %u %u %255s", &r, &lr, &ls, sock), 4);
        ck_assert_uint_lt(r, n);
        for (unsigned q = 0; q < n; q++) {
            here += q < r && want[q] == want[r];
            size += want[q] == want[r];
        }
        ck_assert_msg(strcmp(sock, c->socks[want[r]]) == 0 && lr == here && ls == size,
                      "--map-by %s: rank %u got %s local %u/%u, want daemon %u local %u/%u", map, r,
                      sock, lr, ls, want[r], here, size);
        seen++;
    }
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_uint_eq(seen, n);
}

/* hccl_perf_test -m: the time column is the median iteration, and -J (here onto stdout, after
 * the table) says so; with -S (one synchronize for the whole batch, no iteration times) it is
 * a usage error. */
static void check_perf_median(const cluster_t *c, const char *run, const char *perf)
{
    char cmd[2048], buf[8192];
    size_t n = 0, k;
    FILE *f;

    snprintf(cmd, sizeof(cmd),
             "%s -n 3 --daemons %s,%s -- %s -t allreduce -b 4K -e 4K -n 5 -w 1 -m -J /dev/stdout",
             run, c->socks[0], c->socks[1], perf);
    ck_assert_ptr_nonnull(f = popen(cmd, "r"));
    while (n < sizeof(buf) - 1 && (k = fread(buf + n, 1, sizeof(buf) - 1 - n, f)) > 0)
        n += k;
    buf[n] = '\0';
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_msg(strstr(buf, "\"oop\": {\"time_us\": ") != NULL &&
                      strstr(buf, "\"time_stat\": \"median\"") != NULL &&
                      strstr(buf, "\"wrong\": 0") != NULL,
                  "hccl_perf_test -m -J wrote: %s", buf);
    snprintf(cmd, sizeof(cmd), "%s -m -S 2>/dev/null", perf);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
    /* Buffers larger than the machine's memory: refused at once, with what they need. */
    snprintf(cmd, sizeof(cmd), "%s -b 1024G -e 1024G -g 2 2>&1", perf);
    ck_assert_ptr_nonnull(f = popen(cmd, "r"));
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    ck_assert_int_eq(WEXITSTATUS(pclose(f)), 2);
    ck_assert_msg(strstr(buf, "2 rank(s) with -e 1099511627776 need 4096.0 GiB") != NULL &&
                      strstr(buf, "use a smaller -e or fewer ranks") != NULL,
                  "hccl_perf_test said: %s", buf);
}

/* hccl_perf_test -A: a comm per level-1 algorithm, each checked element by element, a median
 * per algorithm and size; an unknown algorithm fails its comm, as HCCL_ALGO does at init. */
static void check_perf_compare(const cluster_t *c, const char *run, const char *perf)
{
    char cmd[2048], line[512];
    unsigned rows = 0, header = 0;
    double t[3];
    char best[32];
    unsigned long long bytes, count, wrong;
    FILE *f;

    snprintf(cmd, sizeof(cmd),
             "%s -n 3 --daemons %s,%s -- %s -t allgather -b 1K -e 64K -f 8 -n 5 -w 1 "
             "-A auto,ring,tree",
             run, c->socks[0], c->socks[1], perf);
    ck_assert_ptr_nonnull(f = popen(cmd, "r"));
    while (fgets(line, sizeof(line), f) != NULL) {
        header += strstr(line, "auto      ring      tree      best  #wrong") != NULL;
        if (sscanf(line, "%llu %llu %lf %lf %lf %31s %llu", &bytes, &count, &t[0], &t[1], &t[2],
                   best, &wrong) == 7) {
            ck_assert_msg(t[0] > 0 && t[1] > 0 && t[2] > 0 && wrong == 0, "row: %s", line);
            ck_assert_msg(strcmp(best, "auto") == 0 || strcmp(best, "ring") == 0 ||
                              strcmp(best, "tree") == 0,
                          "row: %s", line);
            rows++;
        }
    }
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_uint_eq(header, 1);
    ck_assert_uint_eq(rows, 3); /* 1K, 8K, 64K */
    snprintf(cmd, sizeof(cmd),
             "%s -n 2 --daemons %s,%s -- %s -b 1K -e 1K -n 1 -A auto,nosuch >/dev/null 2>&1", run,
             c->socks[0], c->socks[1], perf);
    ck_assert_int_ne(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s -A ring -S 2>/dev/null", perf);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
}

/* hccl_latency_test as HCCL's articles run it (-t 0 -w 100 -c 100), here up to 4 KiB on 3
 * ranks of 2 daemons: a row per size, 8 B to 4 KiB, each with p50 <= p90 <= p99 <= max and no
 * wrong element; -t takes names too. */
static void check_latency(const cluster_t *c, const char *run)
{
    char lat[512], cmd[2048], line[512], type[16], redop[16];
    unsigned rows = 0, header = 0;
    unsigned long long bytes, count, wrong, want = 8;
    double p50, p90, p99, max;
    int root;
    FILE *f;

    tool_path("hccl_latency_test", lat, sizeof(lat));
    snprintf(cmd, sizeof(cmd), "%s -n 3 --daemons %s,%s -- %s -t 0 -w 100 -c 100 -e 4K", run,
             c->socks[0], c->socks[1], lat);
    ck_assert_ptr_nonnull(f = popen(cmd, "r"));
    while (fgets(line, sizeof(line), f) != NULL) {
        header += strstr(line, "# hccl_latency_test: collective allreduce, nranks 3") != NULL;
        if (sscanf(line, "%llu %llu %15s %15s %d %lf %lf %lf %lf %llu", &bytes, &count, type, redop,
                   &root, &p50, &p90, &p99, &max, &wrong) != 10)
            continue;
        ck_assert_msg(bytes == want && p50 > 0 && p50 <= p90 && p90 <= p99 && p99 <= max &&
                          wrong == 0 && strcmp(type, "float") == 0,
                      "row: %s", line);
        want *= 2;
        rows++;
    }
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_uint_eq(header, 1);
    ck_assert_uint_eq(rows, 10); /* 8 B .. 4 KiB */
    snprintf(cmd, sizeof(cmd),
             "%s -n 2 --daemons %s,%s -- %s -t allgather -b 1K -e 1K -c 5 "
             "| grep -q '^ *1024 '",
             run, c->socks[0], c->socks[1], lat);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s -t 9 2>/dev/null", lat);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
}

/* hccl-run --map-by slot (blocks, the first daemons one rank more) and node (round robin),
 * and a real job placed round robin, checked by hccl_perf_test. */
START_TEST(test_hccl_run_map_by)
{
    static const uint8_t slot[] = {0, 0, 0, 1, 1}, node[] = {0, 1, 0, 1, 0};
    char run[512], perf[512], cmd[2048];
    cluster_t c;

    cluster_start(&c, 2);
    check_map_by(&c, "slot", slot, 5);
    check_map_by(&c, "node", node, 5);
    tool_path("hccl-run", run, sizeof(run));
    tool_path("hccl_perf_test", perf, sizeof(perf));
    snprintf(cmd, sizeof(cmd),
             "%s -n 5 --daemons %s,%s --map-by node -- %s -t all -b 4 -e 64K -f 16 -n 2 -w 1 "
             ">/dev/null",
             run, c.socks[0], c.socks[1], perf);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s -n 2 --map-by row -- true 2>/dev/null", run);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
    check_perf_median(&c, run, perf);
    check_perf_compare(&c, run, perf);
    check_latency(&c, run);
    cluster_stop(&c);
}
END_TEST

void multinode_add_tools(TCase *tc)
{
    tcase_add_test(tc, test_hccl_run_map_by);
}
