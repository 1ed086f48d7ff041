/* Blocking framed messages over a Unix stream socket, with file descriptors (SCM_RIGHTS). */
#ifndef HCCLD_COMMON_UDS_H
#define HCCLD_COMMON_UDS_H

#include "frame.h"

#define UDS_MAX_FDS 256

typedef struct uds_conn {
    int fd;
    frame_dec_t dec;
    int fds[UDS_MAX_FDS]; /* received and not yet taken */
    int nfds;
} uds_conn_t;

/* The admin socket beside client socket sock: NAME.sock -> NAME-admin.sock (hccld.sock ->
 * hccld-admin.sock), so that daemons whose sockets share a directory do not share one. */
void uds_admin_beside(const char *sock, char *out, size_t cap);
/* Connects to path; -errno on failure. */
int uds_connect(const char *path);
/* Sends one message and, with it, nfds descriptors; 0 or -errno. */
int uds_send(int fd, const Hccld__Msg *m, const int *fds, int nfds);
/* Receives the next message within timeout_ms (< 0: no limit). Descriptors that arrive are kept
 * in c->fds. 0, -ETIMEDOUT, -ECONNRESET (peer closed), -EMSGSIZE/-EBADMSG, or -errno. */
int uds_recv(uds_conn_t *c, Hccld__Msg **msg_p, int timeout_ms);
void uds_conn_init(uds_conn_t *c, int fd);
/* Closes the socket and every descriptor not taken. */
void uds_conn_close(uds_conn_t *c);

#endif
