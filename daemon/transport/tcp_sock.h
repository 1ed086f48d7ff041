/* Sockets of the TCP transport: addresses, nonblocking listen and connect, and their options. */
#ifndef HCCLD_TRANSPORT_TCP_SOCK_H
#define HCCLD_TRANSPORT_TCP_SOCK_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <stddef.h>

/* Binds ip:0 and listens; writes "ip:port" (IPv6 in brackets) into addr_out. */
int tcp_sock_listen(const char *ip, int *fd_p, char *addr_out, size_t cap);
/* The same on a given "ip:port". */
int tcp_sock_listen_at(const char *addr, int *fd_p, char *addr_out, size_t cap);
/* Starts a nonblocking connect to "ip:port"; completion shows as the socket turning writable. */
int tcp_sock_connect(const char *addr, int *fd_p);
/* 1 connected, 0 still connecting, or a negative errno. */
int tcp_sock_connect_done(int fd);
/* Sets TCP_NODELAY and the socket buffers (HCCLD_TCP_BUF) on a data socket. */
int tcp_sock_tune(int fd);
/* One nonblocking sendmsg() of iov: bytes written, 0 if it would block, or a negative errno
 * (logged, naming what). */
ssize_t tcp_sock_send(int fd, struct iovec *iov, size_t niov, const char *what);

#endif
