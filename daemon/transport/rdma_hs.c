/*
 * The job key between RDMA daemons, proven both ways over two fresh nonces as on TCP
 * (tcp_hs.h), the key itself never on the wire:
 *   connecting -> HELLO(job, node, nonce_c)                        connect private data
 *   accepting  -> ACCEPT(nonce_a, HMAC(key, "tp-accept" | nonce_c | nonce_a))
 *                                                                  accept private data, or a
 *                                                                  reject if the job is unknown
 *   connecting -> CONFIRM(HMAC(key, "tp-connect" | nonce_a | nonce_c))
 *                                                                  the QP's first message, or a
 *                                                                  reject if ACCEPT was wrong
 * The connecting side checks ACCEPT before its QP goes to RTR (rdma_cm's CONNECT_RESPONSE
 * with a QP of our own), so a wrong key never gets as far as a connection. The accepting side
 * takes no data before CONFIRM: it is the first message on the QP, and RC keeps order.
 */
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"

int rdma_hs_ready(void)
{
    if (sodium_init() < 0) {
        ERR("NET", "sodium_init() failed");
        return -EIO;
    }
    return 0;
}

void rdma_hs_init_connect(rdma_hs_t *hs, const uint8_t job[AUTH_JOB_BYTES],
                          const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node)
{
    memset(hs, 0, sizeof(*hs));
    hs->my_node = my_node;
    hs->peer_node = TP_NODE_UNKNOWN;
    memcpy(hs->job, job, AUTH_JOB_BYTES);
    memcpy(hs->key, key, AUTH_KEY_BYTES);
    auth_nonce(hs->nonce_c);
    hs->deadline_ns = now_ns() + RDMA_HS_TIMEOUT_NS;
}

void rdma_hs_hello(const rdma_hs_t *hs, unsigned depth, uint32_t slot,
                   uint8_t out[RDMA_HELLO_BYTES])
{
    rdma_hello_t h = {.depth = (uint16_t)depth,
                      .slot = slot,
                      .node = hs->my_node,
                      .conn_id = hs->conn_id,
                      .again = hs->again};

    memcpy(h.job, hs->job, AUTH_JOB_BYTES);
    memcpy(h.nonce, hs->nonce_c, AUTH_NONCE_BYTES);
    rdma_hello_encode(&h, out);
}

int rdma_hs_answer(rdma_hs_t *hs, const rdma_hello_t *hello, tp_key_lookup_fn lookup, void *ctx,
                   unsigned depth, uint32_t slot, uint8_t out[RDMA_ACCEPT_BYTES])
{
    rdma_accept_pd_t a = {.depth = (uint16_t)depth, .slot = slot};

    memset(hs, 0, sizeof(*hs));
    hs->my_node = TP_NODE_UNKNOWN;
    hs->peer_node = TP_NODE_UNKNOWN;
    hs->deadline_ns = now_ns() + RDMA_HS_TIMEOUT_NS;
    memcpy(hs->job, hello->job, AUTH_JOB_BYTES);
    memcpy(hs->nonce_c, hello->nonce, AUTH_NONCE_BYTES);
    hs->conn_id = hello->conn_id;
    hs->again = hello->again;
    if (lookup == NULL || lookup(ctx, hs->job, hs->key) != 0)
        return -EACCES;
    hs->peer_node = hello->node;
    auth_nonce(hs->nonce_a);
    memcpy(a.nonce, hs->nonce_a, AUTH_NONCE_BYTES);
    auth_mac(hs->key, AUTH_KEY_BYTES, "tp-accept", hs->nonce_c, hs->nonce_a, a.mac);
    rdma_accept_encode(&a, out);
    return 0;
}

int rdma_hs_check_accept(rdma_hs_t *hs, const rdma_accept_pd_t *a, uint8_t mac[AUTH_MAC_BYTES])
{
    memcpy(hs->nonce_a, a->nonce, AUTH_NONCE_BYTES);
    if (!auth_check(hs->key, AUTH_KEY_BYTES, "tp-accept", hs->nonce_c, hs->nonce_a, a->mac,
                    AUTH_MAC_BYTES))
        return -EACCES;
    auth_mac(hs->key, AUTH_KEY_BYTES, "tp-connect", hs->nonce_a, hs->nonce_c, mac);
    return 0;
}

int rdma_hs_check_confirm(const rdma_hs_t *hs, const uint8_t mac[AUTH_MAC_BYTES])
{
    return auth_check(hs->key, AUTH_KEY_BYTES, "tp-connect", hs->nonce_a, hs->nonce_c, mac,
                      AUTH_MAC_BYTES)
               ? 0
               : -EACCES;
}

void rdma_hs_clear(rdma_hs_t *hs)
{
    sodium_memzero(hs->key, sizeof(hs->key));
}
