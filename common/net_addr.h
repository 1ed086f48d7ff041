/* Network addresses of daemons and ranks: "ip:port" or "[ip6]:port", numeric only (names would
 * need a blocking resolver). */
#ifndef HCCLD_COMMON_NET_ADDR_H
#define HCCLD_COMMON_NET_ADDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A numeric IPv4 or IPv6 address and a port; *len_p (may be NULL) gets the sockaddr's length.
 * 0 or -EINVAL. */
int net_ip_parse(const char *ip, uint16_t port, struct sockaddr_storage *ss, socklen_t *len_p);
/* "ip:port" or "[ip6]:port" (port 1..65535). 0 or -EINVAL. */
int net_addr_parse(const char *addr, struct sockaddr_storage *ss, socklen_t *len_p);
/* The reverse; "(address family N)" for anything else. 0, or -ENOSPC if cap is too small. */
int net_addr_format(const struct sockaddr *sa, char *out, size_t cap);

#endif
