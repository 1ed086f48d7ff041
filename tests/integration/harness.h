/* Multi-process test harness: a private daemon, and ranks forked from the test. */
#ifndef HCCLD_TESTS_HARNESS_H
#define HCCLD_TESTS_HARNESS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hccl/hccl.h"
#include "hccld.pb-c.h"

typedef int (*rank_fn)(HcclComm comm, uint32_t rank, uint32_t n, void *arg);

/* Starts build/bin/hccld (HCCLD_BIN) on a socket in a fresh temp dir and waits until it
 * accepts connections; exports HCCLD_SOCKET. Returns the daemon's pid. */
pid_t harness_daemon_start(const char *extra_arg);
/* SIGTERM, then SIGKILL if it has not stopped within HARNESS_STOP_S (printing where its threads
 * wait): 0, or -1 if it had to be killed. */
#define HARNESS_STOP_S 60
int harness_daemon_stop(pid_t pid);
const char *harness_socket(void);
const char *harness_admin_socket(void);
/* Returns nonzero if pid is still running. */
int harness_alive(pid_t pid);
/* HCCLD_TEST_QUICK=1: the longest suites run a sample of their matrices (instrumented runs
 * such as tests/tsan.sh, where the full ones take hours). */
int harness_quick(void);

/* A daemon started some other way than harness_daemon_spawn: every field may be NULL. */
typedef struct harness_daemon_opts {
    const char *const *prefix; /* argv run in front of hccld, e.g. "ip netns exec NS" */
    const char *listen;        /* --listen; 127.0.0.1:0 when NULL */
    const char *dir;           /* where the socket goes (it must exist); a fresh temp dir if NULL */
    const char *log_path;      /* the daemon's stderr is appended there; inherited if NULL */
    const char *log_level;     /* HCCLD_TEST_LOG_LEVEL, else "error", when NULL */
    int die_with_parent;       /* SIGKILLed when the process that started it ends */
} harness_daemon_opts_t;

/* Starts hccld (HCCLD_BIN) as o says and waits until its socket accepts connections; the
 * socket path goes to sock. Returns the pid (the prefix must exec hccld, as `ip netns exec`
 * does), or -1. */
pid_t harness_daemon_spawn_opts(const harness_daemon_opts_t *o, char *sock, size_t cap);
/* SIGTERM, then SIGKILL after timeout_s (printing where its threads wait). Returns the exit status
 * of a daemon that exited by itself, or -1 (killed, or no such child). */
int harness_daemon_stop_within(pid_t pid, unsigned timeout_s);

/* Forks n ranks of one job; each runs fn after HcclCommInitRootInfo and exits with its return
 * value. Waits at most timeout_s; a rank that hangs is killed and counts as a failure.
 * Returns the number of ranks that failed. */
int harness_run_ranks(uint32_t n, rank_fn fn, void *arg, unsigned timeout_s);

/* Like harness_run_ranks, without waiting: pids go to pids[n]. */
int harness_spawn_ranks(uint32_t n, rank_fn fn, void *arg, unsigned timeout_s, pid_t *pids);
/* Starts another daemon in its own temp dir; its socket path goes to sock. */
pid_t harness_daemon_spawn(char *sock, size_t cap);
/* As harness_spawn_ranks, rank r talking to the daemon at socks[r] (NULL: the default one).
 * The root info comes from the daemon of HCCLD_SOCKET in the caller. */
int harness_spawn_ranks_on(uint32_t n, char *const *socks, rank_fn fn, void *arg,
                           unsigned timeout_s, pid_t *pids);
/* The same, the ranks' comms made with HcclCommInitRootInfoConfig(cfg) (NULL: without). */
int harness_spawn_ranks_cfg(uint32_t n, char *const *socks, const HcclCommConfig *cfg, rank_fn fn,
                            void *arg, unsigned timeout_s, pid_t *pids);
/* The "IP:PORT" that the daemon listening on client socket sock advertises to peer daemons,
 * asked over its admin socket (hccld-admin.sock beside sock). 0, or -1. */
int harness_daemon_addr(const char *sock, char *out, size_t cap);
/* The status of the daemon on client socket sock, over its admin socket (hccld-admin.sock
 * beside it), or NULL; the caller frees it with frame_msg_free. */
Hccld__Msg *harness_daemon_status(const char *sock);
/* Data connections to peer daemons that daemon has open (its status' data_conns), or -1. */
int harness_daemon_data_conns(const char *sock);
/* Payload bytes the daemon on client socket sock sent to peer daemons in collectives
 * (net_tx_bytes of its status), or UINT64_MAX. */
uint64_t harness_daemon_tx_bytes(const char *sock);
/* A process's own memory (RssAnon: not the shared segments it maps) and open descriptors,
 * from /proc; fails the test if they cannot be read. */
void harness_proc_usage(pid_t pid, long *rss_anon_kb, int *fds);
/* The directory of the daemon under test (HCCLD_BIN), where the tools are too. */
const char *harness_bin_dir(void);
/* Runs hccld-ctl (beside HCCLD_BIN) against the harness's admin socket with args, as uid/gid
 * if uid > 0: its exit status, or -1; its stdout and stderr go to out if not NULL. */
int harness_ctl(uid_t uid, char *out, size_t cap, const char *args);
/* Runs cmd with /bin/sh as harness_ctl runs hccld-ctl: its exit status, or -1; its stdout goes
 * to out if not NULL. */
int harness_sh(uid_t uid, char *out, size_t cap, const char *cmd);
/* Waits for the given children; returns how many failed. */
int harness_wait(pid_t *pids, uint32_t n, unsigned timeout_s);
/* The same, with each child's wait status in status[n] (-1: it hung and was killed). */
int harness_wait_status(pid_t *pids, uint32_t n, unsigned timeout_s, int *status);
/* Sends this process's stderr (and its children's, from now on) to a new file named in path;
 * returns the old stderr for harness_stderr_back_has. */
int harness_stderr_to(char *path, size_t cap);
/* Puts stderr back; whether the file held needle (if not, prints what it held); removes it. */
int harness_stderr_back_has(int saved, const char *path, const char *needle);

/* test_colls.c: every dtype/op/count/placement of one collective (quick: a subset), checked
 * element by element; a rank_fn. */
typedef struct colls_arg {
    int kind;
    int quick;
} colls_arg_t;
int colls_all_cases(HcclComm comm, uint32_t r, uint32_t n, void *arg);
/* One case drawn from seed (every rank draws the same): collective, dtype, op, placement,
 * count (up to max_count, or exactly max_count if at_max), root; checked element by element.
 * 0 ok, 1 failed. */
int colls_random_case(HcclComm comm, uint32_t r, uint32_t n, uint64_t seed, uint64_t max_count,
                      int at_max);
/* test_p2p.c: a Send/Recv ring over several sizes; AlltoAllV with varied counts (arg points
 * to the base count, a uint64_t). Both compare every element with the reference. */
int p2p_ring_case(HcclComm comm, uint32_t r, uint32_t n, void *arg);
int p2p_alltoallv_case(HcclComm comm, uint32_t r, uint32_t n, void *arg);
int p2p_batch_case(HcclComm comm, uint32_t r, uint32_t n, void *arg);
/* HcclAllGatherV and HcclReduceScatterV with uneven blocks (some empty) and gaps between them,
 * checked element by element (arg: a uint64_t base count). */
int v_colls_case(HcclComm comm, uint32_t r, uint32_t n, void *arg);

#endif
