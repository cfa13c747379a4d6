/* Sleeps on the monotonic clock, straight to the kernel, for processes run under
 * libfaketime with FAKETIME_DONT_FAKE_MONOTONIC (see clock.py).
 *
 * libfaketime 0.9.10 (Debian's) wraps clock_nanosleep and, for an absolute deadline on
 * CLOCK_MONOTONIC, shifts it by the faked offset even when the monotonic clock is not
 * faked: the kernel gets a negative time and says EINVAL (libfaketime issue 426).
 * Python 3.11 sleeps that way (time.sleep is clock_nanosleep(CLOCK_MONOTONIC,
 * TIMER_ABSTIME)), so every time.sleep of a broker under it failed. Preloaded before
 * libfaketime, this clock_nanosleep passes the monotonic clocks, which are not faked,
 * to the kernel untouched, and every other clock to the next definition (libfaketime's).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_nanosleep_function)(clockid_t, int, const struct timespec *, struct timespec *);

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *request, struct timespec *remain) {
    if (clock == CLOCK_MONOTONIC || clock == CLOCK_MONOTONIC_RAW || clock == CLOCK_BOOTTIME) {
        if (syscall(SYS_clock_nanosleep, clock, flags, request, remain) == -1)
            return errno;
        return 0;
    }
    static clock_nanosleep_function next;
    if (next == NULL)
        next = (clock_nanosleep_function)dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock, flags, request, remain);
}
