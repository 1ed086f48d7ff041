/*
 * HcclCommInitClusterInfo: a communicator from HCCL's rank table (common/ranktable.h). Every
 * rank reads the same file, so the job follows from its bytes: the root daemon is the server of
 * rank 0, the id a hash of the file (and of how many agreed comms this process made before),
 * the key HCCL_JOB_KEY's or, without it, another hash of the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agreed.h"
#include "log.h"
#include "ranktable.h"

#define RT_FILE_MAX (16u << 20)

/* The whole file, NUL-terminated; HCCL_E_NOT_FOUND when it cannot be read. */
static HcclResult read_file(const char *path, char **text_p, size_t *len_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    size_t got = 0;
    char *text;

    if (fd < 0) {
        ERR("INIT", "cannot open the rank table %s: %s", path, strerror(errno));
        return HCCL_E_NOT_FOUND;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)RT_FILE_MAX) {
        ERR("INIT", "the rank table %s is not a regular file of at most %u MiB", path,
            RT_FILE_MAX >> 20);
        close(fd);
        return HCCL_E_NOT_FOUND;
    }
    if ((text = malloc((size_t)st.st_size + 1)) == NULL) {
        close(fd);
        return HCCL_E_MEMORY;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ERR("INIT", "reading the rank table %s failed: %s", path,
                n < 0 ? strerror(errno) : "it shrank");
            free(text);
            close(fd);
            return HCCL_E_NOT_FOUND;
        }
        got += (size_t)n;
    }
    close(fd);
    text[got] = '\0';
    *text_p = text;
    *len_p = got;
    return HCCL_SUCCESS;
}

/* The rank's daemon must be the server the table lists it under: its ranks are that node's. */
static HcclResult check_server(const hc_client_t *c, const ranktable_t *rt, uint32_t rank,
                               const char *path)
{
    const char *mine = rt->servers[rt->rank_server[rank]];

    if (c->advertised[0] == '\0') {
        if (rt->nservers == 1)
            return HCCL_SUCCESS;
        ERR("INIT",
            "rank table %s spans %u servers but this rank's daemon does not listen for "
            "peers (hccld --listen)",
            path, rt->nservers);
        return HCCL_E_NOT_SUPPORT;
    }
    if (strcmp(mine, c->advertised) == 0)
        return HCCL_SUCCESS;
    ERR("INIT",
        "rank table %s lists rank %u under server %s, but this rank's daemon (HCCLD_SOCKET) "
        "advertises %s: run the rank there, fix server_id, or set HCCL_IF_IP on the daemon",
        path, rank, mine, c->advertised);
    return HCCL_E_PARA;
}

static const char *root_of(const hc_client_t *c, const ranktable_t *rt)
{
    return c->advertised[0] != '\0' ? rt->servers[rt->rank_server[0]] : "";
}

static HcclResult cluster_init(const char *path, const char *text, size_t len,
                               const ranktable_t *rt, uint32_t rank, const hc_comm_cfg_t *cfg,
                               HcclComm *comm)
{
    uint8_t id[HC_JOB_BYTES], key[HC_JOB_BYTES];
    hc_facts_t f;
    hc_client_t *c;
    HcclResult rc;

    if ((c = hc_client_get_mb(cfg != NULL ? cfg->buff_mb : 0, &rc)) == NULL)
        return rc;
    if ((rc = check_server(c, rt, rank, path)) == HCCL_SUCCESS) {
        hc_facts_init(&f, "ranktable");
        hc_facts_add(&f, text, len);
        rc = hc_job_derive(&f, "the rank table", id, key);
    }
    /* One server and a daemon that does not listen: the job stays on this daemon. */
    if (rc == HCCL_SUCCESS)
        rc = hc_init_agreed(c, id, key, root_of(c, rt), rt->nranks, rank, NULL, cfg, comm);
    hc_client_put(c);
    return rc;
}

static HcclResult cluster_info(const char *rankTableFile, uint32_t rank, const hc_comm_cfg_t *cfg,
                               HcclComm *comm)
{
    ranktable_t rt;
    char *text, err[256];
    size_t len;
    HcclResult rc;

    if (rankTableFile == NULL || comm == NULL)
        return HCCL_E_PTR;
    if ((rc = read_file(rankTableFile, &text, &len)) != HCCL_SUCCESS)
        return rc;
    rc = (HcclResult)ranktable_parse(text, len, &rt, err, sizeof(err));
    if (rc != HCCL_SUCCESS) {
        ERR("INIT", "rank table %s: %s", rankTableFile, err);
        free(text);
        return rc;
    }
    if (rank >= rt.nranks) {
        ERR("INIT", "rank %u is not in the rank table %s (rank ids 0..%u)", rank, rankTableFile,
            rt.nranks - 1);
        rc = HCCL_E_PARA;
    } else {
        rc = cluster_init(rankTableFile, text, len, &rt, rank, cfg, comm);
    }
    ranktable_free(&rt);
    free(text);
    return rc;
}

HcclResult HcclCommInitClusterInfo(const char *rankTableFile, uint32_t rank, HcclComm *comm)
{
    return cluster_info(rankTableFile, rank, NULL, comm);
}

HcclResult HcclCommInitClusterInfoConfig(const char *rankTableFile, uint32_t rank,
                                         const HcclCommConfig *config, HcclComm *comm)
{
    hc_comm_cfg_t cfg;
    HcclResult rc = hc_comm_cfg_from(config, &cfg);

    return rc != HCCL_SUCCESS ? rc : cluster_info(rankTableFile, rank, &cfg, comm);
}
