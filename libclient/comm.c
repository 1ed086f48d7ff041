/* Communicators: creation through the daemon, destruction, queries, error strings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agreed.h"
#include "client.h"
#include "env.h"
#include "futex.h"
#include "lane.h"
#include "log.h"
#include "prof.h"
#include "reg.h"
#include "rootinfo.h"

HcclResult hc_comm_check(HcclComm comm, hc_comm_t **c_p)
{
    hc_comm_t *c = comm;

    if (c == NULL)
        return HCCL_E_PTR;
    if (c->magic == HC_COMM_ABORTED) {
        ERR("INIT", "comm %u was aborted (HcclCommAbort): no call may use it", c->id);
        return HCCL_E_PARA;
    }
    if (c->magic != HC_COMM_MAGIC) {
        ERR("INIT", "%p is not a live communicator", comm);
        return HCCL_E_PARA;
    }
    *c_p = c;
    return HCCL_SUCCESS;
}

void hc_comm_set_error(hc_comm_t *comm, HcclResult rc)
{
    if (rc != HCCL_SUCCESS)
        __atomic_compare_exchange_n(&comm->async_err, &(HcclResult){HCCL_SUCCESS}, rc, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__RootInfoReq req = HCCLD__ROOT_INFO_REQ__INIT;
    HcclResult rc;
    hc_client_t *c;

    if (rootInfo == NULL)
        return HCCL_E_PTR;
    if ((c = hc_client_get(&rc)) == NULL)
        return rc;
    req.timeout_s = (uint32_t)hc_env_connect_timeout_s();
    m.body_case = HCCLD__MSG__BODY_ROOT_INFO_REQ;
    m.root_info_req = &req;
    rc = hc_ctl_call(c, &m, &resp, 10000);
    hc_client_put(c);
    if (rc != HCCL_SUCCESS)
        return rc;
    if (resp->body_case != HCCLD__MSG__BODY_ROOT_INFO_RESP || resp->root_info_resp->info == NULL)
        rc = resp->body_case == HCCLD__MSG__BODY_ROOT_INFO_RESP
                 ? (HcclResult)resp->root_info_resp->result
                 : HCCL_E_INTERNAL;
    else if (rootinfo_pack(resp->root_info_resp->info, rootInfo) != 0)
        rc = HCCL_E_INTERNAL;
    frame_msg_free(resp);
    return rc;
}

/* HCCL_L0_MODE: auto (the daemon decides), coop or daemon. */
static uint32_t l0_mode_wanted(void)
{
    const char *s = getenv("HCCL_L0_MODE");

    if (s == NULL || strcmp(s, "auto") == 0)
        return 0;
    if (strcmp(s, "coop") == 0)
        return 1;
    if (strcmp(s, "daemon") == 0)
        return 2;
    WARN("INIT", "HCCL_L0_MODE=%s is not auto, coop or daemon; using auto", s);
    return 0;
}

static HcclResult init_answer(const Hccld__CommInitResp *r, int *fds, int nfds, hc_comm_t *comm)
{
    comm->id = r->comm_id;
    if (r->resume_token.len == sizeof(comm->resume_token)) {
        memcpy(comm->resume_token, r->resume_token.data, sizeof(comm->resume_token));
        comm->has_token = 1;
    }
    if (r->span_record.len > 0 && (comm->span_record = malloc(r->span_record.len)) != NULL) {
        memcpy(comm->span_record, r->span_record.data, r->span_record.len);
        comm->span_record_len = r->span_record.len;
    }
    comm->p2p_seq = calloc(2 * (size_t)comm->nranks, sizeof(uint64_t));
    comm->p2p_posted = calloc(2 * (size_t)comm->nranks, sizeof(uint64_t));
    if (comm->p2p_seq == NULL || comm->p2p_posted == NULL) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return HCCL_E_MEMORY;
    }
    comm->chunk_bytes = r->chunk_bytes;
    comm->nnodes = r->nnodes ? r->nnodes : 1;
    snprintf(comm->qos_class, sizeof(comm->qos_class), "%s", r->qos_class ? r->qos_class : "");
    hc_prof_note_rank(r->rank);
    if (r->l0_mode != 1 && r->direct_max > 0)
        return hc_lanes_open(comm, r, fds, nfds);
    if (r->l0_mode != 1) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return HCCL_SUCCESS;
    }
    return hc_coop_attach(comm, r, fds, nfds);
}

/* Sends a request that the daemon answers with a CommInitResp, and fills comm from it. A
 * successful answer without a comm (comm_id 0: HCCL_SPLIT_NOCOLOR) leaves comm->id 0. */
static HcclResult comm_call(hc_client_t *c, Hccld__Msg *m, const char *what, uint32_t rank,
                            uint64_t timeout_s, hc_comm_t *comm)
{
    Hccld__Msg *resp = NULL;
    int fds[UDS_MAX_FDS], nfds = 0;
    HcclResult rc;

    /* The daemon enforces the timeout and names the missing ranks; we wait a little longer.
     * The descriptors are this answer's, even when another thread's init read it. */
    rc = hc_ctl_call_fds(c, m, &resp, (int)(timeout_s * 1000 + 5000), fds, &nfds);
    if (rc != HCCL_SUCCESS) {
        ERR("INIT", "rank %u: no answer from the daemon to %s (%s)", rank, what,
            HcclGetErrorString(rc));
        return rc;
    }
    if (resp->body_case != HCCLD__MSG__BODY_COMM_INIT_RESP) {
        rc = HCCL_E_INTERNAL;
    } else if (resp->comm_init_resp->result != HCCL_SUCCESS) {
        rc = (HcclResult)resp->comm_init_resp->result;
        ERR("INIT", "rank %u: %s failed: %s (%s)", rank, what, resp->comm_init_resp->message,
            HcclGetErrorString(rc));
    } else if (resp->comm_init_resp->comm_id != 0) {
        if (resp->comm_init_resp->notice != NULL && resp->comm_init_resp->notice[0] != '\0')
            WARN("INIT", "rank %u: %s", rank, resp->comm_init_resp->notice);
        comm->nranks = resp->comm_init_resp->nranks;
        comm->rank = resp->comm_init_resp->rank;
        comm->c = c;
        rc = init_answer(resp->comm_init_resp, fds, nfds, comm);
        nfds = 0; /* init_answer took them */
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    frame_msg_free(resp);
    return rc;
}

/* The op retry and QoS fields, named alike in CommInitReq and CommSplitReq. */
#define REQ_SET_RETRY_QOS(req, rr, cfg)                                                            \
    do {                                                                                           \
        (req).retry_set = (rr).set != 0;                                                           \
        (req).retry_l0 = (rr).enable[0] != 0;                                                      \
        (req).retry_l1 = (rr).enable[1] != 0;                                                      \
        (req).retry_max_cnt = (rr).max_cnt;                                                        \
        (req).retry_hold_ms = (rr).hold_ms;                                                        \
        (req).retry_interval_ms = (rr).interval_ms;                                                \
        (req).qos_level_set = (cfg).qos_set != 0;                                                  \
        (req).qos_level = (cfg).qos_level;                                                         \
    } while (0)

static HcclResult init_call(hc_client_t *c, const Hccld__RootInfo *ri, uint32_t n, uint32_t rank,
                            int agreed, const uint8_t *parent_job, hc_comm_t *comm)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__CommInitReq req = HCCLD__COMM_INIT_REQ__INIT;
    uint64_t timeout_s = hc_env_connect_timeout_s();
    hc_algo_req_t ar;
    retry_conf_t rr;
    HcclResult rc = hc_algo_req(&comm->cfg, &ar);

    if (rc == HCCL_SUCCESS)
        rc = hc_retry_req(&comm->cfg, &rr);
    if (rc != HCCL_SUCCESS)
        return rc;

    req.info = (Hccld__RootInfo *)ri;
    req.agreed = agreed != 0;
    req.nranks = n;
    req.rank = rank;
    req.timeout_s = (uint32_t)timeout_s;
    req.l0_mode = l0_mode_wanted();
    req.algo = (char *)ar.algo;
    req.algorithm = (char *)ar.algorithm;
    req.algo_by_config = ar.by_config;
    req.deterministic = ar.deterministic;
    req.log_ops = log_level_cur >= LOG_INFO;
    REQ_SET_RETRY_QOS(req, rr, comm->cfg);
    comm->restart_hold_ms = hc_restart_hold_ms(&rr);
    comm->lane_hold_ms = rr.enable[1] ? hc_restart_hold_ms(&rr) : 0;
    /* A forced level-1 algorithm, or a deterministic choice of one, is for every op: none goes
     * over lanes then. */
    req.direct_max =
        ar.algo[0] != '\0' || ar.algorithm[0] != '\0' || ar.deterministic ? 0 : hc_lanes_wanted();
    if (parent_job != NULL) {
        req.parent_job_id.data = (uint8_t *)parent_job;
        req.parent_job_id.len = sizeof(comm->job_id);
    }
    m.body_case = HCCLD__MSG__BODY_COMM_INIT_REQ;
    m.comm_init_req = &req;
    return comm_call(c, &m, "comm init", rank, timeout_s, comm);
}

HcclResult hc_comm_init(hc_client_t *c, const Hccld__RootInfo *ri, uint32_t n, uint32_t rank,
                        int agreed, const uint8_t *parent_job, const hc_comm_cfg_t *cfg,
                        HcclComm *comm)
{
    hc_comm_t *hc = calloc(1, sizeof(*hc));
    HcclResult rc;

    if (hc == NULL)
        return HCCL_E_MEMORY;
    hc->cfg.deterministic = -1;
    if (cfg != NULL)
        hc->cfg = *cfg;
    rc = init_call(c, ri, n, rank, agreed, parent_job, hc);
    if (rc != HCCL_SUCCESS) {
        free(hc->p2p_seq);
        free(hc->p2p_posted);
        free(hc->span_record);
        free(hc);
        return rc;
    }
    hc->magic = HC_COMM_MAGIC;
    hc->c = c;
    hc_client_hold(c);
    hc->nranks = n;
    hc->rank = rank;
    /* Splits of a comm across daemons derive their jobs from these (libclient/split.c). */
    hc->has_job = 1;
    memcpy(hc->job_id, ri->job_id.data, sizeof(hc->job_id));
    memcpy(hc->job_key, ri->job_key.data, sizeof(hc->job_key));
    if (hc->cfg.name[0] == '\0') {
        char hex[2 * sizeof(hc->job_id) + 1];
        hex_encode(hc->job_id, sizeof(hc->job_id), hex);
        snprintf(hc->cfg.name, sizeof(hc->cfg.name), "hccl-%s", hex);
    }
    hc_comm_track(hc);
    *comm = hc;
    INFO("INIT", "rank %u of %u: comm %u (%s) ready on %u daemon(s), level 0 %s", rank, n, hc->id,
         hc->cfg.name, hc->nnodes, hc->coop ? "cooperative" : "by the daemon");
    return HCCL_SUCCESS;
}

HcclResult hc_comm_init_root(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                             const hc_comm_cfg_t *cfg, HcclComm *comm)
{
    uint32_t mb = cfg != NULL ? cfg->buff_mb : 0;
    Hccld__RootInfo *ri;
    hc_client_t *c;
    HcclResult rc;

    if (rootInfo == NULL || comm == NULL)
        return HCCL_E_PTR;
    if (nRanks == 0 || rank >= nRanks) {
        ERR("INIT", "rank %u of nRanks %u is out of range", rank, nRanks);
        return HCCL_E_PARA;
    }
    if ((ri = rootinfo_unpack(rootInfo)) == NULL) {
        ERR("INIT", "the root info is malformed (not from HcclGetRootInfo?)");
        return HCCL_E_PARA;
    }
    if ((c = hc_client_get_mb(mb, &rc)) != NULL) {
        if (c->l.arena_bytes < ((uint64_t)mb << 20))
            WARN("INIT",
                 "hcclBufferSize %u MB: this process's arena is %llu MB already (set by "
                 "its first comm or HCCL_BUFFSIZE) and stays so",
                 mb, (unsigned long long)(c->l.arena_bytes >> 20));
        rc = hc_comm_init(c, ri, nRanks, rank, 0, NULL, cfg, comm);
        hc_client_put(c);
    }
    hccld__root_info__free_unpacked(ri, NULL);
    return rc;
}

HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                HcclComm *comm)
{
    return hc_comm_init_root(nRanks, rootInfo, rank, NULL, comm);
}

/* HCCL_ROOT_INFO (hccl-run) first; then a rank table or a launcher's environment. */
HcclResult HcclCommInitFromEnv(HcclComm *comm)
{
    const char *hex = getenv("HCCL_ROOT_INFO");
    uint64_t rank, size;
    HcclRootInfo ri;

    if (comm == NULL)
        return HCCL_E_PTR;
    if (hex == NULL)
        return hc_launcher_init(comm);
    memset(&ri, 0, sizeof(ri));
    if (hex_decode(hex, ri.internal, sizeof(ri.internal)) < 0 ||
        parse_u64(getenv("HCCL_RANK"), &rank) != 0 ||
        parse_u64(getenv("HCCL_WORLD_SIZE"), &size) != 0 || size > UINT32_MAX || rank >= size) {
        ERR("INIT", "HcclCommInitFromEnv needs HCCL_ROOT_INFO (hex), HCCL_RANK and "
                    "HCCL_WORLD_SIZE (as hccl-run sets them)");
        return HCCL_E_PARA;
    }
    return HcclCommInitRootInfo((uint32_t)size, &ri, (uint32_t)rank, comm);
}

HcclResult HcclCommSplit(HcclComm comm, uint32_t color, uint32_t key, HcclComm *newComm)
{
    Hccld__Msg m = HCCLD__MSG__INIT;
    Hccld__CommSplitReq req = HCCLD__COMM_SPLIT_REQ__INIT;
    uint64_t timeout_s = hc_env_connect_timeout_s();
    hc_comm_t *parent, *child;
    hc_algo_req_t ar;
    retry_conf_t rr;
    HcclResult rc = hc_comm_check(comm, &parent);

    if (rc == HCCL_SUCCESS && newComm == NULL)
        rc = HCCL_E_PTR;
    if (rc != HCCL_SUCCESS)
        return rc;
    /* A comm on one daemon splits there; one across daemons splits among its ranks. */
    if (parent->nnodes > 1)
        return hc_split_multinode(parent, color, key, parent->split_seq++, newComm);
    if ((rc = hc_algo_req(&parent->cfg, &ar)) != HCCL_SUCCESS ||
        (rc = hc_retry_req(&parent->cfg, &rr)) != HCCL_SUCCESS)
        return rc;
    if ((child = calloc(1, sizeof(*child))) == NULL)
        return HCCL_E_MEMORY;
    child->cfg = parent->cfg;
    hc_comm_name_child(parent->cfg.name, parent->split_seq, color, child->cfg.name);
    req.comm_id = parent->id;
    req.rank = parent->rank;
    req.color = color;
    req.key = key;
    req.seq = parent->split_seq++;
    req.l0_mode = l0_mode_wanted();
    req.timeout_s = (uint32_t)timeout_s;
    req.algo = (char *)ar.algo;
    req.algorithm = (char *)ar.algorithm;
    req.algo_by_config = ar.by_config;
    req.deterministic = ar.deterministic;
    REQ_SET_RETRY_QOS(req, rr, parent->cfg);
    child->restart_hold_ms = hc_restart_hold_ms(&rr);
    child->lane_hold_ms = rr.enable[1] ? hc_restart_hold_ms(&rr) : 0;
    m.body_case = HCCLD__MSG__BODY_COMM_SPLIT_REQ;
    m.comm_split_req = &req;
    rc = comm_call(parent->c, &m, "comm split", parent->rank, timeout_s, child);
    if (rc != HCCL_SUCCESS || child->id == 0) {
        free(child->p2p_seq);
        free(child->p2p_posted);
        free(child->span_record);
        free(child);
        if (rc == HCCL_SUCCESS)
            *newComm = NULL;
        return rc;
    }
    child->magic = HC_COMM_MAGIC;
    hc_comm_track(child);
    *newComm = child;
    INFO("INIT", "rank %u split (color %u, key %u): comm %u (%s), rank %u of %u", parent->rank,
         color, key, child->id, child->cfg.name, child->rank, child->nranks);
    return HCCL_SUCCESS;
}

/* Tells the daemon this rank leaves comm: it fails what the other ranks queued for it. The
 * daemon frees its side even when we cannot hear the answer (it sees us leave). */
static void comm_leave(hc_comm_t *c)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__CommDestroyReq req = HCCLD__COMM_DESTROY_REQ__INIT;

    if (hc_prof_enabled())
        hc_prof_flush(); /* the records of its ops are out before the ranks' files are read */
    req.comm_id = c->id;
    req.rank = c->rank;
    m.body_case = HCCLD__MSG__BODY_COMM_DESTROY_REQ;
    m.comm_destroy_req = &req;
    if (hc_ctl_call(c->c, &m, &resp, 5000) == HCCL_SUCCESS)
        frame_msg_free(resp);
}

/* Frees what comm holds, and comm itself unless it stays as a tombstone (magic): an aborted
 * comm does, so that a call that raced with the abort, or one made after it, reads a comm that
 * says so instead of freed memory. */
static void comm_free(hc_comm_t *c, uint32_t tombstone)
{
    hc_comm_untrack(c);
    hc_reg_drop_comm(c);
    c->magic = tombstone;
    hc_coop_detach(c);
    hc_lanes_close(c);
    hc_client_put(c->c);
    free(c->p2p_seq);
    free(c->p2p_posted);
    free(c->span_record);
    c->p2p_seq = NULL;
    c->p2p_posted = NULL;
    c->span_record = NULL;
    if (tombstone == 0)
        free(c);
}

HcclResult HcclCommDestroy(HcclComm comm)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    if (rc != HCCL_SUCCESS)
        return rc;
    if (c->lanes != NULL)
        hc_lanes_bye(c);
    comm_leave(c);
    comm_free(c, 0);
    return HCCL_SUCCESS;
}

/* Longest HcclCommAbort waits for calls to let go of the comm before it gives up freeing it. */
#define ABORT_DRAIN_NS (10ull * 1000000000ull)

HcclResult HcclCommAbort(HcclComm comm)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);
    uint64_t until;

    if (rc != HCCL_SUCCESS)
        return rc;
    if (__atomic_exchange_n(&c->aborted, 1, __ATOMIC_ACQ_REL))
        return HCCL_E_PARA; /* another thread aborts it already */
    WARN("INIT", "rank %u: comm %u aborted", c->rank, c->id);
    /* Wake whoever waits: on the completion ring, and on the ranks' shared control block
     * (coop: this also fails the peers' waits at once). Then leave: the daemon fails the
     * other ranks' ops on comm, and our own pieces. */
    hc_coop_abort(c);
    hc_wake_waiters(c->c);
    comm_leave(c);
    until = now_ns() + ABORT_DRAIN_NS;
    while (__atomic_load_n(&c->users, __ATOMIC_ACQUIRE) > 0 && now_ns() < until) {
        hc_wake_waiters(c->c);
        usleep(1000);
    }
    if (__atomic_load_n(&c->users, __ATOMIC_ACQUIRE) > 0) {
        ERR("INIT", "rank %u: comm %u: a call still holds it after the abort; it is not freed",
            c->rank, c->id);
        return HCCL_SUCCESS;
    }
    comm_free(c, HC_COMM_ABORTED);
    return HCCL_SUCCESS;
}

HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    if (rc == HCCL_SUCCESS && rankSize == NULL)
        rc = HCCL_E_PTR;
    if (rc == HCCL_SUCCESS)
        *rankSize = c->nranks;
    return rc;
}

HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    if (rc == HCCL_SUCCESS && rank == NULL)
        rc = HCCL_E_PTR;
    if (rc == HCCL_SUCCESS)
        *rank = c->rank;
    return rc;
}

const char *HcclGetErrorString(HcclResult code)
{
    static const char *const names[] = {
        "HCCL_SUCCESS: success",
        "HCCL_E_PARA: invalid parameter",
        "HCCL_E_PTR: null pointer or invalid handle",
        "HCCL_E_MEMORY: out of memory",
        "HCCL_E_INTERNAL: internal error",
        "HCCL_E_NOT_SUPPORT: not supported",
        "HCCL_E_NOT_FOUND: not found",
        "HCCL_E_UNAVAIL: resource unavailable (is hccld running?)",
        "HCCL_E_SYSCALL: system call failed",
        "HCCL_E_TIMEOUT: timed out",
        "HCCL_E_OPEN_FILE_FAILURE: cannot open file",
        "HCCL_E_TCP_CONNECT: TCP connection failed",
        "HCCL_E_ROCE_CONNECT: RoCE connection failed",
        "HCCL_E_TCP_TRANSFER: TCP transfer failed",
        "HCCL_E_ROCE_TRANSFER: RoCE transfer failed",
        "HCCL_E_RUNTIME: runtime error",
        "HCCL_E_DRV: driver error",
        "HCCL_E_PROFILING: profiling error",
        "HCCL_E_CCE: compute engine error",
        "HCCL_E_NETWORK: network error",
        "HCCL_E_AGAIN: not complete yet, try again",
        "HCCL_E_REMOTE: a remote rank or daemon failed",
        "HCCL_E_SUSPENDING: suspending",
        "HCCL_E_OPRETRY_FAIL: operation retry failed",
        "HCCL_E_OOM: out of memory on the device",
    };

    if ((unsigned)code < sizeof(names) / sizeof(names[0]))
        return names[code];
    return "unknown HcclResult";
}
