/* util.c - the helpers every subcommand uses (declared in cli.h): usage and failure messages with
 * their exit statuses, a readable-file check, byte counts for people, a monotonic clock, the peak
 * resident set size, JSON string literals and reading a whole file. Nothing here knows a
 * subcommand. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("strata: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see strata --help)\n", stderr);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("strata: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

int cli_check_readable(const char *path) {
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "strata: cannot open '%s': %s\n", path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    return 0;
}

const char *cli_human_bytes(double n, char *buf, size_t size) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (n >= 1024.0 && u < 4) { n /= 1024.0; u++; }
    if (u == 0) snprintf(buf, size, "%.0f B", n);
    else snprintf(buf, size, "%.2f %s", n, units[u]);
    return buf;
}

double cli_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

uint64_t cli_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

void cli_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "strata: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *b2 = realloc(buf, cap * 2 + 1);
        if (!b2) { free(buf); buf = NULL; break; }
        buf = b2;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        fprintf(stderr, "strata: cannot read '%s'%s\n", path, buf ? "" : ": out of memory");
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}
