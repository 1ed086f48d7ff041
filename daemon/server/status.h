/*
 * The daemon's status (hccld-ctl status, comms, metrics; /metrics): a StatusResp and the
 * arrays it points into, built from the server and the engine on the loop thread.
 */
#ifndef HCCLD_SERVER_STATUS_H
#define HCCLD_SERVER_STATUS_H

#include "hccld.pb-c.h"
#include "sched/engine.h"

typedef struct server server_t;

typedef struct status {
    Hccld__StatusResp r;
    Hccld__ClientStatus *cs, **csp;
    Hccld__CommStatus *cm, **cmp;
    uint64_t *posted;
    uint32_t *ranks;
    char **links;
    char (*link_txt)[ENGINE_LINK_MAX];
    Hccld__LinkFigures *lf;
    uint64_t lat_bucket[ENGINE_LAT_BUCKETS];
} status_t;

typedef struct scomm scomm_t;

/* A comm's figures: the engine's, with what its ranks did among themselves (cooperative). */
void status_comm_stats(server_t *srv, const scomm_t *c, engine_comm_stats_t *st);
/* 0, or -1 (out of memory). status_free releases what it built. */
int status_build(server_t *srv, status_t *x);
void status_free(status_t *x);

#endif
