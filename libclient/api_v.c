/*
 * HcclAllGatherV and HcclReduceScatterV: blocks of a size of each rank's own, built on the other
 * entry points. An AllGatherV is an AlltoAllV in which every rank sends its one block to every
 * rank (pairwise, the bytes an allgather moves). A ReduceScatterV pads every block to the largest
 * and runs one ReduceScatter: one collective whatever the rank count, at the cost of a padded copy
 * of the input and of the padding's bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "log.h"
#include "stream.h"

/* A rank's own block must be what the arrays say; logs it when not. */
static int own_count_ok(const hc_comm_t *c, const char *op, const char *arrays, uint64_t mine,
                        uint64_t listed)
{
    if (mine == listed)
        return 1;
    ERR("COLL",
        "%s: rank %u's own count is %llu but %s[%u] says %llu (every rank must pass the "
        "same %s)",
        op, c->rank, (unsigned long long)mine, arrays, c->rank, (unsigned long long)listed, arrays);
    return 0;
}

HcclResult HcclAllGatherV(void *sendBuf, uint64_t sendCount, void *recvBuf, const void *recvCounts,
                          const void *recvDispls, HcclDataType dataType, HcclComm comm,
                          HcclStream stream)
{
    const uint64_t *counts = recvCounts;
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);
    uint64_t *same;

    if (rc != HCCL_SUCCESS)
        return rc;
    if (recvCounts == NULL || recvDispls == NULL)
        return HCCL_E_PTR;
    if (!own_count_ok(c, "allgatherv", "recvCounts", sendCount, counts[c->rank]))
        return HCCL_E_PARA;
    /* Its one block to every rank: the same count, from the start of sendBuf. */
    if ((same = calloc(2 * (size_t)c->nranks, sizeof(*same))) == NULL)
        return HCCL_E_MEMORY;
    for (uint32_t r = 0; r < c->nranks; r++)
        same[r] = sendCount;
    rc = HcclAlltoAllV(sendBuf, same, same + c->nranks, dataType, recvBuf, recvCounts, recvDispls,
                       dataType, comm, stream);
    free(same);
    return rc;
}

HcclResult HcclReduceScatterV(void *sendBuf, const void *sendCounts, const void *sendDispls,
                              void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                              HcclReduceOp op, HcclComm comm, HcclStream stream)
{
    const uint64_t *counts = sendCounts, *displs = sendDispls;
    uint64_t most = 0, es;
    uint8_t *pad, *out;
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    if (rc != HCCL_SUCCESS)
        return rc;
    if (sendCounts == NULL || sendDispls == NULL)
        return HCCL_E_PTR;
    if (!dtype_valid(dataType)) {
        ERR("COLL", "reducescatterv: invalid data type %d", dataType);
        return HCCL_E_PARA;
    }
    if (!own_count_ok(c, "reducescatterv", "sendCounts", recvCount, counts[c->rank]))
        return HCCL_E_PARA;
    es = dtype_size(dataType);
    for (uint32_t r = 0; r < c->nranks; r++) {
        uint64_t end;
        if (__builtin_add_overflow(counts[r], displs[r], &end) ||
            __builtin_mul_overflow(end, es, &end)) {
            ERR("COLL", "reducescatterv: count + displacement of rank %u overflows", r);
            return HCCL_E_PARA;
        }
        most = counts[r] > most ? counts[r] : most;
    }
    if (most == 0)
        return HCCL_SUCCESS;
    if (sendBuf == NULL || (recvBuf == NULL && recvCount > 0))
        return HCCL_E_PTR;
    if (most > SIZE_MAX / es / c->nranks)
        return HCCL_E_PARA;
    pad = calloc((size_t)c->nranks * most, es);
    out = malloc(most * es);
    if (pad == NULL || out == NULL) {
        free(pad);
        free(out);
        return HCCL_E_MEMORY;
    }
    for (uint32_t r = 0; r < c->nranks; r++)
        memcpy(pad + r * most * es, (const uint8_t *)sendBuf + displs[r] * es, counts[r] * es);
    /* The padded copies live only for this call: on a stream it waits for the ops before it
     * and runs now, in order. */
    if (stream != NULL && (rc = HcclStreamSynchronize(stream)) != HCCL_SUCCESS) {
        free(pad);
        free(out);
        return rc;
    }
    rc = HcclReduceScatter(pad, out, most, dataType, op, comm, NULL);
    if (rc == HCCL_SUCCESS)
        memcpy(recvBuf, out, recvCount * es);
    free(pad);
    free(out);
    return rc;
}
