/* A device table for fake vendor libraries, read from a text file the test writes.
 *
 * Why a file named by an environment variable: the test decides the devices, their health
 * and their readings, and can change them between two calls (a health flip) by rewriting
 * the file; the fake re-reads it at every call, so no setter functions are needed.
 *
 * Format, one record per line, `#` starts a comment:
 *   global key=value key=value ...      library-wide settings (e.g. init=9 to fail init)
 *   device key=value key=value ...      one device, in index order
 * Values have no spaces. Missing keys take the default the accessor is given.
 */
#ifndef FAKE_TABLE_H
#define FAKE_TABLE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX_DEVICES 16
#define FAKE_MAX_KEYS 40

typedef struct {
    int n;
    char key[FAKE_MAX_KEYS][48];
    char val[FAKE_MAX_KEYS][128];
} fake_row;

static fake_row fake_global_row;
static fake_row fake_devices[FAKE_MAX_DEVICES];
static int fake_device_count;

static void fake_parse_row(fake_row *row, char *rest) {
    row->n = 0;
    for (char *tok = strtok(rest, " \t\r\n"); tok && row->n < FAKE_MAX_KEYS;
         tok = strtok(NULL, " \t\r\n")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = '\0';
        snprintf(row->key[row->n], sizeof row->key[0], "%s", tok);
        snprintf(row->val[row->n], sizeof row->val[0], "%s", eq + 1);
        row->n++;
    }
}

/* Re-read the table named by the environment variable `env`; no file: no devices. */
static void fake_load(const char *env) {
    char line[4096];
    memset(&fake_global_row, 0, sizeof fake_global_row);
    fake_device_count = 0;
    const char *path = getenv(env);
    if (!path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "global ", 7) == 0) {
            fake_parse_row(&fake_global_row, line + 7);
        } else if (strncmp(line, "device ", 7) == 0 && fake_device_count < FAKE_MAX_DEVICES) {
            fake_parse_row(&fake_devices[fake_device_count++], line + 7);
        }
    }
    fclose(f);
}

static const char *fake_str(const fake_row *row, const char *key, const char *dflt) {
    for (int i = 0; i < row->n; i++)
        if (strcmp(row->key[i], key) == 0) return row->val[i];
    return dflt;
}

static long long fake_int(const fake_row *row, const char *key, long long dflt) {
    const char *v = fake_str(row, key, NULL);
    return v ? strtoll(v, NULL, 0) : dflt;
}

static const fake_row *fake_device(long long index) {
    if (index < 0 || index >= fake_device_count) return NULL;
    return &fake_devices[index];
}

/* Copy a string into a caller's buffer of `len` bytes, always terminated. */
static void fake_copy(char *dst, size_t len, const char *src) {
    if (len == 0) return;
    snprintf(dst, len, "%s", src);
}

#endif
