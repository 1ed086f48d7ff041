/* Settings of the RDMA transport, read from the environment once (bad values warned, defaulted). */
#ifndef HCCLD_TRANSPORT_RDMA_ENV_H
#define HCCLD_TRANSPORT_RDMA_ENV_H

#include <stddef.h>
#include <stdint.h>

typedef struct rdma_env {
    uint8_t tos;           /* HCCL_RDMA_TC: traffic class (DSCP << 2), 132 */
    uint8_t sl;            /* HCCL_RDMA_SL: service level, 4 */
    uint8_t timeout;       /* HCCL_RDMA_TIMEOUT: local ACK timeout, 4.096 us << n, 20 */
    uint8_t retry_cnt;     /* HCCL_RDMA_RETRY_CNT: retransmissions before the QP fails, 7 */
    unsigned depth;        /* HCCLD_RDMA_DEPTH: staging slots per direction, 16 */
    uint32_t slot;         /* HCCLD_RDMA_SLOT: bytes per slot, header included, 64K */
    size_t unexpected;     /* HCCLD_RDMA_UNEXPECTED: bytes of early messages kept per connection */
    uint64_t heartbeat_ns; /* HCCLD_HEARTBEAT_S (as TCP's): silence before a probe, 1 s */
    uint64_t retry_ns;     /* the QP's own budget: retry_cnt + 1 ACK timeouts */
    uint64_t stall_ns;     /* a send queue without a completion this long has failed */
} rdma_env_t;

const rdma_env_t *rdma_env(void);

#endif
