/* Puts the wall clock of a process ahead: preloaded (LD_PRELOAD) by the local sandbox's
 * workers, and by the programs that the runs of LocalSandbox.clock_ahead(seconds) start
 * (see gym_repost/sandbox/clock.py, which compiles it).
 *
 * Only reads of the wall clock change: clock_gettime() of CLOCK_REALTIME and its coarse and
 * TAI variants, gettimeofday(), time() and timespec_get(). The monotonic and CPU clocks,
 * sleeps, timeouts, timers and file times stay as they are, so a run takes as long as it
 * would and its timeout is the same.
 *
 * The offset, in nanoseconds, is gym_repost_clock_ahead_ns: read from the environment
 * variable GYM_REPOST_CLOCK_AHEAD_NS when the library is loaded (none or not a positive
 * number: 0, the clock as it is), and set by a warm worker's run child that asks for its
 * clock ahead (the worker was started long before, with the offset 0). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

#define NS_PER_S 1000000000LL

struct clock_ahead_timeval { /* struct timeval, without <sys/time.h>'s prototypes */
    time_t tv_sec;
    long tv_usec;
};

__attribute__((visibility("default"))) volatile long long gym_repost_clock_ahead_ns = 0;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

__attribute__((constructor)) static void clock_ahead_init(void) {
    const char *value = getenv("GYM_REPOST_CLOCK_AHEAD_NS");
    char *end = NULL;
    long long parsed = value ? strtoll(value, &end, 10) : 0;
    gym_repost_clock_ahead_ns = (value && end && *end == '\0' && parsed > 0) ? parsed : 0;
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
}

static int is_wall_clock(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (real_clock_gettime == NULL) {
        clock_ahead_init();
    }
    int result = real_clock_gettime(clock, ts);
    long long ahead = gym_repost_clock_ahead_ns;
    if (result == 0 && ahead > 0 && is_wall_clock(clock)) {
        long long ns = (long long)ts->tv_nsec + ahead % NS_PER_S;
        ts->tv_sec += (time_t)(ahead / NS_PER_S + ns / NS_PER_S);
        ts->tv_nsec = (long)(ns % NS_PER_S);
    }
    return result;
}

int gettimeofday(struct clock_ahead_timeval *tv, void *tz) {
    struct timespec now;
    if (tz != NULL) { /* struct timezone: obsolete, zeros as glibc gives */
        ((int *)tz)[0] = 0;
        ((int *)tz)[1] = 0;
    }
    if (tv == NULL) {
        return 0;
    }
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
        return -1;
    }
    tv->tv_sec = now.tv_sec;
    tv->tv_usec = now.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = now.tv_sec;
    }
    return now.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0) {
        return 0;
    }
    return base;
}
