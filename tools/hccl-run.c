/*
 * hccl-run: the local launcher. Gets one root info, starts N ranks with the environment that
 * HcclCommInitFromEnv reads, forwards SIGINT/SIGTERM, and exits with the worst rank status.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bind.h"
#include "env.h"
#include "hccl/hccl.h"
#include "rootinfo.h"

#define MAX_RANKS 4096
#define MAX_DAEMONS 64

static pid_t *children;
static int nchildren;

static void forward(int sig)
{
    for (int i = 0; i < nchildren; i++)
        if (children[i] > 0)
            kill(children[i], sig);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: hccl-run -n N [--daemons SOCK[,SOCK...]] [--map-by slot|node] -- PROG "
               "[ARGS...]\n"
               "  Starts N ranks of PROG. --map-by slot (the default): the daemons take blocks\n"
               "  of consecutive ranks, as even as can be (the first ones one more);\n"
               "  --map-by node: round robin, rank r on daemon r %% D (as Open MPI's).\n");
}

static int split_daemons(char *list, char **out)
{
    int n = 0;

    for (char *tok = strtok(list, ","); tok != NULL && n < MAX_DAEMONS; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

static void set_env_u(const char *name, unsigned long v)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%lu", v);
    setenv(name, buf, 1);
}

/* Where rank r of n goes among nd daemons: its daemon, its index there and how many ranks
 * that daemon holds. */
typedef struct place {
    int daemon, local, size;
} place_t;

static place_t place_rank(int r, int n, int nd, int by_node)
{
    int q = n / nd, extra = n % nd;

    if (by_node)
        return (place_t){r % nd, r / nd, q + (r % nd < extra)};
    /* Daemons below `extra` hold q + 1 ranks, the others q. */
    int d = r < extra * (q + 1) ? r / (q + 1) : extra + (r - extra * (q + 1)) / q;
    int first = d * q + (d < extra ? d : extra);
    return (place_t){d, r - first, q + (d < extra)};
}

static pid_t spawn(int rank, int n, place_t pl, char **daemons, const char *hex, char **argv)
{
    pid_t pid = fork();

    if (pid != 0)
        return pid;
    setenv("HCCL_ROOT_INFO", hex, 1);
    set_env_u("HCCL_RANK", (unsigned long)rank);
    set_env_u("HCCL_WORLD_SIZE", (unsigned long)n);
    set_env_u("HCCL_LOCAL_RANK", (unsigned long)pl.local);
    set_env_u("HCCL_LOCAL_SIZE", (unsigned long)pl.size);
    if (daemons[pl.daemon] != NULL)
        setenv("HCCLD_SOCKET", daemons[pl.daemon], 1);
    /* Every rank runs on this machine, whatever daemon it uses: pin among all of them, as
     * mpirun pins the processes of a host (ranks of two daemons here must not share a core). */
    bind_local_rank((unsigned)rank, (unsigned)n);
    execvp(argv[0], argv);
    fprintf(stderr, "hccl-run: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static int child_status(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"np", required_argument, 0, 'n'},
                                       {"daemons", required_argument, 0, 'd'},
                                       {"map-by", required_argument, 0, 'm'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    char *daemons[MAX_DAEMONS] = {NULL}, hex[2 * HCCL_ROOT_INFO_BYTES + 1];
    uint64_t n = 0;
    int c, ndaemons = 1, worst = 0, by_node = 0;
    HcclRootInfo ri;
    HcclResult rc;

    while ((c = getopt_long(argc, argv, "+n:d:m:h", lo, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (parse_u64(optarg, &n) != 0 || n == 0 || n > MAX_RANKS) {
                fprintf(stderr, "hccl-run: -n wants 1..%d\n", MAX_RANKS);
                return 2;
            }
            break;
        case 'd': ndaemons = split_daemons(optarg, daemons); break;
        case 'm':
            if (strcmp(optarg, "slot") != 0 && strcmp(optarg, "node") != 0) {
                fprintf(stderr, "hccl-run: --map-by wants slot or node, not %s\n", optarg);
                return 2;
            }
            by_node = strcmp(optarg, "node") == 0;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (n == 0 || optind >= argc || ndaemons == 0) {
        usage(stderr);
        return 2;
    }
    if (daemons[0] != NULL)
        setenv("HCCLD_SOCKET", daemons[0], 1);
    if ((rc = HcclGetRootInfo(&ri)) != HCCL_SUCCESS) {
        fprintf(stderr, "hccl-run: HcclGetRootInfo failed: %s\n", HcclGetErrorString(rc));
        return 1;
    }
    hex_encode(ri.internal, rootinfo_packed_len(&ri), hex);
    children = calloc(n, sizeof(*children));
    if (children == NULL)
        return 1;
    signal(SIGINT, forward);
    signal(SIGTERM, forward);
    for (int r = 0; r < (int)n; r++) {
        children[r] =
            spawn(r, (int)n, place_rank(r, (int)n, ndaemons, by_node), daemons, hex, argv + optind);
        nchildren = r + 1;
    }
    for (int left = (int)n; left > 0;) {
        int st;
        pid_t pid = wait(&st);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int r = 0; r < (int)n; r++)
            if (children[r] == pid) {
                children[r] = 0;
                left--;
                if (child_status(st) > worst)
                    worst = child_status(st);
                if (child_status(st) != 0)
                    fprintf(stderr, "hccl-run: rank %d exited with status %d\n", r,
                            child_status(st));
            }
    }
    free(children);
    return worst;
}
