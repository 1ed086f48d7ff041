#include "transport/crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY_REFLECTED 0x82F63B78u

static uint32_t crc_table[256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_setup(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ ((c & 1) ? CRC32C_POLY_REFLECTED : 0);
        crc_table[i] = c;
    }
#if defined(__x86_64__)
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t len)
{
    while (len--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const uint8_t *p,
                                                            size_t len)
{
    uint64_t c64 = c;

    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
    }
    c = (uint32_t)c64;
    for (; len > 0; p++, len--)
        c = __builtin_ia32_crc32qi(c, *p);
    return c;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
    uint32_t c = ~crc;

    pthread_once(&crc_once, crc_setup);
#if defined(__x86_64__)
    if (crc_hw)
        return ~crc_sse42(c, buf, len);
#endif
    return ~crc_sw(c, buf, len);
}
