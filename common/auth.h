/* Proof of a shared key (a job key between daemons, a comm's lane key between ranks):
 * HMAC-SHA256 over both sides' nonces, never the key. */
#ifndef HCCLD_COMMON_AUTH_H
#define HCCLD_COMMON_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define AUTH_NONCE_BYTES 16
#define AUTH_MAC_BYTES 32
#define AUTH_KEY_BYTES 16
#define AUTH_JOB_BYTES 16

void auth_nonce(uint8_t nonce[AUTH_NONCE_BYTES]);
void auth_mac(const uint8_t *key, size_t keylen, const char *role, const uint8_t *n1,
              const uint8_t *n2, uint8_t mac[AUTH_MAC_BYTES]);
int auth_check(const uint8_t *key, size_t keylen, const char *role, const uint8_t *n1,
               const uint8_t *n2, const uint8_t *mac, size_t maclen);

#define AUTH_DERIVED_BYTES 32

/* A key for one purpose (label) derived from key (at least 16 bytes): keyed BLAKE2b. */
void auth_derive(const uint8_t *key, size_t keylen, const char *label,
                 uint8_t out[AUTH_DERIVED_BYTES]);

#endif
