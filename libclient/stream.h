/* Streams: a queue of calls run in issue order by the stream's own thread. */
#ifndef HCCLD_LIBCLIENT_STREAM_H
#define HCCLD_LIBCLIENT_STREAM_H

#include "client.h"

typedef struct hc_call {
    hc_comm_t *comm;
    hc_op_t op;
    int alltoallv;
    uint64_t *counts; /* alltoallv: scounts, sdispls, rcounts, rdispls (4 x nranks), owned */
    hc_op_t *ops;     /* a batch of sends and receives run together (nops > 0), owned */
    unsigned nops;
    struct hc_call *next;
} hc_call_t;

/* Runs call now (stream NULL) or queues a copy of it on stream. Takes ownership of
 * call->counts and call->ops either way. */
HcclResult hc_dispatch(hc_call_t *call, HcclStream stream);

#endif
