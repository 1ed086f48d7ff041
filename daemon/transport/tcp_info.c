/* A TCP connection's health from the kernel's own count (TCP_INFO): nothing on the data path. */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "transport/tcp_conn.h"

void tcp_link_info(tp_conn_t *base, tp_link_info_t *li)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    tp_retry_stats_t rs;

    memset(&ti, 0, sizeof(ti));
    li->nlinks++;
    if (tcp_conn_of(base)->state == TCP_CONN_FAILED)
        li->failed = 1;
    tcp_resume_stats(tcp_conn_of(base), &rs);
    li->suspended += rs.suspended != 0;
    li->resumes += rs.resumes;
    li->suspended_ns += rs.suspended_ns;
    if (getsockopt(tcp_conn_of(base)->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return; /* a socket already gone: its figures are lost, not made up */
    /* Bytes sent, each once: what a closed connection's last sample must count. Acknowledged
     * bytes lag: a connection closed right after its last message left it unacknowledged, and
     * the peer's count of received bytes was ahead for good (kernels before 4.19: acked). */
    if (len >= offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof(ti.tcpi_bytes_retrans))
        li->tx_bytes += ti.tcpi_bytes_sent - ti.tcpi_bytes_retrans;
    else
        li->tx_bytes += ti.tcpi_bytes_acked;
    li->rx_bytes += ti.tcpi_bytes_received;
    li->segs_out += ti.tcpi_segs_out;
    li->retrans += ti.tcpi_total_retrans;
    li->spurious += ti.tcpi_dsack_dups;
    if (ti.tcpi_rtt > li->rtt_us)
        li->rtt_us = ti.tcpi_rtt;
    if (ti.tcpi_rttvar > li->rttvar_us)
        li->rttvar_us = ti.tcpi_rttvar;
}
