/*
 * The RDMA (RoCE) transport: RC queue pairs set up through librdmacm, data staged through
 * registered slots and sent with SEND/RECV under credit-based flow control. Same semantics as
 * every transport (transport.h). Until transport.h names it, tp_rdma is declared here.
 */
#ifndef HCCLD_TRANSPORT_RDMA_H
#define HCCLD_TRANSPORT_RDMA_H

#include "transport/transport.h"

extern const transport_ops_t tp_rdma;

/*
 * connect() from a given local address (src_ip, numeric; NULL lets the route choose). Two
 * local devices on one host need it: rdma_cm would otherwise route to a local address through
 * the device that owns it, and the traffic would never leave that device.
 */
int tp_rdma_connect_from(const char *src_ip, const char *addr, const uint8_t job_id[AUTH_JOB_BYTES],
                         const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, tp_conn_t **c_p);

#endif
