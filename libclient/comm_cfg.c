/* Communicator settings: HcclCommConfig read as far as its header says, the environment's
 * level-1 and op retry settings, and comm names. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client.h"
#include "env.h"
#include "log.h"
#include "retry_conf.h"

#define HC_QOS_LEVEL_MAX 7 /* hcclQos: HCCL's QoS levels are 0..7 */

/* Whether a config of `size` bytes holds field f whole. */
#define CFG_HAS(size, f) ((size) >= offsetof(HcclCommConfig, f) + sizeof(((HcclCommConfig *)0)->f))

/* A string field: NUL-terminated inside it (empty is fine). */
static HcclResult cfg_string(const char *what, const char *v, size_t cap, char *out, size_t outcap)
{
    size_t n = strnlen(v, cap);

    if (n == cap || n >= outcap) {
        ERR("INIT", "HcclCommConfig: %s is not a string of fewer than %zu characters", what,
            n == cap ? cap : outcap);
        return HCCL_E_PARA;
    }
    memcpy(out, v, n);
    out[n] = '\0';
    return HCCL_SUCCESS;
}

static HcclResult cfg_buffsize(uint32_t v, hc_comm_cfg_t *out)
{
    char s[16], why[256];
    uint64_t mb;

    if (v == HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET)
        return HCCL_SUCCESS;
    snprintf(s, sizeof(s), "%u", v);
    if (mb_check("hcclBufferSize", s, HC_BUFFSIZE_MAX_MB, &mb, why, sizeof(why)) != 0) {
        ERR("INIT", "HcclCommConfig: %s", why);
        return HCCL_E_PARA;
    }
    out->buff_mb = (uint32_t)mb;
    return HCCL_SUCCESS;
}

static HcclResult cfg_range(const char *what, uint32_t v, uint32_t not_set, uint32_t max)
{
    if (v == not_set || v <= max)
        return HCCL_SUCCESS;
    ERR("INIT", "HcclCommConfig: %s=%u is out of range [0, %u]", what, v, max);
    return HCCL_E_PARA;
}

/* hcclExecTimeOut: seconds, as HCCL_EXEC_TIMEOUT for this comm alone; 0 never times out (as
 * on HCCL's A2 parts). */
static HcclResult cfg_exec_timeout(int32_t v, hc_comm_cfg_t *out)
{
    if (v == HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET)
        return HCCL_SUCCESS;
    if (v < 0) {
        ERR("INIT", "HcclCommConfig: hcclExecTimeOut=%d is out of range [0, %d] seconds", v,
            INT32_MAX);
        return HCCL_E_PARA;
    }
    /* "Never": a century, so that deadlines stay far from overflowing. */
    out->exec_timeout_ns = (v == 0 ? 100ull * 365 * 86400 : (uint64_t)v) * 1000000000ull;
    return HCCL_SUCCESS;
}

/* hcclQos: HCCL's QoS level; the daemon maps it to one of its classes (proto/hccld.proto). */
static HcclResult cfg_qos(uint32_t v, hc_comm_cfg_t *out)
{
    HcclResult rc = cfg_range("hcclQos", v, HCCL_COMM_QOS_CONFIG_NOT_SET, HC_QOS_LEVEL_MAX);

    if (rc == HCCL_SUCCESS && v != HCCL_COMM_QOS_CONFIG_NOT_SET) {
        out->qos_set = 1;
        out->qos_level = v;
    }
    return rc;
}

/* The fields that a config of `size` bytes holds (the rest stay as out has them). */
static HcclResult cfg_fields(const HcclCommConfig *k, size_t size, hc_comm_cfg_t *out)
{
    HcclResult rc = HCCL_SUCCESS;

    if (CFG_HAS(size, hcclBufferSize))
        rc = cfg_buffsize(k->hcclBufferSize, out);
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclDeterministic)) {
        if (k->hcclDeterministic == 0 || k->hcclDeterministic == 1)
            out->deterministic = (int)k->hcclDeterministic;
        else if (k->hcclDeterministic != HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET)
            rc = cfg_range("hcclDeterministic", k->hcclDeterministic, 0, 1);
    }
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclCommName))
        rc = cfg_string("hcclCommName", k->hcclCommName, sizeof(k->hcclCommName), out->name,
                        sizeof(out->name));
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclRdmaTrafficClass))
        rc = cfg_range("hcclRdmaTrafficClass", k->hcclRdmaTrafficClass,
                       HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET, 255);
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclRdmaServiceLevel))
        rc = cfg_range("hcclRdmaServiceLevel", k->hcclRdmaServiceLevel,
                       HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET, 7);
    /* HCCL brought hcclExecTimeOut together with hcclAlgo: where a header ends before hcclAlgo
     * (HCCL's version 7, 320 bytes), its tail padding lies where hcclExecTimeOut would be. */
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclAlgo))
        rc = cfg_exec_timeout(k->hcclExecTimeOut, out);
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclAlgo))
        rc = cfg_string("hcclAlgo", k->hcclAlgo, sizeof(k->hcclAlgo), out->algo, sizeof(out->algo));
    /* Checked with the variables when a request is made (hc_retry_req). */
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclRetryEnable))
        rc = cfg_string("hcclRetryEnable", k->hcclRetryEnable, sizeof(k->hcclRetryEnable),
                        out->retry_enable, sizeof(out->retry_enable));
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclRetryParams))
        rc = cfg_string("hcclRetryParams", k->hcclRetryParams, sizeof(k->hcclRetryParams),
                        out->retry_params, sizeof(out->retry_params));
    /* HCCL brought hcclQos together with hcclSymWinMaxMemSizePerRank: where a header ends after
     * hcclBufferName (HCCL's version 9, 2232 bytes), its tail padding lies where hcclQos would. */
    if (rc == HCCL_SUCCESS && CFG_HAS(size, hcclSymWinMaxMemSizePerRank))
        rc = cfg_qos(k->hcclQos, out);
    return rc;
}

HcclResult hc_comm_cfg_from(const HcclCommConfig *config, hc_comm_cfg_t *out)
{
    HcclCommConfigInfo info;
    HcclCommConfig k;

    memset(out, 0, sizeof(*out));
    out->deterministic = -1;
    if (config == NULL)
        return HCCL_E_PTR;
    memcpy(&info, config, sizeof(info));
    if (info.magicWord != HCCL_COMM_CONFIG_MAGIC_WORD) {
        ERR("INIT",
            "HcclCommConfig: magic word 0x%08x, not 0x%08x (call HcclCommConfigInit "
            "before setting fields)",
            info.magicWord, HCCL_COMM_CONFIG_MAGIC_WORD);
        return HCCL_E_PARA;
    }
    if (info.size < HCCL_COMM_CONFIG_INFO_BYTES) {
        ERR("INIT", "HcclCommConfig: size %zu is smaller than its own header", info.size);
        return HCCL_E_PARA;
    }
    if (info.version != HCCL_COMM_CONFIG_VERSION || info.size != sizeof(HcclCommConfig))
        INFO("INIT",
             "HcclCommConfig of version %u, %zu bytes (ours: %u, %zu): using the fields "
             "both know",
             info.version, info.size, HCCL_COMM_CONFIG_VERSION, sizeof(HcclCommConfig));
    /* Read no further than the caller's header says: an older one is smaller than ours. */
    memset(&k, 0, sizeof(k));
    memcpy(&k, config, info.size < sizeof(k) ? info.size : sizeof(k));
    return cfg_fields(&k, info.size, out);
}

/* HCCL_DETERMINISTIC: true/false, 1/0 (any case; "strict", HCCL's stricter mode, is true). */
static HcclResult deterministic_env(int *det)
{
    const char *s = getenv("HCCL_DETERMINISTIC");

    *det = 0;
    if (s == NULL || *s == '\0' || strcasecmp(s, "false") == 0 || strcmp(s, "0") == 0)
        return HCCL_SUCCESS;
    if (strcasecmp(s, "true") == 0 || strcmp(s, "1") == 0 || strcasecmp(s, "strict") == 0) {
        *det = 1;
        return HCCL_SUCCESS;
    }
    ERR("INIT", "HCCL_DETERMINISTIC=\"%s\" is invalid: expected true or false", s);
    return HCCL_E_PARA;
}

HcclResult hc_algo_req(const hc_comm_cfg_t *cfg, hc_algo_req_t *r)
{
    const char *algo = getenv("HCCL_ALGO"), *algorithm = getenv("HCCL_ALGORITHM");
    HcclResult rc = HCCL_SUCCESS;

    r->by_config = cfg->algo[0] != '\0';
    r->algo = r->by_config ? cfg->algo : algo != NULL ? algo : "";
    r->algorithm = algorithm != NULL ? algorithm : "";
    if (cfg->deterministic >= 0)
        r->deterministic = cfg->deterministic;
    else
        rc = deterministic_env(&r->deterministic);
    return rc;
}

HcclResult hc_retry_req(const hc_comm_cfg_t *cfg, retry_conf_t *r)
{
    char why[512];

    if (retry_conf_resolve(getenv("HCCL_OP_RETRY_ENABLE"), getenv("HCCL_OP_RETRY_PARAMS"),
                           cfg->retry_enable, cfg->retry_params, r, why, sizeof(why)) != 0) {
        ERR("INIT", "%s", why);
        return HCCL_E_PARA;
    }
    return HCCL_SUCCESS;
}

void hc_comm_name_child(const char *parent, uint64_t seq, uint32_t color, char *out)
{
    char tail[48];
    int n = snprintf(tail, sizeof(tail), "_split%llu_c%u", (unsigned long long)seq, color);
    int keep = COMM_NAME_MAX_LENGTH - 1 - n;

    snprintf(out, COMM_NAME_MAX_LENGTH, "%.*s%s", keep, parent, tail);
}

HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                      const HcclCommConfig *config, HcclComm *comm)
{
    hc_comm_cfg_t cfg;
    HcclResult rc = hc_comm_cfg_from(config, &cfg);

    return rc != HCCL_SUCCESS ? rc : hc_comm_init_root(nRanks, rootInfo, rank, &cfg, comm);
}

HcclResult HcclGetCommName(HcclComm comm, char *commName)
{
    hc_comm_t *c;
    HcclResult rc = hc_comm_check(comm, &c);

    if (rc == HCCL_SUCCESS && commName == NULL)
        rc = HCCL_E_PTR;
    if (rc == HCCL_SUCCESS)
        snprintf(commName, COMM_NAME_MAX_LENGTH, "%s", c->cfg.name);
    return rc;
}
