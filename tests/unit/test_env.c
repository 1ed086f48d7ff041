#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "test_list.h"

START_TEST(test_sizes)
{
    uint64_t v;

    ck_assert_int_eq(parse_size("0", &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(parse_size("4K", &v), 0);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(parse_size("16M", &v), 0);
    ck_assert_uint_eq(v, 16ull << 20);
    ck_assert_int_eq(parse_size("2g", &v), 0);
    ck_assert_uint_eq(v, 2ull << 30);
    ck_assert_int_eq(parse_size("1MB", &v), 0);
    ck_assert_uint_eq(v, 1ull << 20);
    ck_assert_int_ne(parse_size("", &v), 0);
    ck_assert_int_ne(parse_size("-1", &v), 0);
    ck_assert_int_ne(parse_size("12Q", &v), 0);
    ck_assert_int_ne(parse_size("99999999999999999999", &v), 0);
    ck_assert_int_ne(parse_size("17179869184G", &v), 0); /* overflows 64 bits */
}
END_TEST

START_TEST(test_env_u64)
{
    uint64_t v;

    unsetenv("HCCLD_TEST_VAR");
    ck_assert_int_eq(env_u64("HCCLD_TEST_VAR", 7, 1, 10, &v), 0);
    ck_assert_uint_eq(v, 7);
    setenv("HCCLD_TEST_VAR", "9", 1);
    ck_assert_int_eq(env_u64("HCCLD_TEST_VAR", 7, 1, 10, &v), 0);
    ck_assert_uint_eq(v, 9);
    setenv("HCCLD_TEST_VAR", "11", 1);
    ck_assert_int_ne(env_u64("HCCLD_TEST_VAR", 7, 1, 10, &v), 0);
    setenv("HCCLD_TEST_VAR", "5x", 1);
    ck_assert_int_ne(env_u64("HCCLD_TEST_VAR", 7, 1, 10, &v), 0);
    unsetenv("HCCLD_TEST_VAR");
}
END_TEST

START_TEST(test_hex)
{
    uint8_t in[5] = {0, 1, 0xab, 0xff, 0x10}, out[5];
    char hex[11];

    hex_encode(in, 5, hex);
    ck_assert_str_eq(hex, "0001abff10");
    ck_assert_int_eq(hex_decode(hex, out, sizeof(out)), 5);
    ck_assert_mem_eq(in, out, 5);
    ck_assert_int_lt(hex_decode("abc", out, sizeof(out)), 0);
    ck_assert_int_lt(hex_decode("zz", out, sizeof(out)), 0);
    ck_assert_int_lt(hex_decode("000102030405", out, sizeof(out)), 0);
}
END_TEST

/* HCCL_BUFFSIZE's unit in every reason, and the MB meant by what looks like a byte count. */
START_TEST(test_mb)
{
    char why[256];
    uint64_t mb;

    ck_assert_int_eq(mb_check("HCCL_BUFFSIZE", "200", 16384, &mb, why, sizeof(why)), 0);
    ck_assert_uint_eq(mb, 200);
    ck_assert_int_eq(mb_check("HCCL_BUFFSIZE", "209715200", 16384, &mb, why, sizeof(why)), -EINVAL);
    ck_assert_str_eq(why, "HCCL_BUFFSIZE=\"209715200\" is invalid: the unit is MB, an integer in "
                          "[1, 16384]; 209715200 looks like a byte count: that is 200 MB, "
                          "HCCL_BUFFSIZE=200");
    ck_assert_int_eq(mb_check("HCCL_BUFFSIZE", "100000000", 16384, &mb, why, sizeof(why)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "that is about 96 MB, HCCL_BUFFSIZE=96"));
    ck_assert_int_eq(mb_check("HCCL_BUFFSIZE", "200MB", 16384, &mb, why, sizeof(why)), -EINVAL);
    ck_assert_str_eq(why, "HCCL_BUFFSIZE=\"200MB\" is invalid: the unit is MB, an integer in "
                          "[1, 16384]; write the number of MB alone, e.g. HCCL_BUFFSIZE=200");
    /* Out of range, but no byte count: the unit and the range alone. */
    ck_assert_int_eq(mb_check("hcclBufferSize", "0", 16384, &mb, why, sizeof(why)), -EINVAL);
    ck_assert_str_eq(why, "hcclBufferSize=\"0\" is invalid: the unit is MB, an integer in [1, "
                          "16384]");
    ck_assert_int_eq(mb_check("HCCL_BUFFSIZE", "20000", 16384, &mb, why, sizeof(why)), -EINVAL);
    ck_assert_ptr_null(strstr(why, "byte count"));
    ck_assert_int_eq(mb_check("HCCL_BUFFSIZE", "-5", 16384, &mb, why, sizeof(why)), -EINVAL);
}
END_TEST

Suite *env_suite(void)
{
    Suite *s = suite_create("env");
    TCase *tc = tcase_create("env");

    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_env_u64);
    tcase_add_test(tc, test_hex);
    tcase_add_test(tc, test_mb);
    suite_add_tcase(s, tc);
    return s;
}
