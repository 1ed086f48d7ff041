/*
 * HcclCommInitFromEnv without HCCL_ROOT_INFO: a rank table (RANK_TABLE_FILE) or a launcher's
 * environment. Launchers are tried in this order, because one may run under another:
 * torchrun (RANK, WORLD_SIZE; also under Slurm), Open MPI (OMPI_COMM_WORLD_*; mpirun inside a
 * Slurm allocation leaves SLURM_PROCID meaning something else), Slurm (SLURM_PROCID,
 * SLURM_NTASKS). Every rank derives the same agreed job from what the launcher tells them all:
 * its kind, its job id, the root daemon's address as configured and the world size.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreed.h"
#include "env.h"
#include "log.h"
#include "nodelist.h"

typedef struct launch {
    const char *kind; /* "torchrun", "openmpi", "slurm" */
    uint64_t rank, size;
    const char *local; /* the launcher's local rank, for the log */
    char job[512];     /* the launcher's job id */
    char root_host[NODELIST_HOST_MAX];
} launch_t;

static const char *env_or(const char *name, const char *def)
{
    const char *s = getenv(name);

    return s != NULL ? s : def;
}

/* 1 if both are set and valid, 0 if neither is set, -1 (logged) otherwise. */
static int rank_size(launch_t *l, const char *rname, const char *sname)
{
    const char *r = getenv(rname), *s = getenv(sname);

    if (r == NULL && s == NULL)
        return 0;
    if (parse_u64(r, &l->rank) != 0 || parse_u64(s, &l->size) != 0 || l->size == 0 ||
        l->size > UINT32_MAX || l->rank >= l->size) {
        ERR("INIT", "%s=%s and %s=%s do not give a rank below a world size", rname,
            r ? r : "(unset)", sname, s ? s : "(unset)");
        return -1;
    }
    return 1;
}

/* torchrun: MASTER_PORT and the restart count tell concurrent and restarted jobs apart. */
static int detect_torchrun(launch_t *l)
{
    int rc = rank_size(l, "RANK", "WORLD_SIZE");

    if (rc <= 0)
        return rc;
    l->kind = "torchrun";
    l->local = getenv("LOCAL_RANK");
    snprintf(l->job, sizeof(l->job), "%s/%s/%s", env_or("TORCHELASTIC_RUN_ID", ""),
             env_or("MASTER_PORT", ""), env_or("TORCHELASTIC_RESTART_COUNT", ""));
    snprintf(l->root_host, sizeof(l->root_host), "%s", env_or("MASTER_ADDR", ""));
    return 1;
}

/* Open MPI names no root host: HCCL_ROOT_ADDR must. */
static int detect_openmpi(launch_t *l)
{
    int rc = rank_size(l, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    const char *job = getenv("OMPI_MCA_ess_base_jobid");

    if (rc <= 0)
        return rc;
    l->kind = "openmpi";
    l->local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (job == NULL)
        job = getenv("PMIX_NAMESPACE");
    if (job == NULL)
        WARN("INIT", "Open MPI: neither OMPI_MCA_ess_base_jobid nor PMIX_NAMESPACE is set; two "
                     "jobs with the same root address and size would be taken for one");
    snprintf(l->job, sizeof(l->job), "%s", job != NULL ? job : "");
    return 1;
}

/* Slurm: the root is the first node of the step (block distribution puts rank 0 there). */
static int detect_slurm(launch_t *l)
{
    int rc = rank_size(l, "SLURM_PROCID", "SLURM_NTASKS");
    const char *nodes = getenv("SLURM_STEP_NODELIST");

    if (rc <= 0)
        return rc;
    l->kind = "slurm";
    l->local = getenv("SLURM_LOCALID");
    snprintf(l->job, sizeof(l->job), "%s.%s", env_or("SLURM_JOB_ID", ""),
             env_or("SLURM_STEP_ID", ""));
    if (nodes == NULL)
        nodes = getenv("SLURM_JOB_NODELIST");
    if (nodes != NULL && nodelist_first(nodes, l->root_host, sizeof(l->root_host)) != 0) {
        ERR("INIT", "Slurm: cannot read the node list \"%s\"", nodes);
        return -1;
    }
    return 1;
}

/* Where rank 0's daemon is, as configured: HCCL_ROOT_ADDR, else the launcher's root host with
 * HCCL_ROOT_PORT (default 60000, HCCL's base port; never torch's MASTER_PORT). */
static HcclResult root_spec(const launch_t *l, char *host, size_t cap, unsigned *port_p)
{
    const char *ra = getenv("HCCL_ROOT_ADDR"), *colon;
    uint64_t port;

    if (env_u64("HCCL_ROOT_PORT", 60000, 1, 65535, &port) != 0)
        return HCCL_E_PARA;
    if (ra != NULL && *ra != '\0') {
        colon = strchr(ra, ':');
        size_t hl = colon != NULL ? (size_t)(colon - ra) : strlen(ra);
        if (hl == 0 || hl >= cap || (colon != NULL && strchr(colon + 1, ':') != NULL) ||
            (colon != NULL && (parse_u64(colon + 1, &port) != 0 || port == 0 || port > 65535))) {
            ERR("INIT", "HCCL_ROOT_ADDR=%s is not HOST or HOST:PORT", ra);
            return HCCL_E_PARA;
        }
        memcpy(host, ra, hl);
        host[hl] = '\0';
    } else if (l->root_host[0] != '\0') {
        snprintf(host, cap, "%s", l->root_host);
    } else {
        ERR("INIT", "%s: no root daemon address: %s", l->kind,
            strcmp(l->kind, "openmpi") == 0
                ? "Open MPI does not say where rank 0 runs; set HCCL_ROOT_ADDR to the IP (or "
                  "IP:PORT) of rank 0's node, the same for every rank"
            : strcmp(l->kind, "torchrun") == 0
                ? "set MASTER_ADDR or HCCL_ROOT_ADDR"
                : "no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST; set HCCL_ROOT_ADDR");
        return HCCL_E_PARA;
    }
    *port_p = (unsigned)port;
    return HCCL_SUCCESS;
}

/* "IP:PORT" of host, preferring an address that is not loopback (a host's own name often maps
 * to 127.0.1.1 there; the root daemon also knows itself by its interfaces). */
static HcclResult resolve(const char *host, unsigned port, char *out, size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res, *a;
    struct in_addr pick = {0};
    char ip[INET_ADDRSTRLEN];
    int rc = getaddrinfo(host, NULL, &hints, &res);

    if (rc != 0) {
        ERR("INIT", "cannot resolve the root host %s: %s", host, gai_strerror(rc));
        return HCCL_E_PARA;
    }
    pick = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    for (a = res; a != NULL; a = a->ai_next) {
        struct in_addr in = ((struct sockaddr_in *)a->ai_addr)->sin_addr;
        if ((ntohl(in.s_addr) >> 24) != 127) {
            pick = in;
            break;
        }
    }
    freeaddrinfo(res);
    inet_ntop(AF_INET, &pick, ip, sizeof(ip));
    snprintf(out, cap, "%s:%u", ip, port);
    return HCCL_SUCCESS;
}

static HcclResult launcher_join(const launch_t *l, HcclComm *comm)
{
    uint8_t id[HC_JOB_BYTES], key[HC_JOB_BYTES];
    char host[NODELIST_HOST_MAX], root[64], spec[NODELIST_HOST_MAX + 8];
    unsigned port;
    hc_facts_t f;
    hc_client_t *c;
    HcclResult rc;

    if ((rc = root_spec(l, host, sizeof(host), &port)) != HCCL_SUCCESS ||
        (rc = resolve(host, port, root, sizeof(root))) != HCCL_SUCCESS)
        return rc;
    if ((c = hc_client_get(&rc)) == NULL)
        return rc;
    if (getenv("HCCL_RANK") == NULL)
        log_set_who("hccl rank %llu", (unsigned long long)l->rank);
    /* A daemon that does not listen can only hold the whole job itself. */
    if (c->advertised[0] == '\0')
        root[0] = '\0';
    INFO("INIT", "%s: rank %llu of %llu (local rank %s), job \"%s\", root daemon %s:%u (%s)",
         l->kind, (unsigned long long)l->rank, (unsigned long long)l->size,
         l->local ? l->local : "?", l->job, host, port, root[0] ? root : "this one");
    /* The root as configured, not as resolved: every rank must hash the same text. */
    snprintf(spec, sizeof(spec), "%s:%u", host, port);
    hc_facts_init(&f, l->kind);
    hc_facts_str(&f, l->job);
    hc_facts_str(&f, spec);
    hc_facts_u64(&f, l->size);
    rc = hc_job_derive(&f, "the launcher's job id, root address and world size", id, key);
    if (rc == HCCL_SUCCESS)
        rc = hc_init_agreed(c, id, key, root, (uint32_t)l->size, (uint32_t)l->rank, NULL, NULL,
                            comm);
    hc_client_put(c);
    return rc;
}

/* RANK_TABLE_FILE: the rank is RANK_ID (HCCL's name), else the launcher's. */
static HcclResult ranktable_join(const char *path, const launch_t *l, int have, HcclComm *comm)
{
    const char *rid = getenv("RANK_ID");
    uint64_t rank = l->rank;

    if (rid != NULL ? parse_u64(rid, &rank) != 0 || rank > UINT32_MAX : !have) {
        ERR("INIT",
            "RANK_TABLE_FILE needs RANK_ID (%s) or a launcher's rank (RANK, "
            "OMPI_COMM_WORLD_RANK, SLURM_PROCID)",
            rid != NULL ? "malformed" : "unset");
        return HCCL_E_PARA;
    }
    return HcclCommInitClusterInfo(path, (uint32_t)rank, comm);
}

HcclResult hc_launcher_init(HcclComm *comm)
{
    const char *table = getenv("RANK_TABLE_FILE");
    launch_t l = {0};
    int have;

    if (table != NULL && *table != '\0' && getenv("RANK_ID") != NULL)
        return ranktable_join(table, &l, 0, comm);
    if ((have = detect_torchrun(&l)) == 0)
        have = detect_openmpi(&l);
    if (have == 0)
        have = detect_slurm(&l);
    if (have < 0)
        return HCCL_E_PARA;
    if (table != NULL && *table != '\0')
        return ranktable_join(table, &l, have, comm);
    if (have == 0) {
        ERR("INIT", "HcclCommInitFromEnv: no job in the environment; set HCCL_ROOT_INFO, "
                    "HCCL_RANK and HCCL_WORLD_SIZE (hccl-run), or RANK_TABLE_FILE and RANK_ID, "
                    "or run under torchrun, Open MPI or Slurm");
        return HCCL_E_PARA;
    }
    return launcher_join(&l, comm);
}
