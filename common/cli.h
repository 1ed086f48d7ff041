/* What every tool's command line does alike: --version, one-line refusals that name the input
 * and the fix (then a pointer to --help, never the whole usage), and the nearest known word for
 * a typo, as git does. */
#ifndef HCCLD_COMMON_CLI_H
#define HCCLD_COMMON_CLI_H

#include <getopt.h>

/* Prints "PROG (hcclD) VERSION" to stdout. */
void cli_version(const char *prog);
/* Prints "PROG: <fmt...>" and "Try 'PROG --help'." to stderr; returns 2 (usage). */
int cli_bad(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The word of words (NULL-terminated) nearest to s, within an edit or two (or s a prefix of
 * exactly one); NULL when none is that near. */
const char *cli_nearest(const char *s, const char *const *words);
/* After getopt_long (opterr = 0) returned '?' or ':' on argv: the refusal of the option it
 * stopped at (shorts and lo: the options getopt_long was given), naming the nearest of lo's
 * long options for an unknown one; returns 2. what names the command ("comms"), or NULL for
 * the tool itself. */
int cli_bad_option(const char *prog, const char *what, char **argv, const char *shorts,
                   const struct option *lo);

#endif
