/*
 * Lanes: small collectives of a comm that spans daemons run between its ranks directly, off the
 * daemons' critical path (libclient/lane.c). The daemons still own the links: each makes a
 * rank's listening socket and the sockets it connects with, on the data interface and in the
 * daemon's network namespace, hands them over with the init answer, and tells every rank where
 * the others listen (from the membership) and the comm's lane key, derived from the job key.
 */
#ifndef HCCLD_FORM_LANES_H
#define HCCLD_FORM_LANES_H

#include <stdint.h>

#include "hccld.pb-c.h"

/* What a rank's daemon offers it: a listener (fd, -1 none) at addr, for ops up to direct_max
 * bytes (the rank's HCCLD_DIRECT_MAX; 0: the rank wants no lanes). */
typedef struct lane_offer {
    int fd;
    char addr[64]; /* FORM_ADDR_MAX */
    uint64_t direct_max;
} lane_offer_t;

#define LANE_OFFER_NONE ((lane_offer_t){.fd = -1})

/* A lane listener for a local rank that asked for ops up to direct_max bytes, bound to the IP
 * of data_addr (our data listener). Without one (direct_max 0, no data address, a socket call
 * failed: logged) the offer is LANE_OFFER_NONE. */
lane_offer_t lane_offer_make(const char *data_addr, uint64_t direct_max);
void lane_offer_close(lane_offer_t *o);
/* n unconnected sockets bound to the IP of data_addr, for a rank whose lane failed to connect
 * again with (libclient/lane_keeper.c): 0, or -1 (logged; none made). */
int lane_sockets_make(const char *data_addr, int *fds, int n);

/* The comm's direct_max from every rank's (n of them): the smallest, 0 if any rank has no
 * listener address. */
uint64_t lanes_direct_max(const char *const *addrs, const uint64_t *max, uint32_t n);

/* Fills r's lane fields for global rank `rank` of n and the sockets to hand over with it:
 * fds[0] = o->fd (taken: o->fd becomes -1), then r->lane_sockets new unconnected sockets.
 * Returns how many fds to send; 0: the comm has no lanes (r untouched); -1: it has, but this
 * rank's sockets could not be made (logged): the rank must fail its init, as its peers will
 * fail to reach it. The caller sends the fds and closes them after. key: the job key
 * (ROOTINFO_KEY_BYTES); key_out: room for the lane key that r->lane_key then points to. */
int lanes_answer(lane_offer_t *o, const char *const *addrs, uint32_t n, uint32_t rank,
                 uint64_t direct_max, const uint8_t *key, uint8_t *key_out, Hccld__CommInitResp *r,
                 int *fds, int max_fds);

#endif
