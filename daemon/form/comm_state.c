/* The table of form/comm_state.h. */
#include "form/comm_state.h"

#define X COMM_STATE_COUNT /* not possible */

/* next[state][event], events in the order of enum comm_event. */
static const comm_state_t next[COMM_STATE_COUNT][COMM_EV_COUNT] = {
    /*                JOINED        FORMED       FAILED       LINK_LOST       LINK_BACK
                      RESUMED       GAVE_UP      BROKEN       LEFT            ALL_LEFT */
    [COMM_JOINING] = {COMM_FORMING, X, COMM_CLOSED, X, X, X, X, X, COMM_JOINING, COMM_CLOSED},
    [COMM_FORMING] = {X, COMM_ACTIVE, COMM_CLOSED, X, X, X, X, COMM_BROKEN, X, COMM_CLOSED},
    [COMM_ACTIVE] = {X, X, X, COMM_SUSPENDED, X, X, X, COMM_BROKEN, COMM_ACTIVE, COMM_CLOSED},
    [COMM_SUSPENDED] = {X, X, X, COMM_SUSPENDED, COMM_RESUMING, X, COMM_BROKEN, COMM_BROKEN,
                        COMM_SUSPENDED, COMM_CLOSED},
    [COMM_RESUMING] = {X, X, X, COMM_SUSPENDED, X, COMM_ACTIVE, COMM_BROKEN, COMM_BROKEN,
                       COMM_RESUMING, COMM_CLOSED},
    [COMM_BROKEN] = {X, X, X, COMM_BROKEN, COMM_BROKEN, X, COMM_BROKEN, COMM_BROKEN, COMM_BROKEN,
                     COMM_CLOSED},
    [COMM_CLOSED] = {X, X, X, X, X, X, X, X, X, X},
};

comm_state_t comm_next(comm_state_t s, comm_event_t e)
{
    if ((unsigned)s >= COMM_STATE_COUNT || (unsigned)e >= COMM_EV_COUNT)
        return X;
    return next[s][e];
}

const char *comm_state_name(comm_state_t s)
{
    static const char *const names[COMM_STATE_COUNT] = {
        "joining", "forming", "active", "suspended", "resuming", "broken", "closed"};

    return (unsigned)s < COMM_STATE_COUNT ? names[s] : "?";
}

const char *comm_event_name(comm_event_t e)
{
    static const char *const names[COMM_EV_COUNT] = {"joined",    "formed",  "failed",  "link_lost",
                                                     "link_back", "resumed", "gave_up", "broken",
                                                     "left",      "all_left"};

    return (unsigned)e < COMM_EV_COUNT ? names[e] : "?";
}
