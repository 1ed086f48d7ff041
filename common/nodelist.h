/*
 * Slurm's compressed host lists (SLURM_JOB_NODELIST): "node[01-04,7],gpu5,rack[1-2]-n[1-2]".
 * Commas outside brackets separate items; each bracket holds numbers and ranges, zero-padded
 * to the width of the range's first number; several brackets in one item multiply out, the
 * last one varying fastest (as scontrol show hostnames prints them).
 */
#ifndef HCCLD_COMMON_NODELIST_H
#define HCCLD_COMMON_NODELIST_H

#include <stddef.h>

#define NODELIST_MAX_HOSTS 65536
#define NODELIST_HOST_MAX 256

/* Called for every host in order; a nonzero return stops the expansion (and is returned). */
typedef int (*nodelist_cb)(const char *host, void *arg);

/* 0 when every host was passed to cb, cb's nonzero value, or -EINVAL (malformed list) or
 * -E2BIG (more than NODELIST_MAX_HOSTS hosts, or a name longer than NODELIST_HOST_MAX). */
int nodelist_each(const char *list, nodelist_cb cb, void *arg);
/* The first host of a valid list (the whole list is checked); 0 or a negative errno. */
int nodelist_first(const char *list, char *out, size_t cap);

#endif
