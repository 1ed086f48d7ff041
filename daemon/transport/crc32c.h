/* CRC32C (Castagnoli) of message payloads: SSE4.2 when the CPU has it, a table otherwise. */
#ifndef HCCLD_TRANSPORT_CRC32C_H
#define HCCLD_TRANSPORT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over buf; start with crc = 0. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
