/*
 * The daemon's status (hccld-ctl status, comms, metrics; /metrics): a StatusResp and the
 * arrays it points into, built from the server and the engine on the loop thread.
 */
#ifndef HCCLD_SERVER_STATUS_H
#define HCCLD_SERVER_STATUS_H

#include "form/form.h"
#include "hccld.pb-c.h"
#include "sched/engine.h"

typedef struct server server_t;

#define STATUS_WAIT_TEXT 512 /* a comm's waiting_on */

#define STATUS_REJOINS_MAX 64 /* shown at most */

typedef struct status {
    Hccld__StatusResp r;
    Hccld__ClientStatus *cs, **csp;
    Hccld__CommStatus *cm, **cmp;
    uint64_t *posted;
    uint32_t *ranks;
    char **links;
    char (*link_txt)[ENGINE_LINK_MAX];
    Hccld__LinkFigures *lf;
    char (*waiting)[STATUS_WAIT_TEXT];
    uint64_t lat_bucket[ENGINE_LAT_BUCKETS];
    /* Comms registered again after a restart, still waiting for ranks */
    form_rejoin_view_t rv[STATUS_REJOINS_MAX];
    Hccld__CommRejoining rj[STATUS_REJOINS_MAX], *rjp[STATUS_REJOINS_MAX];
} status_t;

typedef struct form_comm form_comm_t;

/* A comm's figures: the engine's, with what its ranks did among themselves (cooperative). */
void status_comm_stats(server_t *srv, const form_comm_t *c, engine_comm_stats_t *st);
/* The daemon of node `node` of comm c: its advertised address (what hccld-ctl status and the
 * peer events show); "(address unknown)" if the comm was formed without them. */
const char *status_daemon_named(const form_comm_t *c, uint32_t node);
/* While c's collective is on the wire and waits on other daemons (st->nwaiting > 0): "round R of
 * N across daemons waits on the daemon of rank 1 at ADDR, which has not started it" into text
 * (cap bytes; "" otherwise); unless ranks is NULL, the ranks it names into ranks (at most
 * WAIT_INFO_MAX x WAIT_INFO_RANKS) and how many into *n_p. */
void status_waiting_on(const form_comm_t *c, const engine_comm_stats_t *st, char *text, size_t cap,
                       uint32_t *ranks, uint32_t *n_p);
/* 0, or -1 (out of memory). status_free releases what it built. */
int status_build(server_t *srv, status_t *x);
void status_free(status_t *x);

#endif
