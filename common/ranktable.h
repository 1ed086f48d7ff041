/*
 * HCCL's rank table, version 1.0 (the file HcclCommInitClusterInfo and RANK_TABLE_FILE name):
 *   {"version": "1.0", "server_count": "2", "status": "completed",
 *    "server_list": [{"server_id": "10.0.0.1",
 *                     "device": [{"device_id": "0", "device_ip": "...", "rank_id": "0"}, ...]},
 *                    ...]}
 * Numbers are strings in HCCL's files; plain JSON numbers are accepted too. server_id is the
 * node's daemon: "IP" (HCCL's base port, 60000) or "IP:PORT". Unknown keys are ignored.
 */
#ifndef HCCLD_COMMON_RANKTABLE_H
#define HCCLD_COMMON_RANKTABLE_H

#include <stddef.h>
#include <stdint.h>

#define RT_ADDR_MAX 64
#define RT_DEFAULT_PORT 60000
#define RT_MAX_RANKS 4096

typedef struct ranktable {
    uint32_t nranks;              /* devices in the file; rank ids are 0..nranks-1 */
    uint32_t nservers;            /* servers, in file order */
    char (*servers)[RT_ADDR_MAX]; /* "IP:PORT" of every server */
    uint32_t *rank_server;        /* server index of every rank */
} ranktable_t;

/* Parses and validates text[0..len). Returns an HcclResult: HCCL_SUCCESS, HCCL_E_PARA (malformed
 * or inconsistent; why in err) or HCCL_E_MEMORY. A server may hold any number of ranks, with
 * any rank ids. */
int ranktable_parse(const char *text, size_t len, ranktable_t *rt, char *err, size_t cap);
void ranktable_free(ranktable_t *rt);

/* "IP" or "IP:PORT" (IPv4; port 1..65535, default defport) as "IP:PORT"; 0 or -EINVAL. */
int hostport_normalize(const char *s, unsigned defport, char *out, size_t cap);

#endif
