/* The collective entry points: argument checks (synchronous, even on a stream), then dispatch. */
#include <stdlib.h>
#include <string.h>

#include "algo_id.h"
#include "desc_check.h"
#include "dtype.h"
#include "log.h"
#include "reg.h"
#include "stream.h"

/* Validates what every operation shares; *bytes_p gets count * element size. */
static HcclResult check_common(HcclComm comm, uint64_t count, int dtype, hc_comm_t **c_p,
                               uint64_t *bytes_p)
{
    HcclResult rc = hc_comm_check(comm, c_p);

    if (rc != HCCL_SUCCESS)
        return rc;
    if (!dtype_valid(dtype)) {
        ERR("COLL", "invalid data type %d", dtype);
        return HCCL_E_PARA;
    }
    /* Every rank-block of every rank must be addressable: count * size * nranks fits. */
    if (__builtin_mul_overflow(count, (uint64_t)dtype_size(dtype), bytes_p) ||
        *bytes_p > UINT64_MAX / ((*c_p)->nranks + 1ull) ||
        *bytes_p > (uint64_t)PTRDIFF_MAX / ((*c_p)->nranks + 1ull)) {
        ERR("COLL", "count %llu overflows the byte size", (unsigned long long)count);
        return HCCL_E_PARA;
    }
    return HCCL_SUCCESS;
}

static HcclResult check_redop(int op)
{
    if (redop_valid(op))
        return HCCL_SUCCESS;
    ERR("COLL", "invalid reduce op %d", op);
    return HCCL_E_PARA;
}

static HcclResult check_rank(const hc_comm_t *c, uint32_t r, const char *what)
{
    if (r < c->nranks)
        return HCCL_SUCCESS;
    ERR("COLL", "%s %u is out of range (comm of %u ranks)", what, r, c->nranks);
    return HCCL_E_PARA;
}

static HcclResult run(hc_comm_t *c, const hc_op_t *op, HcclStream stream)
{
    hc_call_t call = {.comm = c, .op = *op};

    return hc_dispatch(&call, stream);
}

static HcclResult allreduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                            HcclReduceOp op, int algo, HcclComm comm, HcclStream stream)
{
    hc_comm_t *c;
    uint64_t b;
    HcclResult rc = check_common(comm, count, dataType, &c, &b);

    if (rc == HCCL_SUCCESS)
        rc = check_redop(op);
    if (rc != HCCL_SUCCESS || count == 0)
        return rc;
    if (sendBuf == NULL || recvBuf == NULL)
        return HCCL_E_PTR;
    hc_op_t o = {.kind = DESC_ALLREDUCE,
                 .dtype = dataType,
                 .redop = op,
                 .own_algo = (uint8_t)(algo + 1),
                 .count = count,
                 .send = sendBuf,
                 .send_stride = b,
                 .recv = recvBuf,
                 .recv_stride = b};
    return run(c, &o, stream);
}

HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                         HcclReduceOp op, HcclComm comm, HcclStream stream)
{
    return allreduce(sendBuf, recvBuf, count, dataType, op, -1, comm, stream);
}

HcclResult HcclAllReduceAlgo(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                             HcclReduceOp op, const char *algo, HcclComm comm, HcclStream stream)
{
    int a = algo == NULL || algo[0] == '\0' ? -1 : algo_from_name(algo);

    if (a < 0 && algo != NULL && algo[0] != '\0') {
        ERR("COLL", "allreduce algorithm \"%s\": none such (ring, H-D_R, fullmesh or tree)", algo);
        return HCCL_E_PARA;
    }
    if (a >= 0 && !algo_serves(a, DESC_ALLREDUCE)) {
        ERR("COLL",
            "allreduce algorithm \"%s\": it does not serve allreduce (ring, H-D_R, "
            "fullmesh or tree)",
            algo);
        return HCCL_E_PARA;
    }
    return allreduce(sendBuf, recvBuf, count, dataType, op, a, comm, stream);
}

HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root,
                         HcclComm comm, HcclStream stream)
{
    hc_comm_t *c;
    uint64_t b;
    HcclResult rc = check_common(comm, count, dataType, &c, &b);

    if (rc == HCCL_SUCCESS)
        rc = check_rank(c, root, "root");
    if (rc != HCCL_SUCCESS || count == 0)
        return rc;
    if (buf == NULL)
        return HCCL_E_PTR;
    hc_op_t o = {.kind = DESC_BROADCAST,
                 .dtype = dataType,
                 .root = root,
                 .count = count,
                 .send = buf,
                 .send_stride = b,
                 .recv = buf,
                 .recv_stride = b};
    return run(c, &o, stream);
}

HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType,
                         HcclComm comm, HcclStream stream)
{
    hc_comm_t *c;
    uint64_t b;
    HcclResult rc = check_common(comm, sendCount, dataType, &c, &b);

    if (rc != HCCL_SUCCESS || sendCount == 0)
        return rc;
    if (sendBuf == NULL || recvBuf == NULL)
        return HCCL_E_PTR;
    hc_op_t o = {.kind = DESC_ALLGATHER,
                 .dtype = dataType,
                 .count = sendCount,
                 .send = sendBuf,
                 .send_stride = b,
                 .recv = recvBuf,
                 .recv_stride = b};
    return run(c, &o, stream);
}

HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
                             HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                             HcclStream stream)
{
    hc_comm_t *c;
    uint64_t b;
    HcclResult rc = check_common(comm, recvCount, dataType, &c, &b);

    if (rc == HCCL_SUCCESS)
        rc = check_redop(op);
    if (rc != HCCL_SUCCESS || recvCount == 0)
        return rc;
    if (sendBuf == NULL || recvBuf == NULL)
        return HCCL_E_PTR;
    hc_op_t o = {.kind = DESC_REDUCE_SCATTER,
                 .dtype = dataType,
                 .redop = op,
                 .count = recvCount,
                 .send = sendBuf,
                 .send_stride = b,
                 .recv = recvBuf,
                 .recv_stride = b};
    return run(c, &o, stream);
}

HcclResult HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType sendType,
                        void *recvBuf, uint64_t recvCount, HcclDataType recvType, HcclComm comm,
                        HcclStream stream)
{
    hc_comm_t *c;
    uint64_t b;
    HcclResult rc = check_common(comm, sendCount, sendType, &c, &b);

    if (rc == HCCL_SUCCESS && (sendType != recvType || sendCount != recvCount)) {
        ERR("COLL", "alltoall: send and receive counts and types must match");
        rc = HCCL_E_PARA;
    }
    if (rc != HCCL_SUCCESS || sendCount == 0)
        return rc;
    if (sendBuf == NULL || recvBuf == NULL)
        return HCCL_E_PTR;
    hc_op_t o = {.kind = DESC_ALLTOALL,
                 .dtype = sendType,
                 .count = sendCount,
                 .send = sendBuf,
                 .send_stride = b,
                 .recv = recvBuf,
                 .recv_stride = b};
    return run(c, &o, stream);
}

/* Checks one alltoallv side: every block's end must be addressable. */
static HcclResult check_v(const hc_comm_t *c, const uint64_t *counts, const uint64_t *displs,
                          size_t es, uint64_t *total_p)
{
    uint64_t total = 0, end;

    for (uint32_t r = 0; r < c->nranks; r++) {
        if (__builtin_add_overflow(counts[r], displs[r], &end) ||
            __builtin_mul_overflow(end, (uint64_t)es, &end) || end > (uint64_t)PTRDIFF_MAX) {
            ERR("COLL", "alltoallv: count + displacement of rank %u overflows", r);
            return HCCL_E_PARA;
        }
        total += counts[r];
    }
    *total_p = total;
    return HCCL_SUCCESS;
}

HcclResult HcclAlltoAllV(const void *sendBuf, const uint64_t *sendCounts, const uint64_t *sdispls,
                         HcclDataType sendType, void *recvBuf, const uint64_t *recvCounts,
                         const uint64_t *rdispls, HcclDataType recvType, HcclComm comm,
                         HcclStream stream)
{
    hc_comm_t *c;
    uint64_t b, st, rt;
    HcclResult rc = check_common(comm, 0, sendType, &c, &b);

    if (rc != HCCL_SUCCESS)
        return rc;
    if (sendCounts == NULL || sdispls == NULL || recvCounts == NULL || rdispls == NULL)
        return HCCL_E_PTR;
    if (sendType != recvType) {
        ERR("COLL", "alltoallv: send and receive types must match");
        return HCCL_E_PARA;
    }
    size_t es = dtype_size(sendType);
    if ((rc = check_v(c, sendCounts, sdispls, es, &st)) != HCCL_SUCCESS ||
        (rc = check_v(c, recvCounts, rdispls, es, &rt)) != HCCL_SUCCESS)
        return rc;
    if ((st > 0 && sendBuf == NULL) || (rt > 0 && recvBuf == NULL))
        return HCCL_E_PTR;
    hc_call_t call = {
        .comm = c, .alltoallv = 1, .op = {.dtype = sendType, .send = sendBuf, .recv = recvBuf}};
    size_t n = c->nranks;
    if ((call.counts = malloc(4 * n * sizeof(uint64_t))) == NULL)
        return HCCL_E_MEMORY;
    memcpy(call.counts, sendCounts, n * sizeof(uint64_t));
    memcpy(call.counts + n, sdispls, n * sizeof(uint64_t));
    memcpy(call.counts + 2 * n, recvCounts, n * sizeof(uint64_t));
    memcpy(call.counts + 3 * n, rdispls, n * sizeof(uint64_t));
    return hc_dispatch(&call, stream);
}

HcclResult HcclReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                      HcclReduceOp op, uint32_t root, HcclComm comm, HcclStream stream)
{
    hc_comm_t *c;
    uint64_t b;
    HcclResult rc = check_common(comm, count, dataType, &c, &b);

    if (rc == HCCL_SUCCESS)
        rc = check_redop(op);
    if (rc == HCCL_SUCCESS)
        rc = check_rank(c, root, "root");
    if (rc != HCCL_SUCCESS || count == 0)
        return rc;
    if (sendBuf == NULL || (recvBuf == NULL && c->rank == root))
        return HCCL_E_PTR;
    hc_op_t o = {.kind = DESC_REDUCE,
                 .dtype = dataType,
                 .redop = op,
                 .root = root,
                 .count = count,
                 .send = sendBuf,
                 .send_stride = b,
                 .recv = recvBuf,
                 .recv_stride = b};
    return run(c, &o, stream);
}

HcclResult HcclScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                       uint32_t root, HcclComm comm, HcclStream stream)
{
    hc_comm_t *c;
    uint64_t b;
    HcclResult rc = check_common(comm, recvCount, dataType, &c, &b);

    if (rc == HCCL_SUCCESS)
        rc = check_rank(c, root, "root");
    if (rc != HCCL_SUCCESS || recvCount == 0)
        return rc;
    if (recvBuf == NULL || (sendBuf == NULL && c->rank == root))
        return HCCL_E_PTR;
    hc_op_t o = {.kind = DESC_SCATTER,
                 .dtype = dataType,
                 .root = root,
                 .count = recvCount,
                 .send = sendBuf,
                 .send_stride = b,
                 .recv = recvBuf,
                 .recv_stride = b};
    return run(c, &o, stream);
}

HcclResult HcclBarrier(HcclComm comm, HcclStream stream)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    if (rc != HCCL_SUCCESS)
        return rc;
    hc_op_t o = {.kind = DESC_BARRIER, .dtype = HCCL_DATA_TYPE_INT8};
    return run(c, &o, stream);
}

/* A send or receive as an op, after checking its arguments; op->count stays 0 for one that
 * moves nothing. */
static HcclResult p2p_op(uint8_t kind, void *buf, uint64_t count, HcclDataType dt, uint32_t peer,
                         HcclComm comm, hc_comm_t **c_p, hc_op_t *op)
{
    uint64_t b;
    HcclResult rc = check_common(comm, count, dt, c_p, &b);

    if (rc == HCCL_SUCCESS)
        rc = check_rank(*c_p, peer, "peer rank");
    if (rc != HCCL_SUCCESS || count == 0)
        return rc;
    if (buf == NULL)
        return HCCL_E_PTR;
    *op = (hc_op_t){.kind = kind,
                    .dtype = (uint8_t)dt,
                    .root = peer,
                    .count = count,
                    .send = buf,
                    .send_stride = b,
                    .recv = buf,
                    .recv_stride = b};
    return HCCL_SUCCESS;
}

static HcclResult p2p(uint8_t kind, void *buf, uint64_t count, HcclDataType dt, uint32_t peer,
                      HcclComm comm, HcclStream stream)
{
    hc_comm_t *c;
    hc_op_t o = {0};
    HcclResult rc = p2p_op(kind, buf, count, dt, peer, comm, &c, &o);

    return rc != HCCL_SUCCESS || o.count == 0 ? rc : run(c, &o, stream);
}

HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                    HcclComm comm, HcclStream stream)
{
    return p2p(DESC_SEND, sendBuf, count, dataType, destRank, comm, stream);
}

HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                    HcclComm comm, HcclStream stream)
{
    return p2p(DESC_RECV, recvBuf, count, dataType, srcRank, comm, stream);
}

HcclResult HcclBatchSendRecv(HcclSendRecvItem *sendRecvInfo, uint32_t itemNum, HcclComm comm,
                             HcclStream stream)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);
    hc_call_t call = {.comm = c};

    if (rc != HCCL_SUCCESS || itemNum == 0)
        return rc;
    if (sendRecvInfo == NULL)
        return HCCL_E_PTR;
    if (itemNum > HCCL_BATCH_SEND_RECV_MAX) {
        ERR("COLL", "batch of %u sends and receives: at most %u", itemNum,
            HCCL_BATCH_SEND_RECV_MAX);
        return HCCL_E_PARA;
    }
    if ((call.ops = calloc(itemNum, sizeof(*call.ops))) == NULL)
        return HCCL_E_MEMORY;
    for (uint32_t i = 0; i < itemNum && rc == HCCL_SUCCESS; i++) {
        const HcclSendRecvItem *it = &sendRecvInfo[i];
        if (it->sendRecvType != HCCL_SEND && it->sendRecvType != HCCL_RECV) {
            ERR("COLL", "batch item %u: type %d is neither HCCL_SEND nor HCCL_RECV", i,
                (int)it->sendRecvType);
            rc = HCCL_E_PARA;
            break;
        }
        rc = p2p_op(it->sendRecvType == HCCL_SEND ? DESC_SEND : DESC_RECV, it->buf, it->count,
                    it->dataType, it->remoteRank, comm, &c, &call.ops[call.nops]);
        call.nops += rc == HCCL_SUCCESS && call.ops[call.nops].count > 0;
    }
    if (rc != HCCL_SUCCESS || call.nops == 0) {
        free(call.ops);
        return rc;
    }
    call.op = call.ops[0]; /* what a profile record names */
    return hc_dispatch(&call, stream);
}

HcclResult HcclMemAlloc(void **ptr, size_t size)
{
    hc_client_t *c;
    HcclResult rc;
    uint64_t off;

    if (ptr == NULL)
        return HCCL_E_PTR;
    if (size == 0)
        return HCCL_E_PARA;
    if ((c = hc_client_get(&rc)) == NULL)
        return rc;
    off = hc_arena_alloc(&c->alloc, size);
    hc_client_put(c);
    if (off == UINT64_MAX) {
        ERR("COLL", "HcclMemAlloc(%zu): the arena is full (raise HCCL_BUFFSIZE, now %llu MiB)",
            size, (unsigned long long)(c->l.arena_bytes >> 20));
        return HCCL_E_MEMORY;
    }
    *ptr = c->arena + off;
    return HCCL_SUCCESS;
}

HcclResult HcclMemFree(void *ptr)
{
    hc_client_t *c;
    HcclResult rc;
    uint64_t off;

    if (ptr == NULL)
        return HCCL_E_PTR;
    if ((c = hc_client_get(&rc)) == NULL)
        return rc;
    if (!hc_in_arena(c, ptr, 0, &off) || hc_arena_free(&c->alloc, off) != 0)
        rc = HCCL_E_PARA;
    hc_client_put(c);
    return rc;
}

HcclResult HcclCommRegister(HcclComm comm, void *buff, uint64_t size, void **handle)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    return rc != HCCL_SUCCESS ? rc : hc_reg_add(c, buff, size, handle);
}

HcclResult HcclCommDeregister(HcclComm comm, void *handle)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    return rc != HCCL_SUCCESS ? rc : hc_reg_remove(c, handle);
}
