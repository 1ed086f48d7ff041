/*
 * hcclD public API: Huawei HCCL's collective communication interface, served by the node's
 * hccld daemon. Names, types and numeric enum values follow HCCL so that HCCL code ports with
 * little change. Where HCCL takes an aclrtStream, hcclD takes an HcclStream (see below).
 *
 * Threading: a communicator may be used by one thread at a time (as in HCCL and NCCL);
 * different communicators and streams may be used from different threads concurrently.
 */
#ifndef HCCL_HCCL_H
#define HCCL_HCCL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HCCL_API __attribute__((visibility("default")))

typedef enum {
    HCCL_SUCCESS = 0,
    HCCL_E_PARA = 1,   /* bad argument */
    HCCL_E_PTR = 2,    /* null pointer or handle */
    HCCL_E_MEMORY = 3, /* out of (shared) memory */
    HCCL_E_INTERNAL = 4,
    HCCL_E_NOT_SUPPORT = 5,
    HCCL_E_NOT_FOUND = 6,
    HCCL_E_UNAVAIL = 7, /* daemon not reachable */
    HCCL_E_SYSCALL = 8,
    HCCL_E_TIMEOUT = 9,
    HCCL_E_OPEN_FILE_FAILURE = 10,
    HCCL_E_TCP_CONNECT = 11,
    HCCL_E_ROCE_CONNECT = 12,
    HCCL_E_TCP_TRANSFER = 13,
    HCCL_E_ROCE_TRANSFER = 14,
    HCCL_E_RUNTIME = 15,
    HCCL_E_DRV = 16,
    HCCL_E_PROFILING = 17,
    HCCL_E_CCE = 18,
    HCCL_E_NETWORK = 19,
    HCCL_E_AGAIN = 20,  /* not done yet (HcclStreamQuery) */
    HCCL_E_REMOTE = 21, /* a peer rank or daemon failed */
    HCCL_E_SUSPENDING = 22,
    HCCL_E_OPRETRY_FAIL = 23,
    HCCL_E_OOM = 24,
    HCCL_E_RESERVED
} HcclResult;

typedef enum {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_UINT16 = 8,
    HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11,
    HCCL_DATA_TYPE_RESERVED
} HcclDataType;

typedef enum {
    HCCL_REDUCE_SUM = 0,
    HCCL_REDUCE_PROD = 1,
    HCCL_REDUCE_MAX = 2,
    HCCL_REDUCE_MIN = 3,
    HCCL_REDUCE_RESERVED
} HcclReduceOp;

typedef void *HcclComm;

#define HCCL_ROOT_INFO_BYTES 4108
typedef struct HcclRootInfoDef {
    char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

/*
 * A communicator's configuration, laid out as HCCL's hccl_types.h lays it out (version 11 of the
 * layout, as in the hcomm repository's include/hccl/hccl_types.h, which HCCL's hccl repository
 * builds on): a 24-byte info header (its size, magic word and version, written by
 * HcclCommConfigInit), then HCCL's fields. The library reads a field only if the size the header
 * records covers it and the fields HCCL added in the same version (hcclExecTimeOut comes with
 * hcclAlgo, hcclQos with hcclSymWinMaxMemSizePerRank), so that the tail padding of an older
 * header is never taken for a field: a config built with an older (smaller) or newer (larger)
 * HCCL header works for the fields both know. A wrong magic word is HCCL_E_PARA. A field left
 * NOT_SET (or "") follows its environment variable; a set one wins over it, for this comm.
 *   hcclBufferSize     MB of the process's arena (HCCL_BUFFSIZE), 1..16384: it takes effect when
 *                      this comm is the process's first contact with its daemon; later, a
 *                      smaller arena is kept (with a WARN).
 *   hcclDeterministic  0 or 1 (HCCL_DETERMINISTIC): the level-1 choice on fixed link figures.
 *   hcclCommName       the comm's name ("": hcclD names it; see HcclGetCommName).
 *   hcclAlgo           HCCL_ALGO's syntax, for this comm only ("": the HCCL_ALGO variable).
 *   hcclRdmaTrafficClass (0..255), hcclRdmaServiceLevel (0..7): checked, not applied per comm;
 *                      the daemon's HCCL_RDMA_TC / HCCL_RDMA_SL and QoS classes set them.
 *   hcclExecTimeOut    seconds an operation of this comm may take (HCCL_EXEC_TIMEOUT for this
 *                      comm alone): 1..INT32_MAX, 0 never times out; then HCCL_E_TIMEOUT.
 *   hcclRetryEnable    HCCL_OP_RETRY_ENABLE's syntax ("L1:1, L2:0"), for this comm: the levels
 *                      it names win over the variable's. Checked and passed to the daemon,
 *                      which does not retry ops yet.
 *   hcclRetryParams    HCCL_OP_RETRY_PARAMS's syntax ("MaxCnt:3, HoldTime:5000,
 *                      IntervalTime:1000"), for this comm; checked and passed on likewise.
 *   hcclQos            0..7, HCCL's QoS level (7 the most favoured): asks for one of the
 *                      daemon's QoS classes for this comm (see docs/running.md); passed on.
 *   hcclUdi, hcclOpExpansionMode, hcclWorldRankID, hcclJobID, aclGraphZeroCopyEnable,
 *   hcclBufferName, hcclSymWinMaxMemSizePerRank, hcclChannelSqDepth:
 *                      accepted and ignored (device-side settings).
 */
#define HCCL_COMM_CONFIG_INFO_BYTES 24
#define HCCL_COMM_CONFIG_MAGIC_WORD 0xf0f0f0f0u
#define HCCL_COMM_CONFIG_VERSION 11
#define HCCL_COMM_DEFAULT_BUFFSIZE 200
#define HCCL_COMM_DEFAULT_DETERMINISTIC 0
#define HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET (-1)
#define HCCL_COMM_QOS_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_SQ_DEPTH_CONFIG_NOT_SET 0xffffffffu
#define HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE 16ull /* GB, hcclSymWinMaxMemSizePerRank's default */
#define COMM_NAME_MAX_LENGTH 128
#define BUFFER_NAME_MAX_LENGTH 128
#define UDI_MAX_LENGTH 128
#define HCCL_COMM_ALGO_MAX_LENGTH 1600
#define HCCL_COMM_RETRY_ENABLE_MAX_LENGTH 50
#define HCCL_COMM_RETRY_PARAMS_MAX_LENGTH 128

typedef struct HcclCommConfigDef {
    char reserved[HCCL_COMM_CONFIG_INFO_BYTES]; /* size_t size, magic, version, 8 reserved */
    uint32_t hcclBufferSize;
    uint32_t hcclDeterministic;
    char hcclCommName[COMM_NAME_MAX_LENGTH];
    char hcclUdi[UDI_MAX_LENGTH];
    uint32_t hcclOpExpansionMode;
    uint32_t hcclRdmaTrafficClass;
    uint32_t hcclRdmaServiceLevel;
    uint32_t hcclWorldRankID;
    uint64_t hcclJobID;
    uint8_t aclGraphZeroCopyEnable;
    int32_t hcclExecTimeOut;
    char hcclAlgo[HCCL_COMM_ALGO_MAX_LENGTH];
    char hcclRetryEnable[HCCL_COMM_RETRY_ENABLE_MAX_LENGTH];
    char hcclRetryParams[HCCL_COMM_RETRY_PARAMS_MAX_LENGTH];
    char hcclBufferName[BUFFER_NAME_MAX_LENGTH];
    uint32_t hcclQos;
    uint64_t hcclSymWinMaxMemSizePerRank;
    uint32_t hcclChannelSqDepth;
} HcclCommConfig;

/* Fills config with "not set" everywhere and the info header, as HCCL's inline function does:
 * inline, so that the size recorded is that of the caller's header. */
typedef struct HcclCommConfigInfoDef {
    size_t size;
    uint32_t magicWord;
    uint32_t version;
    uint64_t reserved;
} HcclCommConfigInfo;

static inline void HcclCommConfigInit(HcclCommConfig *config)
{
    HcclCommConfigInfo *info = (HcclCommConfigInfo *)(void *)config;

    if (config == NULL)
        return;
    memset(config, 0, sizeof(*config));
    info->size = sizeof(HcclCommConfig);
    info->magicWord = HCCL_COMM_CONFIG_MAGIC_WORD;
    info->version = HCCL_COMM_CONFIG_VERSION;
    config->hcclBufferSize = HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET;
    config->hcclDeterministic = HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET;
    config->hcclRdmaTrafficClass = HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET;
    config->hcclRdmaServiceLevel = HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET;
    config->hcclExecTimeOut = HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET;
    config->hcclQos = HCCL_COMM_QOS_CONFIG_NOT_SET;
    config->hcclSymWinMaxMemSizePerRank = HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE;
    config->hcclChannelSqDepth = HCCL_COMM_SQ_DEPTH_CONFIG_NOT_SET;
}

/*
 * A stream orders asynchronous operations. NULL means "synchronous": the call returns when the
 * operation is complete on this rank. With a stream from HcclStreamCreate the call returns at
 * once; operations on one stream complete in issue order.
 */
typedef struct HcclStreamDef *HcclStream;

/* Asks the local daemon for a new job: root daemon address, job id and a random job key. */
HCCL_API HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);
/* Joins rank `rank` of `nRanks` to the job named by rootInfo; blocks until all ranks joined or
 * HCCL_CONNECT_TIMEOUT seconds passed (HCCL_E_TIMEOUT). */
HCCL_API HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo,
                                         uint32_t rank, HcclComm *comm);
/* HcclCommInitRootInfo with a configuration from HcclCommConfigInit (see HcclCommConfig):
 * HCCL_E_PTR for a NULL config, HCCL_E_PARA for a bad magic word or a field out of range. */
HCCL_API HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo,
                                               uint32_t rank, const HcclCommConfig *config,
                                               HcclComm *comm);
/* The comm's name into commName (COMM_NAME_MAX_LENGTH bytes): its config's hcclCommName, else
 * "hccl-" and its job id in hex, the same on every rank and unique to the job; a child of
 * HcclCommSplit is "<parent>_split<N>_c<color>" (N: the parent's N-th split, from 0). */
HCCL_API HcclResult HcclGetCommName(HcclComm comm, char *commName);
/*
 * Joins rank `rank` to the communicator HCCL's rank table describes (version 1.0 JSON: every
 * server's server_id is its hccld's address, "IP" for port 60000 or "IP:PORT", with its devices'
 * rank_id). Every rank reads the same file and no rank needs a root info: the root daemon is the
 * server of rank 0, the job follows from the file's bytes and HCCL_JOB_KEY. The rank's own daemon
 * must be the server the table lists it under; a server may list any number of ranks, with any
 * rank ids. Returns HCCL_E_NOT_FOUND when the file cannot be read, HCCL_E_PARA when it is
 * malformed or lacks the rank, HCCL_E_NOT_SUPPORT when it spans servers but the rank's daemon
 * does not listen for peers, HCCL_E_TIMEOUT when not every rank joined within
 * HCCL_CONNECT_TIMEOUT. Every rank must create its comms from rank tables and launcher
 * environments in the same order (the n-th such comm of a process is another job).
 */
HCCL_API HcclResult HcclCommInitClusterInfo(const char *rankTableFile, uint32_t rank,
                                            HcclComm *comm);
/* HcclCommInitClusterInfo with a configuration (see HcclCommConfig), as torch_npu calls it when
 * a rank table is set. */
HCCL_API HcclResult HcclCommInitClusterInfoConfig(const char *rankTableFile, uint32_t rank,
                                                  const HcclCommConfig *config, HcclComm *comm);
/* A communicator from the environment: HCCL_ROOT_INFO (hex), HCCL_RANK and HCCL_WORLD_SIZE (set
 * by hccl-run); else RANK_TABLE_FILE with RANK_ID (as HcclCommInitClusterInfo); else torchrun
 * (RANK, WORLD_SIZE, MASTER_ADDR), Open MPI (OMPI_COMM_WORLD_RANK/SIZE, with HCCL_ROOT_ADDR) or
 * Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST), whose ranks agree on the job without
 * exchanging anything. HCCL_ROOT_ADDR ("HOST" or "HOST:PORT") overrides the root daemon. */
HCCL_API HcclResult HcclCommInitFromEnv(HcclComm *comm);
HCCL_API HcclResult HcclCommDestroy(HcclComm comm);

/* Every rank of comm calls it (as MPI_Comm_split / ncclCommSplit): ranks passing the same color
 * form a new communicator, ordered by key then by their rank in comm. A rank passing
 * HCCL_SPLIT_NOCOLOR joins none and gets *newComm = NULL. On a comm across daemons the ranks
 * exchange colors through comm itself (one more allgather on it, in issue order); a child's ranks
 * may sit on its daemons in any way. */
#define HCCL_SPLIT_NOCOLOR 0xffffffffu
HCCL_API HcclResult HcclCommSplit(HcclComm comm, uint32_t color, uint32_t key, HcclComm *newComm);
HCCL_API HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize);
HCCL_API HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank);
/* The first error an asynchronous operation on comm met, or HCCL_SUCCESS. */
HCCL_API HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError);
/* Ends comm at once, like HcclCommDestroy, without waiting for its operations: may be called
 * from another thread while a call on comm blocks. That call, and every call queued on a
 * stream for comm, returns HCCL_E_SUSPENDING; the other ranks' operations on comm fail with
 * HCCL_E_REMOTE. comm is invalid afterwards: start no new call on it once this has begun (one
 * that does, or that races with the abort, returns HCCL_E_PARA). */
HCCL_API HcclResult HcclCommAbort(HcclComm comm);
HCCL_API const char *HcclGetErrorString(HcclResult code);

HCCL_API HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count,
                                  HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                                  HcclStream stream);
/* hcclD's own, not HCCL's: HcclAllReduce run between the daemons with the level-1 algorithm algo
 * (an HCCL_ALGO name: "ring", "H-D_R", "fullmesh", "tree", "NB" or "NHR"; NULL or "": the comm's
 * choice), for this call alone. Every rank must name the same (HCCL_E_PARA on every rank
 * otherwise); an unknown name is HCCL_E_PARA at once. Ranks of one daemon use no level-1 algorithm.
 */
HCCL_API HcclResult HcclAllReduceAlgo(void *sendBuf, void *recvBuf, uint64_t count,
                                      HcclDataType dataType, HcclReduceOp op, const char *algo,
                                      HcclComm comm, HcclStream stream);
HCCL_API HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root,
                                  HcclComm comm, HcclStream stream);
HCCL_API HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount,
                                  HcclDataType dataType, HcclComm comm, HcclStream stream);
HCCL_API HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
                                      HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                                      HcclStream stream);
HCCL_API HcclResult HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType sendType,
                                 void *recvBuf, uint64_t recvCount, HcclDataType recvType,
                                 HcclComm comm, HcclStream stream);
HCCL_API HcclResult HcclAlltoAllV(const void *sendBuf, const uint64_t *sendCounts,
                                  const uint64_t *sdispls, HcclDataType sendType, void *recvBuf,
                                  const uint64_t *recvCounts, const uint64_t *rdispls,
                                  HcclDataType recvType, HcclComm comm, HcclStream stream);
/* HCCL's V variants: rank r's block holds recvCounts[r] (sendCounts[r]) elements at
 * recvDispls[r] (sendDispls[r]) elements from the buffer's start (arrays of nranks uint64_t, the
 * same on every rank; a rank's own entry must equal its sendCount or recvCount). HcclAllGatherV
 * runs as an HcclAlltoAllV; HcclReduceScatterV pads every block to the largest in a copy and runs
 * one HcclReduceScatter (on a stream: once the stream's earlier calls are done, before it
 * returns). */
HCCL_API HcclResult HcclAllGatherV(void *sendBuf, uint64_t sendCount, void *recvBuf,
                                   const void *recvCounts, const void *recvDispls,
                                   HcclDataType dataType, HcclComm comm, HcclStream stream);
HCCL_API HcclResult HcclReduceScatterV(void *sendBuf, const void *sendCounts,
                                       const void *sendDispls, void *recvBuf, uint64_t recvCount,
                                       HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                                       HcclStream stream);
HCCL_API HcclResult HcclReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                               HcclReduceOp op, uint32_t root, HcclComm comm, HcclStream stream);
HCCL_API HcclResult HcclScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
                                HcclDataType dataType, uint32_t root, HcclComm comm,
                                HcclStream stream);
HCCL_API HcclResult HcclBarrier(HcclComm comm, HcclStream stream);
HCCL_API HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType,
                             uint32_t destRank, HcclComm comm, HcclStream stream);
HCCL_API HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                             HcclComm comm, HcclStream stream);

typedef enum { HCCL_SEND = 0, HCCL_RECV = 1, HCCL_SEND_RECV_RESERVED } HcclSendRecvType;

typedef struct HcclSendRecvItemDef {
    HcclSendRecvType sendRecvType;
    void *buf;
    uint64_t count;
    HcclDataType dataType;
    uint32_t remoteRank;
} HcclSendRecvItem;

/* The most items one HcclBatchSendRecv takes (HCCL_E_PARA beyond): every item has a piece in
 * flight at once, and a process has this many submission slots with its daemon. HCCL itself
 * sets no bound. */
#define HCCL_BATCH_SEND_RECV_MAX 256
/*
 * Sends and receives of a batch, all in flight at once: unlike HcclSend and HcclRecv in a row,
 * the order of the items does not matter, so every rank may send to its peers and receive from
 * them in one call (pipeline stages, halo exchanges) without deadlock. Returns when every item
 * is done (on a stream: queued as one call). Items of count 0 do nothing; the k-th item to a
 * peer pairs with the k-th that peer receives from this rank, and their counts and types must
 * agree.
 */
HCCL_API HcclResult HcclBatchSendRecv(HcclSendRecvItem *sendRecvInfo, uint32_t itemNum,
                                      HcclComm comm, HcclStream stream);

HCCL_API HcclResult HcclStreamCreate(HcclStream *stream);
/* Waits until every operation issued on stream is complete; returns the first error. */
HCCL_API HcclResult HcclStreamSynchronize(HcclStream stream);
/* HCCL_SUCCESS when all issued operations are complete, HCCL_E_AGAIN otherwise. */
HCCL_API HcclResult HcclStreamQuery(HcclStream stream);
HCCL_API HcclResult HcclStreamDestroy(HcclStream stream);

/* A buffer in the arena this process shares with its daemon: collectives on it skip the
 * staging copy. */
HCCL_API HcclResult HcclMemAlloc(void **ptr, size_t size);
HCCL_API HcclResult HcclMemFree(void *ptr);

/*
 * Registers ordinary memory (malloc, new, anonymous mmap) with comm so that collectives on it
 * skip the staging copy, as NCCL's ncclCommRegister does: the whole pages of [buff, buff +
 * size) are moved into the arena in place (same addresses, same content), so register a buffer
 * that ops reuse (gradient buckets) while no other thread uses it. *handle is for
 * HcclCommDeregister, which moves the pages back; HcclCommDestroy deregisters what is left.
 * Deregister before freeing the memory. After fork(), a child shares registered pages with its
 * parent. HCCL_E_PARA: not private anonymous memory, or pages shared with another registered
 * buffer; HCCL_E_MEMORY: no room in the arena (HCCL_BUFFSIZE).
 */
HCCL_API HcclResult HcclCommRegister(HcclComm comm, void *buff, uint64_t size, void **handle);
HCCL_API HcclResult HcclCommDeregister(HcclComm comm, void *handle);

#ifdef __cplusplus
}
#endif

#endif /* HCCL_HCCL_H */
