/*
 * The connection manager: how the data connections between daemons come to be. It owns the
 * listeners (TCP, and RDMA where a device carries the address), accepts, runs the accepting
 * side's part of the handshake against the jobs it knows, gathers the stripes of a striped
 * connection (tp_stripe.h) and, on the connecting side, chooses the transport of each pair of
 * nodes from one table (RDMA where both ends have a device and HCCL_TRANSPORT allows it, else
 * TCP; as NCCL's ncclTransports[]), opening the stripes the settings ask for.
 *
 * A job is known once a comm of it exists here (tp_cm_job_claim) or is about to
 * (tp_cm_job_expect: held a minute). Connections whose handshake finished for a claimed job
 * are handed out by tp_cm_take(); those for an expected job wait until it is claimed or the
 * minute passes; the rest are closed. Nothing blocks: the engine thread calls tp_cm_progress()
 * every pass and sleeps in poll() on tp_cm_poll_fds(). Not thread-safe: callers serialize.
 */
#ifndef HCCLD_TRANSPORT_TP_CM_H
#define HCCLD_TRANSPORT_TP_CM_H

#include <poll.h>
#include <stdint.h>

#include "transport/transport.h"

typedef struct tp_cm tp_cm_t;

/* HCCL_TRANSPORT: auto (RDMA wherever both nodes have a device), tcp or rdma. */
enum tp_cm_mode { TP_CM_AUTO = 0, TP_CM_TCP = 1, TP_CM_RDMA = 2 };

/* A node's data addresses: TCP, and RDMA ("" if it has no device). */
typedef struct tp_cm_addrs {
    char tcp[TP_ADDR_MAX];
    char rdma[TP_ADDR_MAX];
} tp_cm_addrs_t;

/* NULL without memory. Mode auto until set. */
tp_cm_t *tp_cm_new(void);
/* Closes the listeners and every connection not handed out yet; forgets the jobs. */
void tp_cm_free(tp_cm_t *cm);

/* value: HCCL_TRANSPORT's (NULL or "": auto; "tcp"; "rdma" or "roce"; any case). 0, or
 * -EINVAL (logged) for anything else, which leaves the mode as it was. */
int tp_cm_set_mode(tp_cm_t *cm, const char *value);
int tp_cm_mode(const tp_cm_t *cm);

/* Once per manager: starts accepting on ip (port chosen): over TCP, whose address goes to out->tcp,
 * and over RDMA when a device carries ip and the mode is not tcp (out->rdma, else ""; mode rdma
 * without a device: -ENODEV). 0 or a negative errno, logged. */
int tp_cm_listen(tp_cm_t *cm, const char *ip, tp_cm_addrs_t *out);
/* After tp_cm_listen: accepts over TCP on addr ("ip:port") too, the data address this daemon
 * had before a restart, which the other daemons of its comms still dial (at most
 * TP_CM_ALSO_MAX of them; one already listened on is 0). 0 or a negative errno, logged. */
#define TP_CM_ALSO_MAX 4
int tp_cm_listen_also(tp_cm_t *cm, const char *addr);

/* Peers may connect for this job before its comm exists here: their connections are
 * authenticated with key and held until it is claimed (or a minute passed). 0 or -ENOMEM. */
int tp_cm_job_expect(tp_cm_t *cm, const uint8_t job_id[AUTH_JOB_BYTES],
                     const uint8_t key[AUTH_KEY_BYTES]);
/* A comm of this job exists here (counted: one release per claim): its connections are handed
 * out by tp_cm_take(). 0 or -ENOMEM. */
int tp_cm_job_claim(tp_cm_t *cm, const uint8_t job_id[AUTH_JOB_BYTES],
                    const uint8_t key[AUTH_KEY_BYTES]);
/* One claim less. The last forgets the job at once, even one expected before it was claimed:
 * a connection for it that finishes its handshake later is closed (unless the job is claimed
 * or expected again). Nothing for a job with no claim. */
void tp_cm_job_release(tp_cm_t *cm, const uint8_t job_id[AUTH_JOB_BYTES]);

/* Accepts (when poll() said a listener is readable, else at most every 20 ms), advances the
 * handshakes, gathers stripes, closes what failed or belongs to no known job. Returns how many
 * connections became ready. */
int tp_cm_progress(tp_cm_t *cm);
/* The next connection whose handshake finished for a claimed job, with the job and the node
 * index its peer announced (a striped one: the node, its stripes gathered); the caller owns it.
 * NULL when there is none. */
tp_conn_t *tp_cm_take(tp_cm_t *cm, uint8_t job_id_out[AUTH_JOB_BYTES], uint32_t *node_out);
/* Whether connections are being accepted (their handshakes want the engine to poll often). */
int tp_cm_accepting(const tp_cm_t *cm);
/* The fds to sleep on: the listeners first, then the connections being accepted. */
int tp_cm_poll_fds(const tp_cm_t *cm, struct pollfd *pfd, int max);
/* After poll() on what tp_cm_poll_fds() put at pfd (n of them): a listener that is readable
 * makes the next tp_cm_progress() accept. */
void tp_cm_polled(tp_cm_t *cm, const struct pollfd *pfd, int n);

/* The transport the pair (me, peer) uses: the first of the table whose "can this pair
 * connect" says yes (RDMA: both have an RDMA address and the mode is not tcp; TCP: the mode is
 * not rdma). NULL when none can (mode rdma and one end has no device). Both ends decide alike:
 * each knows every node's addresses. */
const transport_ops_t *tp_cm_choose(const tp_cm_t *cm, const tp_cm_addrs_t *me,
                                    const tp_cm_addrs_t *peer);
/* Opens the data connection from node my_node (me) to node peer_node (peer, a lower index) of a
 * comm of nnodes for job/key, over tp_cm_choose()'s transport: striped over
 * HCCL_RDMA_QPS_PER_CONNECTION QPs or HCCLD_TCP_NSOCKS sockets where those ask for more than
 * one (and nnodes <= TP_STRIPE_NODE_MAX). RDMA connects from me's own RDMA address. Its
 * handshake then advances in tp_conn_state(). 0, -ENODEV (no transport for the pair),
 * -ECONNREFUSED or -ENOMEM (wrapping the stripes). */
int tp_cm_connect(tp_cm_t *cm, const tp_cm_addrs_t *me, uint32_t my_node, const tp_cm_addrs_t *peer,
                  uint32_t peer_node, uint32_t nnodes, const uint8_t job_id[AUTH_JOB_BYTES],
                  const uint8_t key[AUTH_KEY_BYTES], tp_conn_t **c_p);

#endif
