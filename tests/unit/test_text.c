/*
 * common/text.h: pieces appended at every buffer size from 1 to past the whole message land
 * exactly as one snprintf of the whole would cut them, *at always on the NUL, and nothing is
 * written past the buffer (a guard byte behind it stays as it was).
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "test_list.h"
#include "text.h"

#define GUARD 0x5a

/* "comm 7: waits for rank 1, 22, 333 (not posted)" in pieces, into a buffer of cap bytes. */
static size_t build(char *buf, size_t cap)
{
    static const unsigned ranks[] = {1, 22, 333};
    size_t at = 0;

    text_add(buf, cap, &at, "comm %u: waits for rank", 7u);
    for (int i = 0; i < 3; i++)
        text_add(buf, cap, &at, "%s %u", i ? "," : "", ranks[i]);
    text_add(buf, cap, &at, "%s", "");
    text_add(buf, cap, &at, " (not posted)");
    return at;
}

START_TEST(test_text_every_cap)
{
    char whole[128], buf[130];
    int len = snprintf(whole, sizeof(whole), "comm 7: waits for rank 1, 22, 333 (not posted)");

    ck_assert_int_gt(len, 0);
    for (size_t cap = 1; cap <= (size_t)len + 2; cap++) {
        memset(buf, GUARD, sizeof(buf));
        size_t at = build(buf, cap);
        size_t want = cap - 1 < (size_t)len ? cap - 1 : (size_t)len;
        CHECK(at == want, "cap %zu: at %zu, want %zu", cap, at, want);
        CHECK(buf[at] == '\0' && strlen(buf) == at, "cap %zu: not ended at %zu", cap, at);
        CHECK(memcmp(buf, whole, at) == 0, "cap %zu: \"%s\" is not a prefix of the whole", cap,
              buf);
        CHECK((unsigned char)buf[cap] == GUARD, "cap %zu: written past the buffer", cap);
        CHECK(text_full(cap, at) == (cap <= (size_t)len + 1), "cap %zu: text_full %d", cap,
              text_full(cap, at));
    }
}
END_TEST

START_TEST(test_text_cap_zero)
{
    char c = GUARD;
    size_t at = 0;

    text_add(&c, 0, &at, "x%d", 1);
    ck_assert_uint_eq(at, 0);
    ck_assert_int_eq((unsigned char)c, GUARD);
}
END_TEST

START_TEST(test_text_full_adds_nothing)
{
    char buf[8];
    size_t at = 0;

    text_add(buf, sizeof(buf), &at, "%s", "abcdefghij");
    ck_assert_uint_eq(at, 7);
    ck_assert_str_eq(buf, "abcdefg");
    text_add(buf, sizeof(buf), &at, "%s", "more");
    ck_assert_uint_eq(at, 7);
    ck_assert_str_eq(buf, "abcdefg");
}
END_TEST

Suite *text_suite(void)
{
    Suite *s = suite_create("text");
    TCase *tc = tcase_create("append");

    tcase_add_test(tc, test_text_every_cap);
    tcase_add_test(tc, test_text_cap_zero);
    tcase_add_test(tc, test_text_full_adds_nothing);
    suite_add_tcase(s, tc);
    return s;
}
