/* hccld: the per-node collective communication daemon. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "env.h"
#include "log.h"
#include "reduce.h"
#include "server/daemon_conf.h"
#include "server/server.h"
#include "uds.h"

#define DEFAULT_SOCKET "/run/hccld/hccld.sock"
#define DEFAULT_CHUNK (1ull << 20)

typedef struct opts {
    char socket_path[256];
    char admin_path[256];
    const char *config;
    const char *log_file;
    int foreground;
    daemon_conf_t d; /* what the [daemon] section of the config may also set */
    char listen[64];
} opts_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hccld [options]\n"
            "  --socket PATH        client socket (default " DEFAULT_SOCKET ")\n"
            "  --admin-socket PATH  admin socket (default NAME-admin.sock for socket NAME.sock)\n"
            "  --config FILE        INI configuration ([daemon] workers, chunk_kib, log_level,\n"
            "                       l0_mode = auto|coop|daemon, metrics_listen)\n"
            "  --log-level LEVEL    error|warn|info|debug (default warn)\n"
            "  --log-file PATH      append the log to PATH instead of stderr; SIGHUP reopens it\n"
            "                       (after a rotation)\n"
            "  --workers N          executor threads (default: online CPUs)\n"
            "  --listen IP:PORT     accept peer daemons (default 0.0.0.0:60000; none: one node)\n"
            "  --metrics-listen IP:PORT  serve GET /metrics for Prometheus there (default: off)\n"
            "  --foreground         do not detach (systemd and tests use this)\n"
            "  --version, --help\n");
}

#define PROG "hccld"
#define SHORTS "s:a:c:l:g:w:fVhL:M:"

static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        {"socket", required_argument, 0, 's'},   {"admin-socket", required_argument, 0, 'a'},
        {"config", required_argument, 0, 'c'},   {"log-level", required_argument, 0, 'l'},
        {"log-file", required_argument, 0, 'g'}, {"workers", required_argument, 0, 'w'},
        {"foreground", no_argument, 0, 'f'},     {"listen", required_argument, 0, 'L'},
        {"version", no_argument, 0, 'V'},        {"metrics-listen", required_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    int c, level = -1;
    uint64_t workers = UINT64_MAX;
    const char *metrics = NULL;
    char err[512];

    snprintf(o->socket_path, sizeof(o->socket_path), "%s", DEFAULT_SOCKET);
    o->d.log_level = LOG_WARN;
    o->d.chunk = DEFAULT_CHUNK;
    snprintf(o->listen, sizeof(o->listen), "0.0.0.0:60000");
    opterr = 0;
    while ((c = getopt_long(argc, argv, SHORTS, lo, NULL)) != -1) {
        switch (c) {
        case 'L': snprintf(o->listen, sizeof(o->listen), "%s", optarg); break;
        case 'M': metrics = optarg; break;
        case 's': snprintf(o->socket_path, sizeof(o->socket_path), "%s", optarg); break;
        case 'a': snprintf(o->admin_path, sizeof(o->admin_path), "%s", optarg); break;
        case 'c': o->config = optarg; break;
        case 'g': o->log_file = optarg; break;
        case 'l':
            if ((level = log_level_parse(optarg)) < 0)
                return cli_bad(PROG, "--log-level '%s': error, warn, info or debug", optarg);
            break;
        case 'w':
            if (parse_u64(optarg, &workers) != 0 || workers > 256)
                return cli_bad(PROG, "--workers '%s': executor threads, 0..256 (0: online CPUs)",
                               optarg);
            break;
        case 'f': o->foreground = 1; break;
        case 'V':
            printf("hccld %s (client protocol %u, peer protocol %u)\n", HCCLD_VERSION,
                   PROTO_VERSION, PEER_PROTO_VERSION);
            exit(0);
        case 'h': usage(stdout); exit(0);
        default: return cli_bad_option(PROG, NULL, argv, SHORTS, lo);
        }
    }
    if (optind < argc)
        return cli_bad(PROG, "unexpected argument '%s' (every setting is an option)", argv[optind]);
    if (o->config != NULL && daemon_conf_load(o->config, &o->d, err, sizeof(err)) != 0) {
        fprintf(stderr, "hccld: config %s\n", err);
        return 2;
    }
    /* The command line wins over the file. */
    if (level >= 0)
        o->d.log_level = level;
    if (workers != UINT64_MAX)
        o->d.workers = workers;
    if (metrics != NULL)
        snprintf(o->d.metrics_listen, sizeof(o->d.metrics_listen), "%s", metrics);
    const char *mode = getenv("HCCLD_L0_MODE");
    if (mode != NULL && (o->d.l0_mode = daemon_l0_mode_parse(mode)) < 0) {
        fprintf(stderr, "hccld: HCCLD_L0_MODE wants auto, coop or daemon\n");
        return 2;
    }
    if (o->admin_path[0] == '\0')
        uds_admin_beside(o->socket_path, o->admin_path, sizeof(o->admin_path));
    return 0;
}

/* Creates the socket's directory and any missing parent (0755), as systemd's
 * RuntimeDirectory= does for the unit: 0, or -1 after logging which directory failed. */
static int make_socket_dir(const char *path)
{
    char dir[256];

    snprintf(dir, sizeof(dir), "%s", path);
    for (char *p = dir + 1; (p = strchr(p, '/')) != NULL; p++) {
        struct stat st;
        *p = '\0';
        int missing = stat(dir, &st) != 0;
        if (missing && errno != ENOENT) {
            ERR("INIT", "cannot reach %s, a directory of the socket %s: %s", dir, path,
                strerror(errno));
            return -1;
        }
        if (!missing && !S_ISDIR(st.st_mode)) {
            ERR("INIT", "%s is no directory, and the socket %s would go in it", dir, path);
            return -1;
        }
        if (missing && mkdir(dir, 0755) != 0 && errno != EEXIST) {
            ERR("INIT", "cannot create %s, a directory of the socket %s: %s", dir, path,
                strerror(errno));
            return -1;
        }
        *p = '/';
    }
    return 0;
}

/* Detaches: the parent exits with the child's start-up status, so errors still reach the
 * shell that started us. */
static int detach(int *notify_fd, const char *log_file)
{
    int p[2];
    char status = 1;
    pid_t pid;

    if (pipe(p) != 0)
        return -errno;
    pid = fork();
    if (pid < 0)
        return -errno;
    if (pid > 0) {
        close(p[1]);
        if (read(p[0], &status, 1) != 1)
            status = 1;
        if (status == 0)
            printf("hccld: running in the background, pid %d\n", (int)pid);
        else if (log_file != NULL)
            fprintf(stderr, "hccld: it did not start; why is in %s\n", log_file);
        fflush(stdout);
        _exit(status);
    }
    close(p[0]);
    setsid();
    *notify_fd = p[1];
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {0};
    server_t srv;
    uv_loop_t *loop;
    int rc, notify_fd = -1;
    char ok = 0;

    if ((rc = parse_args(argc, argv, &o)) != 0)
        return rc;
    log_init("hccld", o.d.log_level);
    signal(SIGPIPE, SIG_IGN);
    /* The data path allocates and frees buffers of the chunk's size again and again (a
     * message that arrives before its receive). With glibc's adaptive thresholds such a
     * buffer is mmap()ed, or the heap top is handed back with madvise() after each free,
     * and every message then pays its page faults anew. Fixed thresholds keep them mapped
     * (freed memory is reused; the daemon's footprint stays bounded by its peak). */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    /* Opened before it detaches, so that a path it cannot write to is said where it runs. */
    if (o.log_file != NULL && (rc = log_to_file(o.log_file)) != 0) {
        fprintf(stderr, "hccld: cannot write the log to %s: %s\n", o.log_file, strerror(-rc));
        return 2;
    }
    if (!o.foreground && detach(&notify_fd, o.log_file) != 0) {
        ERR("INIT", "fork() failed: %s", strerror(errno));
        return 1;
    }
    if (reduce_select(NULL) != 0)
        WARN("INIT", "HCCLD_SIMD names an ISA this CPU lacks; using %s", reduce_isa());
    if (make_socket_dir(o.socket_path) != 0 || make_socket_dir(o.admin_path) != 0)
        return 1;
    loop = uv_default_loop();
    server_config_t cfg = {.socket_path = o.socket_path,
                           .admin_path = o.admin_path,
                           .workers = (unsigned)o.d.workers,
                           .chunk_bytes = o.d.chunk,
                           .max_arena = SERVER_MAX_ARENA,
                           .l0_mode = o.d.l0_mode,
                           .listen = strcmp(o.listen, "none") == 0 ? NULL : o.listen,
                           .config_path = o.config,
                           .log_file = o.log_file,
                           .metrics_listen = o.d.metrics_listen[0] ? o.d.metrics_listen : NULL};
    if (server_start(&srv, loop, &cfg) != 0)
        return 1;
    log_notice("INIT", "hccld %s ready, pid %d: socket %s, admin %s, peers %s, metrics %s",
               HCCLD_VERSION, (int)getpid(), o.socket_path, o.admin_path,
               srv.advertised[0] ? srv.advertised : "off (--listen none)",
               srv.metrics_addr[0] ? srv.metrics_addr : "off");
    if (notify_fd >= 0) {
        if (write(notify_fd, &ok, 1) != 1)
            WARN("INIT", "could not tell the parent we started");
        close(notify_fd);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            close(devnull);
        }
    }
    uv_run(loop, UV_RUN_DEFAULT);
    engine_destroy(srv.eng);
    uv_loop_close(loop);
    INFO("INIT", "stopped");
    return 0;
}
