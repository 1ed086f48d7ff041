/*
 * An RDMA connection's health: its bytes, its queue pair's state (ibv_query_qp), and its port's
 * error and retry counters, which the kernel keeps port-wide in sysfs (what `rdma statistic`
 * and perfquery read; verbs has no call for them). Which retry counters a device has depends on
 * its driver: those it lacks count nothing.
 */
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>

#include "transport/rdma_conn.h"

static const char *const port_errors[] = {"symbol_error", "port_rcv_errors", "port_xmit_discards",
                                          "link_downed"};
static const char *const port_retries[] = {"local_ack_timeout_err", "packet_seq_err",
                                           "out_of_sequence", "rcvd_seq_err"};

static uint64_t counter(const char *dev, unsigned port, const char *dir, const char *name)
{
    char path[256];
    uint64_t v = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/%s/%s", dev, port, dir, name);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    if (fscanf(f, "%" SCNu64, &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

void rdma_link_info(tp_conn_t *base, tp_link_info_t *li)
{
    rdma_conn_t *c = rdma_conn_of(base);
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;

    tp_retry_stats_t rs;

    li->nlinks++;
    if (c->state == RDMA_ST_FAILED)
        li->failed = 1;
    rdma_resume_stats(c, &rs);
    li->suspended += rs.suspended != 0;
    li->resumes += rs.resumes;
    li->suspended_ns += rs.suspended_ns;
    li->tx_bytes += c->tx_bytes;
    li->rx_bytes += c->rx_bytes;
    /* A suspended connection has no QP, or a new one not ready yet: it says so itself. */
    if (!rs.suspended && (c->qp == NULL || ibv_query_qp(c->qp, &attr, IBV_QP_STATE, &init) != 0 ||
                          attr.qp_state != IBV_QPS_RTS))
        li->qp_state_bad = 1;
    if (c->id == NULL || c->id->verbs == NULL)
        return;
    const char *dev = ibv_get_device_name(c->id->verbs->device);
    for (size_t i = 0; i < sizeof(port_errors) / sizeof(port_errors[0]); i++)
        li->port_errors += counter(dev, c->id->port_num, "counters", port_errors[i]);
    for (size_t i = 0; i < sizeof(port_retries) / sizeof(port_retries[0]); i++)
        li->port_retries += counter(dev, c->id->port_num, "hw_counters", port_retries[i]);
}
