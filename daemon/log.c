/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <systemd/sd-journal.h>

#include "log.h"
#include "name-table.h"

static int max_level = LOG_INFO;
static int to_journal;

static const char *const level_names[] = { "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug" };

/* systemd sets $JOURNAL_STREAM to the device and inode of the stream it connected to
 * stderr; if they still match, our stderr goes to the journal and native fields can be used. */
static int stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;
        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
                return 0;
        return (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino;
}

void log_setup(void) {
        to_journal = stderr_is_journal();
}

void log_set_max_level(int level) {
        max_level = level;
}

int log_level_from_string(const char *s) {
        int level = name_table_find(level_names, NAME_TABLE_SIZE(level_names), s);
        return level < 0 ? -1 : level;
}

const char *log_level_to_string(int level) {
        return level < 0 ? NULL : name_table_name(level_names, NAME_TABLE_SIZE(level_names), (unsigned) level);
}

int log_internal(int level, int error, const char *request_id, const char *file, int line, const char *func,
                 const char *format, ...) {
        if (error < 0)
                error = -error;
        if (level > max_level)
                return -error;
        char message[2048];
        va_list ap;
        va_start(ap, format);
        int n = vsnprintf(message, sizeof(message), format, ap);
        va_end(ap);
        if (error && n >= 0 && (size_t) n < sizeof(message))
                snprintf(message + n, sizeof(message) - (size_t) n, ": %s", strerror(error));
        if (to_journal) {
                char fields[7][2200];
                struct iovec iov[7];
                int k = 0;
                snprintf(fields[k++], sizeof(fields[0]), "MESSAGE=%s", message);
                snprintf(fields[k++], sizeof(fields[0]), "PRIORITY=%d", level);
                snprintf(fields[k++], sizeof(fields[0]), "CODE_FILE=%s", file);
                snprintf(fields[k++], sizeof(fields[0]), "CODE_LINE=%d", line);
                snprintf(fields[k++], sizeof(fields[0]), "CODE_FUNC=%s", func);
                if (request_id)
                        snprintf(fields[k++], sizeof(fields[0]), "REQUEST_ID=%s", request_id);
                if (error)
                        snprintf(fields[k++], sizeof(fields[0]), "ERRNO=%d", error);
                for (int i = 0; i < k; i++)
                        iov[i] = (struct iovec) { fields[i], strlen(fields[i]) };
                sd_journal_sendv(iov, k);
        } else if (request_id)
                fprintf(stderr, "asyncllmd: [%s] %s\n", request_id, message);
        else
                fprintf(stderr, "asyncllmd: %s\n", message);
        return -error;
}
