/*
 * A communicator's life on this daemon, one state machine: its ranks join (a job or a split),
 * the comm forms, runs, and ends when its last local rank leaves. SUSPENDED and RESUMING are
 * where a comm spanning daemons waits out a failed link between them instead of breaking (op
 * retry, docs/errors.md). comm_next() is the whole table: every transition not in it is a bug
 * of the caller, which keeps its state and logs it.
 */
#ifndef HCCLD_FORM_COMM_STATE_H
#define HCCLD_FORM_COMM_STATE_H

typedef enum comm_state {
    COMM_JOINING,   /* ranks are joining: the comm has no record yet */
    COMM_FORMING,   /* every rank joined: the engine half is being made */
    COMM_ACTIVE,    /* formed and answered: ops run */
    COMM_SUSPENDED, /* a link between daemons failed: ops wait for it */
    COMM_RESUMING,  /* the link is back: the daemons agree how far each op got */
    COMM_BROKEN,    /* a member here died, its segments could not be passed, or retry gave up */
    COMM_CLOSED,    /* formation failed, or every local rank left: the record goes */
    COMM_STATE_COUNT
} comm_state_t;

typedef enum comm_event {
    COMM_EV_JOINED,    /* every rank joined */
    COMM_EV_FORMED,    /* the engine half is made and the ranks answered */
    COMM_EV_FAILED,    /* formation failed (a refusal, a timeout, out of memory) */
    COMM_EV_LINK_LOST, /* a data connection between daemons failed */
    COMM_EV_LINK_BACK, /* every failed connection is made again */
    COMM_EV_RESUMED,   /* the daemons agreed and the interrupted ops run again */
    COMM_EV_GAVE_UP,   /* retries exhausted or the hold time passed */
    COMM_EV_BROKEN,    /* a member here died, or the engine broke it */
    COMM_EV_LEFT,      /* a local rank left (HcclCommDestroy); others remain */
    COMM_EV_ALL_LEFT,  /* the last local rank left */
    COMM_EV_COUNT
} comm_event_t;

/* The state after event e in state s, or COMM_STATE_COUNT when e cannot happen in s. */
comm_state_t comm_next(comm_state_t s, comm_event_t e);
/* "active", "suspended", ...; "?" out of range. */
const char *comm_state_name(comm_state_t s);
const char *comm_event_name(comm_event_t e);

#endif
