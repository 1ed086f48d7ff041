/*
 * Helpers shared by the libFuzzer targets and the seed generator: fixed job credentials and a
 * deterministic random source, so that a handshake input replays the same way every time and
 * a seed can carry a MAC over nonces the code under test will draw.
 */
#ifndef HCCLD_TESTS_FUZZ_COMMON_H
#define HCCLD_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "shm.h"

#define FUZZ_JOB_BYTES 16
#define FUZZ_KEY_BYTES 16
#define FUZZ_NONCE_BYTES 16

/* fuzz_desc's input: the communicator's size, the poster's rank and arena size as the daemon
 * knows them, then two descriptors as a ring holds them. */
typedef struct desc_input {
    uint32_t nranks;
    uint32_t rank;
    uint64_t arena;
    desc_t a, b;
} desc_input_t;

/* The one job the fuzzed side knows, and its key. */
extern const uint8_t fuzz_job[FUZZ_JOB_BYTES];
extern const uint8_t fuzz_key[FUZZ_KEY_BYTES];

/* Makes libsodium's randombytes deterministic; call once, before anything uses libsodium. */
void fuzz_rng_install(void);
/* Restarts the random stream: call at the start of every input. */
void fuzz_rng_reset(void);
/* The n-th nonce (0: the first) drawn after fuzz_rng_reset(). */
void fuzz_rng_nonce(unsigned n, uint8_t nonce[FUZZ_NONCE_BYTES]);

/* Sets the log level of the code under test. Targets use LOG_DEBUG, so that every log line
 * is formatted from the input too; run.sh discards the output with -close_fd_mask=2. */
void fuzz_log_level(int level);

#endif
