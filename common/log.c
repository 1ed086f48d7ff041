#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int log_level_cur = LOG_WARN;
static char log_who[64] = "hccl";

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void log_init(const char *who, int level)
{
    snprintf(log_who, sizeof(log_who), "%s", who);
    log_level_cur = level;
}

void log_set_who(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(log_who, sizeof(log_who), fmt, ap);
    va_end(ap);
}

int log_to_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);

    if (fd < 0)
        return -errno;
    fflush(stderr);
    int rc = dup2(fd, 2) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return LOG_WARN;
    return -1;
}

static void vlog(const char *label, const char *subsys, const char *fmt, va_list ap)
{
    char line[1024], stamp[32];
    struct timeval tv;
    struct tm tm;
    int n;

    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    n = snprintf(line, sizeof(line), "%s.%03ld %s[%d] %s %s: ", stamp, (long)tv.tv_usec / 1000,
                 log_who, (int)getpid(), label, subsys);
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    /* One write per line so that lines of concurrent processes do not interleave. */
    fprintf(stderr, "%s\n", line);
}

void log_msg(int level, const char *subsys, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vlog(level_names[level], subsys, fmt, ap);
    va_end(ap);
}

void log_notice(const char *subsys, const char *fmt, ...)
{
    va_list ap;

    if (log_level_cur < LOG_WARN)
        return;
    va_start(ap, fmt);
    vlog("NOTICE", subsys, fmt, ap);
    va_end(ap);
}
