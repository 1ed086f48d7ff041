#include "net_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "env.h"

int net_ip_parse(const char *ip, uint16_t port, struct sockaddr_storage *ss, socklen_t *len_p)
{
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    socklen_t len;

    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, ip, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        len = sizeof(*in4);
    } else if (inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        len = sizeof(*in6);
    } else {
        return -EINVAL;
    }
    if (len_p != NULL)
        *len_p = len;
    return 0;
}

int net_addr_parse(const char *addr, struct sockaddr_storage *ss, socklen_t *len_p)
{
    char host[INET6_ADDRSTRLEN];
    const char *colon = strrchr(addr, ':');
    const char *h = addr;
    size_t hlen;
    uint64_t port;

    if (colon == NULL || parse_u64(colon + 1, &port) != 0 || port == 0 || port > 65535)
        return -EINVAL;
    hlen = (size_t)(colon - addr);
    if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']') {
        h = addr + 1;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= sizeof(host))
        return -EINVAL;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    return net_ip_parse(host, (uint16_t)port, ss, len_p);
}

int net_addr_format(const struct sockaddr *sa, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int n;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in4->sin_addr, host, sizeof(host));
        n = snprintf(out, cap, "%s:%u", host, ntohs(in4->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        n = snprintf(out, cap, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        n = snprintf(out, cap, "(address family %d)", sa->sa_family);
    }
    return n > 0 && (size_t)n < cap ? 0 : -ENOSPC;
}
