/* hccld-ctl watch [--json] [--stall-s S]: the daemon's events as they happen (one line each,
 * JSON Lines with --json), until interrupted; a daemon that restarts is reconnected to. */
#ifndef HCCLD_TOOLS_CTL_WATCH_H
#define HCCLD_TOOLS_CTL_WATCH_H

int ctl_watch(const char *admin_path, int json, int argc, char **argv);

#endif
