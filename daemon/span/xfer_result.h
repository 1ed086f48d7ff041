/* The HcclResult of an op whose transfer between daemons failed. */
#ifndef HCCLD_SPAN_XFER_RESULT_H
#define HCCLD_SPAN_XFER_RESULT_H

#include "hccl/hccl.h"
#include "transport/transport.h"

/*
 * err (a negative errno) on transport ops (NULL: unknown): a peer that went away or stopped
 * answering gives HCCL_E_REMOTE (HCCL's "error CQE": a remote process or the network between),
 * anything else (corrupt data, a malformed message, a local device error) the transport's own,
 * HCCL_E_TCP_TRANSFER or HCCL_E_ROCE_TRANSFER.
 */
static inline HcclResult xfer_result(const transport_ops_t *ops, int err)
{
    if (ops == NULL || tp_peer_gone(err))
        return HCCL_E_REMOTE;
    return ops->kind == TP_KIND_RDMA ? HCCL_E_ROCE_TRANSFER : HCCL_E_TCP_TRANSFER;
}

#endif
