/*
 * Real faults for the fault suites, no mocks: daemons of the test's own on loopback (private
 * sockets, --listen 127.0.0.1:0) that can be killed (SIGKILL, SIGTERM) and started again on the
 * same socket and port, and resets of the TCP connections between them (`ss -K`).
 */
#ifndef HCCLD_TESTS_FAULT_INJECT_H
#define HCCLD_TESTS_FAULT_INJECT_H

#include <sys/types.h>

#define FI_MAXD 4

typedef struct fi_daemons {
    unsigned n;
    pid_t pids[FI_MAXD]; /* 0: not running */
    char dirs[FI_MAXD][32];
    char socks[FI_MAXD][256];
    char listen[FI_MAXD][64]; /* "127.0.0.1:PORT" it advertises; a restart listens there again */
} fi_daemons_t;

/* n fresh daemons, each in a temp dir of its own, SIGKILLed if this process dies; HCCLD_SOCKET
 * names daemon 0 (root infos come from it). 0, or -1 (nothing left running). */
int fi_start(fi_daemons_t *d, unsigned n);
/* Starts daemon k again on its socket and port: 0, or -1. */
int fi_restart(fi_daemons_t *d, unsigned k);
/* Sends daemon k sig and waits for it to end, SIGKILL after timeout_s (then -1); returns 0. */
int fi_signal(fi_daemons_t *d, unsigned k, int sig, unsigned timeout_s);
/* Stops every daemon still running (SIGTERM, bounded), removes their dirs, points HCCLD_SOCKET
 * back at the harness's daemon. How many had died or did not stop cleanly. */
int fi_stop(fi_daemons_t *d);
/* Whether daemon k answers a status request on its admin socket (as `hccld-ctl status`). */
int fi_answers(const fi_daemons_t *d, unsigned k);
/* Waits up to timeout_s until every daemon lists a data connection, then resets (`ss -K`, both
 * ends) every TCP connection on the daemons' control and data ports; *at: when (fl_now()).
 * Returns how many sockets were reset, or -1. */
int fi_reset_links(const fi_daemons_t *d, double timeout_s, double *at);

/* Resets every TCP connection on 127.0.0.1 that one of the processes pids[n] holds (the ranks'
 * lanes): how many sockets it found, or -1. */
int fi_reset_ranks(const pid_t *pids, unsigned n);
/* Data connections daemon k's link monitor found failed so far (its status' peer_links, lost),
 * or -1 (no answer). */
int fi_links_lost(const fi_daemons_t *d, unsigned k);
/* Times daemon k's data connections came back under op retry, as its link monitor last
 * counted them (hccld_peer_link_resumes_total), or -1 if it does not answer. */
int fi_links_resumed(const fi_daemons_t *d, unsigned k);

#endif
