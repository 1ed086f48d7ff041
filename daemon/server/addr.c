/*
 * The address a daemon advertises to its peers: HCCL_IF_IP, else the first IPv4 address of an
 * interface that HCCL_SOCKET_IFNAME selects, else the first non-loopback interface, else the
 * listen host (and 127.0.0.1 when that is the wildcard).
 * HCCL_SOCKET_IFNAME (as NCCL's): a comma-separated list of name prefixes; "^" before the list
 * excludes instead of selecting; "=" before the list (after any "^") matches names exactly.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "server/peer.h"

int ifname_match(const char *spec, const char *name)
{
    int exclude = 0, exact = 0, hit = 0;
    char list[256];

    if (spec[0] == '^')
        exclude = 1, spec++;
    if (spec[0] == '=')
        exact = 1, spec++;
    snprintf(list, sizeof(list), "%s", spec);
    for (char *save, *tok = strtok_r(list, ",", &save); tok && !hit;
         tok = strtok_r(NULL, ",", &save))
        hit = exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0;
    return exclude ? !hit : hit;
}

/* First IPv4 address of an up interface accepted by the filter. */
static int pick_interface(const char *spec, char *out, size_t cap)
{
    struct ifaddrs *ifs, *i;
    int found = 0;

    if (getifaddrs(&ifs) != 0)
        return 0;
    for (i = ifs; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        if (spec != NULL ? !ifname_match(spec, i->ifa_name) : (i->ifa_flags & IFF_LOOPBACK))
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)cap);
        found = 1;
    }
    freeifaddrs(ifs);
    return found;
}

int addr_advertised(const char *listen_host, char *out, size_t cap)
{
    const char *ip = getenv("HCCL_IF_IP"), *spec = getenv("HCCL_SOCKET_IFNAME");
    struct in_addr a;

    if (ip != NULL && *ip) {
        if (inet_pton(AF_INET, ip, &a) != 1) {
            ERR("INIT", "HCCL_IF_IP=%s is not an IPv4 address", ip);
            return -1;
        }
        snprintf(out, cap, "%s", ip);
        return 0;
    }
    if (spec != NULL && *spec) {
        if (!pick_interface(spec, out, cap)) {
            ERR("INIT", "no up IPv4 interface matches HCCL_SOCKET_IFNAME=%s", spec);
            return -1;
        }
        return 0;
    }
    if (strcmp(listen_host, "0.0.0.0") != 0) {
        snprintf(out, cap, "%s", listen_host);
        return 0;
    }
    if (!pick_interface(NULL, out, cap))
        snprintf(out, cap, "127.0.0.1");
    return 0;
}

/* Splits "IP:PORT"; 0 or -1. */
static int split_addr(const char *addr, char *ip, size_t cap, long *port)
{
    const char *colon = strrchr(addr, ':');
    char *end;

    if (colon == NULL || (size_t)(colon - addr) >= cap)
        return -1;
    memcpy(ip, addr, (size_t)(colon - addr));
    ip[colon - addr] = '\0';
    *port = strtol(colon + 1, &end, 10);
    return *end == '\0' && *port >= 0 && *port <= 65535 ? 0 : -1;
}

/* Whether ip is an address of one of this host's interfaces (any of 127/8 counts). */
static int ip_is_local(const char *ip)
{
    struct ifaddrs *ifs;
    struct in_addr a;
    int found = 0;

    if (inet_pton(AF_INET, ip, &a) != 1)
        return 0;
    if ((ntohl(a.s_addr) >> 24) == 127)
        return 1;
    if (getifaddrs(&ifs) != 0)
        return 0;
    for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next)
        found = i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
                ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == a.s_addr;
    freeifaddrs(ifs);
    return found;
}

int addr_is_self(const char *listen, const char *advertised, const char *addr)
{
    char ip[64], mine[64], lhost[64];
    long port, my_port, lport;

    if (advertised[0] == '\0')
        return 0;
    if (strcmp(addr, advertised) == 0)
        return 1;
    if (listen == NULL || split_addr(addr, ip, sizeof(ip), &port) != 0 ||
        split_addr(advertised, mine, sizeof(mine), &my_port) != 0 || port != my_port ||
        split_addr(listen, lhost, sizeof(lhost), &lport) != 0)
        return 0;
    /* Listening on one address, only that one reaches us; on the wildcard, any of ours does. */
    if (strcmp(lhost, "0.0.0.0") != 0)
        return strcmp(ip, lhost) == 0;
    return ip_is_local(ip);
}
