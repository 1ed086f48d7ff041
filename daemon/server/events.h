/*
 * The live event stream (hccld-ctl watch): an admin connection that sent WatchReq stays open and
 * gets an Event as each happens: clients connecting and leaving, comms formed and broken, ranks
 * dying, peer daemons lost and back, link warnings, ops waiting longer than the watcher's
 * threshold with the ranks that have not posted them, QoS changes and reloads. What the daemon
 * learns from its own hooks goes out at once; broken comms and stalls are found by a poll every
 * EVENTS_POLL_MS while someone watches (nothing runs otherwise). A watcher that does not read
 * is dropped once EVENTS_QUEUE_MAX bytes wait for it: it never holds the daemon's memory.
 */
#ifndef HCCLD_SERVER_EVENTS_H
#define HCCLD_SERVER_EVENTS_H

#include <stdint.h>

#include "hccld.pb-c.h"

typedef struct server server_t;
typedef struct session session_t;
typedef struct form_comm form_comm_t;

#define EVENTS_POLL_MS 200
#define EVENTS_QUEUE_MAX (1u << 20)
#define EVENTS_STALL_MS_DEFAULT 10000

/* Admin session s wants the stream. */
void events_watch(server_t *srv, session_t *s, const Hccld__WatchReq *req);
/* s is closing: it no longer watches (it may never have). */
void events_session_gone(server_t *srv, session_t *s);
void events_stop(server_t *srv);

/* Sends e (kind and text set, time filled here) to every watcher. */
void events_emit(server_t *srv, Hccld__Event *e);
/* An event of kind with text (printf-style) and nothing else. */
void events_say(server_t *srv, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The hooks. */
enum { EVENTS_CLIENT_LEFT, EVENTS_CLIENT_CONNECTED, EVENTS_CLIENT_BACK };
/* A client connected, came back after a restart of the daemon (its segment kept), or left. */
void events_client(server_t *srv, const session_t *s, int what);
void events_comm_formed(server_t *srv, const form_comm_t *c);
void events_rank_died(server_t *srv, const form_comm_t *c, uint32_t rank, int pid);
/* c broke (told once per comm; the poll finds the breaks the engine makes). */
void events_comm_broken(server_t *srv, const form_comm_t *c, const char *why, int result);
/* A peer daemon (its address) was lost, or is reachable again: peer_back only follows a loss. */
void events_peer(server_t *srv, const char *peer, int lost, const char *why);
/* The link monitor warned about a data connection to peer (what: its finding). */
void events_link_warning(server_t *srv, const char *peer, const char *text, const char *what);

#endif
