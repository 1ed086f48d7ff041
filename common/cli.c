#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HCCLD_VERSION
#define HCCLD_VERSION "unknown"
#endif

void cli_version(const char *prog)
{
    printf("%s (hcclD) %s\n", prog, HCCLD_VERSION);
}

int cli_bad(const char *prog, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", prog);
    return 2;
}

/* Optimal string alignment distance (an adjacent swap counts one), capped at 9. */
static unsigned distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned d[24][24];

    if (la > 22 || lb > 22)
        return 9;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (unsigned)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            unsigned sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            unsigned del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            unsigned best = sub < del ? sub : del;
            best = best < ins ? best : ins;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb] < 9 ? d[la][lb] : 9;
}

const char *cli_nearest(const char *s, const char *const *words)
{
    const char *best = NULL, *prefix = NULL;
    unsigned bd = 9, nprefix = 0, cap = strlen(s) < 5 ? 1 : 2;

    for (size_t i = 0; words[i] != NULL; i++) {
        unsigned d = distance(s, words[i]);
        if (d < bd) {
            bd = d;
            best = words[i];
        }
        if (*s != '\0' && strncmp(words[i], s, strlen(s)) == 0) {
            prefix = words[i];
            nprefix++;
        }
    }
    if (best != NULL && bd <= cap)
        return best;
    return nprefix == 1 ? prefix : NULL;
}

/* The long option of lo that arg ("--name" or "--name=value") names, or NULL. */
static const struct option *long_of(const char *arg, const struct option *lo)
{
    size_t len = strcspn(arg + 2, "=");

    for (size_t i = 0; lo != NULL && lo[i].name != NULL; i++)
        if (strlen(lo[i].name) == len && strncmp(arg + 2, lo[i].name, len) == 0)
            return &lo[i];
    return NULL;
}

int cli_bad_option(const char *prog, const char *what, char **argv, const char *shorts,
                   const struct option *lo)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "", *w = what ? what : "",
               *sep = what ? ": " : "";
    const char *names[64];
    size_t n = 0;

    if (strncmp(arg, "--", 2) == 0 && arg[2] != '\0') {
        const struct option *o = long_of(arg, lo);
        if (o != NULL)
            return cli_bad(prog, "%s%s--%s needs a value", w, sep, o->name);
        for (size_t i = 0; lo != NULL && lo[i].name != NULL && n + 1 < 64; i++)
            names[n++] = lo[i].name;
        names[n] = NULL;
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
        const char *near = cli_nearest(name, names);
        if (near != NULL)
            return cli_bad(prog, "%s%sunknown option --%s (did you mean --%s?)", w, sep, name,
                           near);
        return cli_bad(prog, "%s%sunknown option --%s", w, sep, name);
    }
    if (optopt != 0 && shorts != NULL && strchr(shorts, optopt) != NULL && optopt != ':')
        return cli_bad(prog, "%s%s-%c needs a value", w, sep, optopt);
    return cli_bad(prog, "%s%sunknown option -%c", w, sep, optopt ? optopt : '?');
}
