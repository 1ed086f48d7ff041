#include "auth.h"

#include <sodium.h>
#include <string.h>

void auth_nonce(uint8_t nonce[AUTH_NONCE_BYTES])
{
    randombytes_buf(nonce, AUTH_NONCE_BYTES);
}

void auth_mac(const uint8_t *key, size_t keylen, const char *role, const uint8_t *n1,
              const uint8_t *n2, uint8_t mac[AUTH_MAC_BYTES])
{
    crypto_auth_hmacsha256_state st;

    crypto_auth_hmacsha256_init(&st, key, keylen);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)role, strlen(role));
    crypto_auth_hmacsha256_update(&st, n1, AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, n2, AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_final(&st, mac);
}

int auth_check(const uint8_t *key, size_t keylen, const char *role, const uint8_t *n1,
               const uint8_t *n2, const uint8_t *mac, size_t maclen)
{
    uint8_t want[AUTH_MAC_BYTES];

    if (maclen != AUTH_MAC_BYTES)
        return 0;
    auth_mac(key, keylen, role, n1, n2, want);
    return sodium_memcmp(want, mac, AUTH_MAC_BYTES) == 0;
}

void auth_derive(const uint8_t *key, size_t keylen, const char *label,
                 uint8_t out[AUTH_DERIVED_BYTES])
{
    crypto_generichash(out, AUTH_DERIVED_BYTES, (const uint8_t *)label, strlen(label), key, keylen);
}
