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
