/*
 * Logging in NCCL's manner: one line per event, with level, subsystem and who logs, written once
 * where the problem is detected and naming the failed call and errno.
 */
#ifndef HCCLD_COMMON_LOG_H
#define HCCLD_COMMON_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int log_level_cur;

/* who: "hccld", "rank 3", "hccl-run" ... */
void log_init(const char *who, int level);
void log_set_who(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "error", "WARN", "info", "debug" (any case); -1 if unknown. */
int log_level_parse(const char *s);
void log_msg(int level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sends the log (stderr, fd 2) to the file at path, appended to, from now on: at start and to
 * reopen it after a rotation. 0, or -errno (the log stays where it was). */
int log_to_file(const char *path);

/* A line every log level but error shows, the default (warn) included: the daemon's "ready",
 * as redis says it is. */
void log_notice(const char *subsys, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_AT(lvl, sub, ...)                                                                      \
    do {                                                                                           \
        if (log_level_cur >= (lvl))                                                                \
            log_msg((lvl), (sub), __VA_ARGS__);                                                    \
    } while (0)
#define ERR(sub, ...) LOG_AT(LOG_ERROR, sub, __VA_ARGS__)
#define WARN(sub, ...) LOG_AT(LOG_WARN, sub, __VA_ARGS__)
#define INFO(sub, ...) LOG_AT(LOG_INFO, sub, __VA_ARGS__)
#define DBG(sub, ...) LOG_AT(LOG_DEBUG, sub, __VA_ARGS__)

#endif /* HCCLD_COMMON_LOG_H */
