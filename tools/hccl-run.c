/*
 * hccl-run: the local launcher. Gets one root info and starts N ranks with the environment that
 * HcclCommInitFromEnv reads, and torchrun's, so that init_process_group("hccl") runs unchanged.
 * Like mpirun, the first rank that fails stops the job (run_watch.c), unless --keep-going.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bind.h"
#include "cli.h"
#include "env.h"
#include "hccl/hccl.h"
#include "rootinfo.h"
#include "run_watch.h"

#define MAX_RANKS 4096
#define MAX_DAEMONS 64

#define PROG "hccl-run"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hccl-run -n N [options] [--] PROG [ARGS...]\n"
            "       hccl-run --help | --version\n"
            "Starts N ranks of PROG on this machine, as mpirun and torchrun do.\n"
            "  -n, --np N            ranks to start (1..%d)\n"
            "  --daemons SOCK[,SOCK...]\n"
            "                        the ranks' daemons (client sockets), one or more; default:\n"
            "                        HCCLD_SOCKET, else /run/hccld/hccld.sock\n"
            "  --map-by slot|node    slot (the default): the daemons take blocks of consecutive\n"
            "                        ranks, as even as can be (the first ones one more); node:\n"
            "                        round robin, rank r on daemon r %% D (as Open MPI's)\n"
            "  --tag-output          prefix each line of output with its rank: [1,R]<stdout>:\n"
            "                        (as mpirun's --tag-output)\n"
            "  --grace S             when the job stops, seconds between SIGTERM and SIGKILL\n"
            "                        (default 5)\n"
            "  --keep-going          a failing rank does not stop the others: each runs to its\n"
            "                        own end (to see every rank's error)\n"
            "Each rank gets HCCL_ROOT_INFO, HCCL_RANK, HCCL_WORLD_SIZE, HCCL_LOCAL_RANK,\n"
            "HCCL_LOCAL_SIZE and HCCLD_SOCKET (HcclCommInitFromEnv), and torchrun's RANK,\n"
            "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=0, MASTER_ADDR (127.0.0.1)\n"
            "and MASTER_PORT (a free port), unless MASTER_ADDR or MASTER_PORT is set already.\n"
            "The first rank that fails stops the job (unless --keep-going): the others get\n"
            "SIGTERM, then SIGKILL; its status is hccl-run's. SIGINT and SIGTERM are forwarded\n"
            "to the ranks. HCCL_BIND=core (the default) pins rank i to the i-th allowed core.\n",
            MAX_RANKS);
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

/* A port free on loopback now, for torch's store (as torchrun picks one). */
static unsigned free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unsigned port = 0;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port ? port : 29500;
}

static pid_t spawn(int rank, int n, place_t pl, char **daemons, const char *hex, char **argv,
                   int pipes[2][2])
{
    pid_t pid = fork();

    if (pid != 0)
        return pid;
    run_signals_child();
    for (int i = 0; pipes != NULL && i < 2; i++) {
        dup2(pipes[i][1], i + 1);
        close(pipes[i][0]);
        close(pipes[i][1]);
    }
    setenv("HCCL_ROOT_INFO", hex, 1);
    set_env_u("HCCL_RANK", (unsigned long)rank);
    set_env_u("HCCL_WORLD_SIZE", (unsigned long)n);
    set_env_u("HCCL_LOCAL_RANK", (unsigned long)pl.local);
    set_env_u("HCCL_LOCAL_SIZE", (unsigned long)pl.size);
    /* torchrun's: one machine, so the local rank is the rank among all of them here. */
    set_env_u("RANK", (unsigned long)rank);
    set_env_u("WORLD_SIZE", (unsigned long)n);
    set_env_u("LOCAL_RANK", (unsigned long)rank);
    set_env_u("LOCAL_WORLD_SIZE", (unsigned long)n);
    setenv("GROUP_RANK", "0", 1);
    if (daemons[pl.daemon] != NULL)
        setenv("HCCLD_SOCKET", daemons[pl.daemon], 1);
    /* Every rank runs on this machine, whatever daemon it uses: pin among all of them, as
     * mpirun pins the processes of a host (ranks of two daemons here must not share a core). */
    bind_local_rank((unsigned)rank, (unsigned)n);
    execvp(argv[0], argv);
    fprintf(stderr, "hccl-run: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Starts the ranks, with their output through pipes when tagged; 0 or -1. */
static int start(run_job_t *job, char **daemons, int ndaemons, int by_node, const char *hex,
                 char **argv)
{
    for (int r = 0; r < job->n; r++) {
        int pipes[2][2] = {{-1, -1}, {-1, -1}};
        run_rank_t *rk = &job->ranks[r];
        rk->out[0] = rk->out[1] = -1;
        if (job->tag && (pipe2(pipes[0], O_CLOEXEC) != 0 || pipe2(pipes[1], O_CLOEXEC) != 0)) {
            fprintf(stderr, "hccl-run: pipe: %s\n", strerror(errno));
            return -1;
        }
        rk->pid = spawn(r, job->n, place_rank(r, job->n, ndaemons, by_node), daemons, hex, argv,
                        job->tag ? pipes : NULL);
        if (rk->pid > 0)
            setpgid(rk->pid, rk->pid); /* as the child does: whichever runs first */
        for (int i = 0; job->tag && i < 2; i++) {
            close(pipes[i][1]);
            rk->out[i] = pipes[i][0];
        }
        if (rk->pid < 0) {
            fprintf(stderr, "hccl-run: fork: %s\n", strerror(errno));
            rk->pid = 0;
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"np", required_argument, 0, 'n'},
                                       {"daemons", required_argument, 0, 'd'},
                                       {"map-by", required_argument, 0, 'm'},
                                       {"tag-output", no_argument, 0, 't'},
                                       {"grace", required_argument, 0, 'g'},
                                       {"keep-going", no_argument, 0, 'k'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
    char *daemons[MAX_DAEMONS] = {NULL}, hex[2 * HCCL_ROOT_INFO_BYTES + 1], *end;
    run_job_t job = {.grace_s = 5, .sigfd = -1};
    uint64_t n = 0;
    int c, ndaemons = 1, by_node = 0, rc;
    HcclRootInfo ri;
    HcclResult hr;

    opterr = 0;
    while ((c = getopt_long(argc, argv, "+n:h", lo, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (parse_u64(optarg, &n) != 0 || n == 0 || n > MAX_RANKS)
                return cli_bad(PROG, "-n '%s': the number of ranks, 1..%d", optarg, MAX_RANKS);
            break;
        case 'd':
            if ((ndaemons = split_daemons(optarg, daemons)) == 0)
                return cli_bad(PROG, "--daemons '%s': client sockets, comma separated", optarg);
            break;
        case 'm':
            if (strcmp(optarg, "slot") != 0 && strcmp(optarg, "node") != 0)
                return cli_bad(PROG, "--map-by '%s': slot or node", optarg);
            by_node = strcmp(optarg, "node") == 0;
            break;
        case 't': job.tag = 1; break;
        case 'k': job.keep_going = 1; break;
        case 'g':
            job.grace_s = strtod(optarg, &end);
            if (*end != '\0' || !(job.grace_s >= 0 && job.grace_s <= 3600))
                return cli_bad(PROG, "--grace '%s': seconds, 0..3600", optarg);
            break;
        case 'h': usage(stdout); return 0;
        case 'V': cli_version(PROG); return 0;
        default: return cli_bad_option(PROG, NULL, argv, "+n:h", lo);
        }
    }
    if (n == 0)
        return cli_bad(PROG, "how many ranks? -n N");
    if (optind >= argc)
        return cli_bad(PROG, "which program? hccl-run -n %llu -- PROG [ARGS...]",
                       (unsigned long long)n);
    if (daemons[0] != NULL)
        setenv("HCCLD_SOCKET", daemons[0], 1);
    if ((hr = HcclGetRootInfo(&ri)) != HCCL_SUCCESS) {
        fprintf(stderr, "hccl-run: HcclGetRootInfo failed: %s\n", HcclGetErrorString(hr));
        return 1;
    }
    hex_encode(ri.internal, rootinfo_packed_len(&ri), hex);
    if (getenv("MASTER_ADDR") == NULL && getenv("MASTER_PORT") == NULL) {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        set_env_u("MASTER_PORT", free_port());
    }
    job.n = (int)n;
    job.ranks = calloc(n, sizeof(*job.ranks));
    if (job.ranks == NULL || (rc = run_signals(&job)) != 0) {
        fprintf(stderr, "hccl-run: cannot watch its ranks: %s\n", strerror(ENOMEM));
        return 1;
    }
    if (start(&job, daemons, ndaemons, by_node, hex, argv + optind) != 0) {
        for (int r = 0; r < job.n; r++)
            if (job.ranks[r].pid > 0)
                kill(job.ranks[r].pid, SIGKILL);
    }
    rc = run_watch(&job);
    free(job.ranks);
    return rc;
}
