/* power_cut shim: an LD_PRELOAD library that records, for the power-cut model
 * (tests/faults/power_cut/model.py), every call that decides what a power cut keeps
 * under one directory tree.
 *
 * Environment (all three needed, else the shim only passes calls through):
 *   MPBROKER_POWER_CUT_ROOT    the tree to watch (an absolute, resolved path)
 *   MPBROKER_POWER_CUT_EVENTS  the event log: one line per event, appended
 *   MPBROKER_POWER_CUT_STASH   a directory on the same filesystem, outside the root
 * Optional:
 *   MPBROKER_POWER_CUT_SYNC_DELAY_US  each sync under the root takes this much longer
 *                              (a slow disk: more is appended, rolled and created while
 *                              a sync runs); the delay comes after the size or listing
 *                              was noted, so nothing written during it is covered
 *
 * Events (tab-separated; <pid> is the caller's, for reading the log by eye):
 *   F <pid> <ino> <size> <path>             fsync/fdatasync of a regular file; size
 *                                           taken before the call (bytes appended
 *                                           during it are not covered)
 *   D <pid> <ino> <path> [<name>/<ino>]...  fsync/fdatasync of a directory, with its
 *                                           entries listed before the call
 *   T <pid> <ino> <size> <path>             ftruncate/truncate, or an open with O_TRUNC
 *   R <pid> <ino> <replaced ino|0> <from> <to>   rename; a replaced target was first
 *                                           hard-linked to <stash>/<ino>
 *   U <pid> <ino> <links before> <path>     unlink of a non-directory
 *   W <pid> <what> <path>                   something the model cannot represent
 *                                           (sync, syncfs, O_SYNC/O_DSYNC opens)
 * A sync, truncate, rename or unlink is logged after the real call succeeded (a
 * failed one covers nothing), by the thread that made it, before it returns.
 *
 * Each line goes out in one write() to a file opened with O_APPEND, so lines of
 * concurrent threads and processes never interleave. The hooks use system calls
 * only: no stdio, no locks, no malloc (a long directory listing grows into mmap'ed
 * memory), so a hook in a forked child or on any thread cannot deadlock. The real
 * functions are looked up once, when the library is loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* --- configuration -------------------------------------------------------------- */

static char watched_root[PATH_MAX];
static size_t watched_root_length;
static char events_path[PATH_MAX];
static char stash_path[PATH_MAX];
static int recording;
static struct timespec sync_delay;

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_truncate64)(const char *, off_t);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_creat)(const char *, mode_t);
static int (*real_creat64)(const char *, mode_t);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static void (*real_sync)(void);
static int (*real_syncfs)(int);

static int copy_environment(const char *name, char *out, size_t size) {
    const char *value = getenv(name);
    if (value == NULL || value[0] == '\0' || strlen(value) >= size)
        return 0;
    strcpy(out, value);
    return 1;
}

#define REAL(name) real_##name = dlsym(RTLD_NEXT, #name)

static void load(void);

/* Every hook starts with this: a call made before the constructor ran (from another
 * library's constructor) loads the configuration itself. */
#define LOADED() do { if (real_fsync == NULL) load(); } while (0)

__attribute__((constructor)) static void load(void) {
    if (real_fsync != NULL)
        return;
    REAL(fsync); REAL(fdatasync); REAL(ftruncate); REAL(ftruncate64); REAL(truncate); REAL(truncate64);
    REAL(open); REAL(open64); REAL(openat); REAL(openat64); REAL(creat); REAL(creat64);
    REAL(rename); REAL(renameat); REAL(renameat2); REAL(unlink); REAL(unlinkat);
    REAL(sync); REAL(syncfs);
    recording = copy_environment("MPBROKER_POWER_CUT_ROOT", watched_root, sizeof watched_root)
        && copy_environment("MPBROKER_POWER_CUT_EVENTS", events_path, sizeof events_path)
        && copy_environment("MPBROKER_POWER_CUT_STASH", stash_path, sizeof stash_path);
    watched_root_length = strlen(watched_root);
    while (watched_root_length > 1 && watched_root[watched_root_length - 1] == '/')
        watched_root[--watched_root_length] = '\0';
    const char *delay = getenv("MPBROKER_POWER_CUT_SYNC_DELAY_US");
    long microseconds = delay ? strtol(delay, NULL, 10) : 0;
    if (microseconds > 0) {
        sync_delay.tv_sec = microseconds / 1000000;
        sync_delay.tv_nsec = (microseconds % 1000000) * 1000;
    }
}

/* --- one event line, built without malloc ---------------------------------------- */

struct line {
    char *data;
    size_t length, capacity;
    int mapped;      /* data lives in an mmap'ed block */
    int dropped;     /* not to be written: a growth failed (never write a short line), the
                        listing could not be taken, or the sync failed */
    char inline_buffer[4096];
};

static void line_start(struct line *line, char kind) {
    line->data = line->inline_buffer;
    line->length = 0;
    line->capacity = sizeof line->inline_buffer;
    line->mapped = 0;
    line->dropped = 0;
    line->data[line->length++] = kind;
}

static int line_reserve(struct line *line, size_t extra) {
    if (line->dropped)
        return 0;
    if (line->length + extra <= line->capacity)
        return 1;
    size_t capacity = line->capacity * 2;
    while (capacity < line->length + extra)
        capacity *= 2;
    void *grown = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (grown == MAP_FAILED) {
        line->dropped = 1;
        return 0;
    }
    memcpy(grown, line->data, line->length);
    if (line->mapped)
        munmap(line->data, line->capacity);
    line->data = grown;
    line->capacity = capacity;
    line->mapped = 1;
    return 1;
}

static void line_bytes(struct line *line, const char *bytes, size_t count) {
    if (line_reserve(line, count)) {
        memcpy(line->data + line->length, bytes, count);
        line->length += count;
    }
}

static void line_text(struct line *line, const char *text) {
    line_bytes(line, text, strlen(text));
}

static void line_char(struct line *line, char c) {
    line_bytes(line, &c, 1);
}

/* Writes ``value`` in decimal at ``out`` (room for 21 bytes), NUL-terminated; returns its length. */
static size_t decimal(uint64_t value, char *out) {
    char digits[24];
    size_t at = sizeof digits;
    do {
        digits[--at] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    size_t length = sizeof digits - at;
    memcpy(out, digits + at, length);
    out[length] = '\0';
    return length;
}

static void line_number(struct line *line, uint64_t value) {
    char digits[24];
    line_bytes(line, digits, decimal(value, digits));
}

static void line_field_text(struct line *line, const char *text) {
    line_char(line, '\t');
    line_text(line, text);
}

static void line_field_number(struct line *line, uint64_t value) {
    line_char(line, '\t');
    line_number(line, value);
}

static void line_finish(struct line *line) {
    line_char(line, '\n');
    if (!line->dropped) {
        int fd = (int)syscall(SYS_openat, AT_FDCWD, events_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            (void)!write(fd, line->data, line->length);
            close(fd);
        }
    }
    if (line->mapped)
        munmap(line->data, line->capacity);
}

/* --- paths ----------------------------------------------------------------------- */

static int under_root(const char *path) {
    return strncmp(path, watched_root, watched_root_length) == 0
        && (path[watched_root_length] == '\0' || path[watched_root_length] == '/');
}

/* The path an open fd refers to; 0 if unknown. */
static int fd_path(int fd, char *out, size_t size) {
    char link[48] = "/proc/self/fd/";
    decimal((uint64_t)fd, link + strlen(link));
    ssize_t length = syscall(SYS_readlinkat, AT_FDCWD, link, out, size - 1);
    if (length <= 0)
        return 0;
    out[length] = '\0';
    return 1;
}

/* The absolute path of ``path`` relative to ``dirfd``, its last component not
 * followed (it may not exist); 0 if its directory cannot be resolved. */
static int resolve_at(int dirfd, const char *path, char *out, size_t size) {
    char directory[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if (slash == NULL) {
        strcpy(directory, ".");
    } else if (slash == path) {
        strcpy(directory, "/");
    } else {
        size_t length = (size_t)(slash - path);
        if (length >= sizeof directory)
            return 0;
        memcpy(directory, path, length);
        directory[length] = '\0';
    }
    int fd = (int)syscall(SYS_openat, dirfd, directory, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int found = fd_path(fd, out, size);
    close(fd);
    if (!found)
        return 0;
    size_t length = strlen(out);
    if (name[0] == '\0')
        return 1;
    if (length + 1 + strlen(name) + 1 > size)
        return 0;
    if (length > 1)
        out[length++] = '/';
    strcpy(out + length, name);
    return 1;
}

/* --- events ---------------------------------------------------------------------- */

static void record_unsupported(const char *what, const char *path) {
    struct line line;
    line_start(&line, 'W');
    line_field_number(&line, (uint64_t)getpid());
    line_field_text(&line, what);
    line_field_text(&line, path);
    line_finish(&line);
}

/* What a sync of ``fd`` is about to cover, or kind 0 if nothing under the root. */
struct sync_note {
    char kind;  /* 'F', 'D' or 0 */
    struct stat status;
    char path[PATH_MAX];
};

static void note_before_sync(int fd, struct sync_note *note) {
    note->kind = 0;
    if (!recording || fstat(fd, &note->status) != 0 || !fd_path(fd, note->path, sizeof note->path)
        || !under_root(note->path))
        return;
    if (S_ISREG(note->status.st_mode))
        note->kind = 'F';
    else if (S_ISDIR(note->status.st_mode))
        note->kind = 'D';
}

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Appends "\t<name>/<ino>" for each entry of the directory open as ``fd``; the inode
 * is lstat's (what the model compares with), an entry gone meanwhile is left out. */
static void list_directory(struct line *line, int fd) {
    int listing = (int)syscall(SYS_openat, fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (listing < 0) {
        line->dropped = 1;  /* a listing we cannot take must not read as "empty" */
        return;
    }
    char buffer[4096] __attribute__((aligned(8)));
    for (;;) {
        long count = syscall(SYS_getdents64, listing, buffer, sizeof buffer);
        if (count < 0)
            line->dropped = 1;
        if (count <= 0)
            break;
        for (long at = 0; at < count;) {
            struct linux_dirent64 *entry = (struct linux_dirent64 *)(buffer + at);
            at += entry->d_reclen;
            if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
                continue;
            struct stat status;
            if (fstatat(listing, entry->d_name, &status, AT_SYMLINK_NOFOLLOW) != 0)
                continue;
            line_field_text(line, entry->d_name);
            line_char(line, '/');
            line_number(line, (uint64_t)status.st_ino);
        }
    }
    close(listing);
}

/* Builds the event line before the sync (the listing must be of that moment); it is
 * written only once the sync succeeded. */
static void start_sync_line(struct line *line, int fd, const struct sync_note *note) {
    line_start(line, note->kind);
    line_field_number(line, (uint64_t)getpid());
    line_field_number(line, (uint64_t)note->status.st_ino);
    if (note->kind == 'F') {
        line_field_number(line, (uint64_t)note->status.st_size);
        line_field_text(line, note->path);
    } else {
        line_field_text(line, note->path);
        list_directory(line, fd);
    }
}

static int synced(int (*real)(int), int fd) {
    struct sync_note note;
    struct line line;
    note_before_sync(fd, &note);
    if (note.kind) {
        start_sync_line(&line, fd, &note);
        if (sync_delay.tv_sec || sync_delay.tv_nsec)
            nanosleep(&sync_delay, NULL);
    }
    int result = real(fd);
    int saved = errno;
    if (note.kind) {
        if (result != 0)
            line.dropped = 1;  /* a failed sync covers nothing */
        line_finish(&line);
    }
    errno = saved;
    return result;
}

static void record_truncated_fd(int fd, off_t size) {
    struct stat status;
    char path[PATH_MAX];
    if (!recording || fstat(fd, &status) != 0 || !S_ISREG(status.st_mode) || !fd_path(fd, path, sizeof path)
        || !under_root(path))
        return;
    struct line line;
    line_start(&line, 'T');
    line_field_number(&line, (uint64_t)getpid());
    line_field_number(&line, (uint64_t)status.st_ino);
    line_field_number(&line, (uint64_t)size);
    line_field_text(&line, path);
    line_finish(&line);
}

static void after_open(int fd, int flags) {
    if (!recording || fd < 0)
        return;
    int truncating = (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY;
    int synchronous = (flags & O_DSYNC) != 0;  /* O_SYNC includes O_DSYNC's bit */
    if (!truncating && !synchronous)
        return;
    int saved = errno;
    if (truncating)
        record_truncated_fd(fd, 0);
    char path[PATH_MAX];
    if (synchronous && fd_path(fd, path, sizeof path) && under_root(path))
        record_unsupported("O_SYNC/O_DSYNC open", path);
    errno = saved;
}

/* Before a rename onto ``to_path`` (resolved, under the root): if a non-directory is
 * there, hard-link it to <stash>/<ino> so the model can put it back; its inode, or 0. */
static uint64_t stash_target(const char *to_path) {
    struct stat status;
    if (fstatat(AT_FDCWD, to_path, &status, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(status.st_mode))
        return 0;
    char stashed[PATH_MAX];
    size_t length = strlen(stash_path);
    if (length + 2 + 21 > sizeof stashed)
        return 0;
    memcpy(stashed, stash_path, length);
    stashed[length++] = '/';
    decimal((uint64_t)status.st_ino, stashed + length);
    if (syscall(SYS_linkat, AT_FDCWD, to_path, AT_FDCWD, stashed, 0) != 0 && errno != EEXIST)
        return 0;
    return (uint64_t)status.st_ino;
}

static int renamed(int from_dirfd, const char *from, int to_dirfd, const char *to, unsigned int flags,
                   int (*call)(int, const char *, int, const char *, unsigned int)) {
    char from_path[PATH_MAX] = "?", to_path[PATH_MAX] = "?";
    uint64_t moved = 0, replaced = 0;
    int watched = 0;
    if (recording) {
        int saved = errno;
        struct stat status;
        if (resolve_at(from_dirfd, from, from_path, sizeof from_path)) {
            watched = under_root(from_path);
            if (fstatat(AT_FDCWD, from_path, &status, AT_SYMLINK_NOFOLLOW) == 0)
                moved = (uint64_t)status.st_ino;
        }
        if (resolve_at(to_dirfd, to, to_path, sizeof to_path) && under_root(to_path)) {
            watched = 1;
            if (flags & RENAME_EXCHANGE)
                record_unsupported("renameat2 RENAME_EXCHANGE", to_path);
            else if (!(flags & RENAME_NOREPLACE))
                replaced = stash_target(to_path);
        }
        errno = saved;
    }
    int result = call(from_dirfd, from, to_dirfd, to, flags);
    int saved = errno;
    if (result == 0 && watched) {
        struct line line;
        line_start(&line, 'R');
        line_field_number(&line, (uint64_t)getpid());
        line_field_number(&line, moved);
        line_field_number(&line, replaced);
        line_field_text(&line, from_path);
        line_field_text(&line, to_path);
        line_finish(&line);
    }
    errno = saved;
    return result;
}

static int unlinked(int dirfd, const char *path, int flags, int (*call)(int, const char *, int)) {
    char resolved[PATH_MAX];
    struct stat status;
    int watched = 0;
    if (recording && !(flags & AT_REMOVEDIR)) {
        int saved = errno;
        watched = resolve_at(dirfd, path, resolved, sizeof resolved) && under_root(resolved)
            && fstatat(AT_FDCWD, resolved, &status, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(status.st_mode);
        errno = saved;
    }
    int result = call(dirfd, path, flags);
    int saved = errno;
    if (result == 0 && watched) {
        struct line line;
        line_start(&line, 'U');
        line_field_number(&line, (uint64_t)getpid());
        line_field_number(&line, (uint64_t)status.st_ino);
        line_field_number(&line, (uint64_t)status.st_nlink);
        line_field_text(&line, resolved);
        line_finish(&line);
    }
    errno = saved;
    return result;
}

/* --- the intercepted functions ---------------------------------------------------- */

int fsync(int fd) {
    LOADED();
    return synced(real_fsync, fd);
}

int fdatasync(int fd) {
    LOADED();
    return synced(real_fdatasync, fd);
}

static int truncated_fd(int (*real)(int, off_t), int fd, off_t size) {
    int result = real(fd, size);
    int saved = errno;
    if (result == 0)
        record_truncated_fd(fd, size);
    errno = saved;
    return result;
}

int ftruncate(int fd, off_t size) {
    LOADED();
    return truncated_fd(real_ftruncate, fd, size);
}

int ftruncate64(int fd, off_t size) {
    LOADED();
    return truncated_fd(real_ftruncate64, fd, size);
}

static int truncated_path(int (*real)(const char *, off_t), const char *path, off_t size) {
    int result = real(path, size);
    int saved = errno;
    if (result == 0 && recording) {
        int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd >= 0) {
            record_truncated_fd(fd, size);
            close(fd);
        }
    }
    errno = saved;
    return result;
}

int truncate(const char *path, off_t size) {
    LOADED();
    return truncated_path(real_truncate, path, size);
}

int truncate64(const char *path, off_t size) {
    LOADED();
    return truncated_path(real_truncate64, path, size);
}

static mode_t mode_argument(int flags, va_list arguments) {
    return ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? (mode_t)va_arg(arguments, int) : 0;
}

int open(const char *path, int flags, ...) {
    LOADED();
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = mode_argument(flags, arguments);
    va_end(arguments);
    int fd = real_open(path, flags, mode);
    after_open(fd, flags);
    return fd;
}

int open64(const char *path, int flags, ...) {
    LOADED();
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = mode_argument(flags, arguments);
    va_end(arguments);
    int fd = real_open64(path, flags, mode);
    after_open(fd, flags);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    LOADED();
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = mode_argument(flags, arguments);
    va_end(arguments);
    int fd = real_openat(dirfd, path, flags, mode);
    after_open(fd, flags);
    return fd;
}

int openat64(int dirfd, const char *path, int flags, ...) {
    LOADED();
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = mode_argument(flags, arguments);
    va_end(arguments);
    int fd = real_openat64(dirfd, path, flags, mode);
    after_open(fd, flags);
    return fd;
}

int creat(const char *path, mode_t mode) {
    LOADED();
    int fd = real_creat(path, mode);
    after_open(fd, O_WRONLY | O_CREAT | O_TRUNC);
    return fd;
}

int creat64(const char *path, mode_t mode) {
    LOADED();
    int fd = real_creat64(path, mode);
    after_open(fd, O_WRONLY | O_CREAT | O_TRUNC);
    return fd;
}

static int call_rename(int from_dirfd, const char *from, int to_dirfd, const char *to, unsigned int flags) {
    (void)from_dirfd; (void)to_dirfd; (void)flags;
    return real_rename(from, to);
}

static int call_renameat(int from_dirfd, const char *from, int to_dirfd, const char *to, unsigned int flags) {
    (void)flags;
    return real_renameat(from_dirfd, from, to_dirfd, to);
}

static int call_renameat2(int from_dirfd, const char *from, int to_dirfd, const char *to, unsigned int flags) {
    return real_renameat2(from_dirfd, from, to_dirfd, to, flags);
}

int rename(const char *from, const char *to) {
    LOADED();
    return renamed(AT_FDCWD, from, AT_FDCWD, to, 0, call_rename);
}

int renameat(int from_dirfd, const char *from, int to_dirfd, const char *to) {
    LOADED();
    return renamed(from_dirfd, from, to_dirfd, to, 0, call_renameat);
}

int renameat2(int from_dirfd, const char *from, int to_dirfd, const char *to, unsigned int flags) {
    LOADED();
    return renamed(from_dirfd, from, to_dirfd, to, flags, call_renameat2);
}

static int call_unlink(int dirfd, const char *path, int flags) {
    (void)dirfd; (void)flags;
    return real_unlink(path);
}

int unlink(const char *path) {
    LOADED();
    return unlinked(AT_FDCWD, path, 0, call_unlink);
}

int unlinkat(int dirfd, const char *path, int flags) {
    LOADED();
    return unlinked(dirfd, path, flags, real_unlinkat);
}

void sync(void) {
    LOADED();
    if (recording)
        record_unsupported("sync", "/");
    real_sync();
}

int syncfs(int fd) {
    LOADED();
    char path[PATH_MAX];
    if (recording && fd_path(fd, path, sizeof path) && under_root(path))
        record_unsupported("syncfs", path);
    return real_syncfs(fd);
}
