#include "fuzz_common.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

const uint8_t fuzz_job[FUZZ_JOB_BYTES] = "hccld-fuzz-job!";
const uint8_t fuzz_key[FUZZ_KEY_BYTES] = "hccld-fuzz-key!";

static uint64_t rng_pos;

/* splitmix64: cheap, and the same on every machine, which is all a fuzz target needs. */
static uint64_t rng_at(uint64_t i)
{
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_buf(void *const buf, const size_t size)
{
    uint8_t *p = buf;

    for (size_t i = 0; i < size; i++)
        p[i] = (uint8_t)(rng_at(rng_pos++) >> 56);
}

static uint32_t rng_random(void)
{
    uint32_t v;

    rng_buf(&v, sizeof(v));
    return v;
}

static const char *rng_name(void)
{
    return "hccld-fuzz";
}

void fuzz_rng_install(void)
{
    static randombytes_implementation impl = {
        .implementation_name = rng_name, .random = rng_random, .buf = rng_buf};

    /* libsodium takes a custom source only before sodium_init(). */
    if (randombytes_set_implementation(&impl) != 0 || sodium_init() < 0)
        abort();
}

void fuzz_rng_reset(void)
{
    rng_pos = 0;
}

void fuzz_rng_nonce(unsigned n, uint8_t nonce[FUZZ_NONCE_BYTES])
{
    uint64_t saved = rng_pos;

    rng_pos = (uint64_t)n * FUZZ_NONCE_BYTES;
    rng_buf(nonce, FUZZ_NONCE_BYTES);
    rng_pos = saved;
}

void fuzz_log_level(int level)
{
    log_level_cur = level;
}
