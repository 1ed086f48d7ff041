/*
 * Resumable connections (tp_retry_t), for every transport that has them: messages in flight
 * both ways, of several sizes, some received before their receive is posted, while the link
 * fails under them by the runner's own fault (TCP: its sockets reset; RDMA: a QP in error, a
 * link down). With retry every message arrives once and intact and both sides count their
 * resumes; without retry, or past the hold time, the requests fail as they did before.
 */
#ifndef HCCLD_TESTS_TRANSPORT_RESUME_H
#define HCCLD_TESTS_TRANSPORT_RESUME_H

#include <stddef.h>
#include <stdint.h>

#include "pair.h"

/* The runner's fault: makes the pair's link fail (each side sees it now or on its next step). */
typedef void (*resume_cut_fn)(pair_t *p);

/* Both sides resumable with this hold time. */
void resume_set_retry(pair_t *p, uint64_t hold_ms);
/* Whether c is suspended now. */
int resume_suspended(tp_conn_t *c);
/* The times c came back (asserting it is not suspended now). */
uint32_t resume_count(tp_conn_t *c);
/* Tests every request, keeps a receive of an unused tag pending on each side, and takes what
 * the listener accepts (a resumed connection's new link, whose husk must end with -EALREADY),
 * until all are done or ms passed: 0 or -ETIMEDOUT. */
int resume_drive(pair_t *p, tp_req_t **r, int n, int *status, long long ms);
/* Cancels the pending receives and closes the husks left. */
void resume_end(void);

/* The cases (pair ready, fx set). */
/* Two faults while NMSG messages cross each way: all arrive, once, intact; 2 resumes each. */
void resume_twice(pair_t *p, resume_cut_fn cut);
/* A fault in the middle of a send of big bytes: it goes again from its start. */
void resume_mid_send(pair_t *p, resume_cut_fn cut, size_t big);
/* Without retry the fault fails some request, with the link's error. */
void resume_without_retry(pair_t *p, resume_cut_fn cut);
/* With no listener to come back to, the requests fail once the hold time (300 ms) is over,
 * with the error that suspended the connection, and not before. */
void resume_hold_ends(pair_t *p, resume_cut_fn cut);
/* A side that closes on purpose says BYE first: the other takes the end for an end (its
 * receive fails with -ECONNRESET, nothing suspends). */
void resume_close_says_bye(pair_t *p);
/* A dial that claims to take the place of a connection the listener never had (mark makes a
 * new connection say so, before its handshake) is refused with -ENOENT. */
void resume_unknown_refused(pair_t *p, void (*mark)(tp_conn_t *c));

#endif
