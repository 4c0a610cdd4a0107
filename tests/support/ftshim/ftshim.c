/* ftshim: lets Debian's libfaketime 0.9.10 work with jemalloc-linked programs
 * such as Debian's redis-server 7.0.15 (which otherwise hangs at start-up).
 *
 * Root cause (libfaketime issue #130): jemalloc, while initialising under its
 * init mutex, calls clock_gettime() and pthread_cond_init(); both are
 * interposed by libfaketime, which then initialises lazily *inside* jemalloc's
 * init and calls malloc (failed dlsym() error strings, sem_open() for
 * FAKETIME_SHARED ...) -> re-enters jemalloc -> self-deadlock on a futex.
 *
 * Fix: preload this object BEFORE libfaketime.  Until our constructor has run
 * (by which time jemalloc has been initialised by earlier constructors, and we
 * force it with malloc() anyway) clock_gettime() goes to the raw syscall and
 * pthread_cond_init(c, NULL) is done by zero-initialisation
 * (== PTHREAD_COND_INITIALIZER in glibc).  The constructor then forces
 * libfaketime to initialise outside any allocator lock and hands both
 * functions over to the next definitions (libfaketime's).
 *
 * Build: gcc -shared -fPIC -O2 -o ftshim.so ftshim.c -ldl
 * Use:   LD_PRELOAD="$PWD/ftshim.so /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1" \
 *        FAKETIME="+30s" FAKETIME_DONT_FAKE_MONOTONIC=1 redis-server ...
 *   or:  LD_PRELOAD="$PWD/ftshim.so" faketime -f '+30s' redis-server ...
 * (ftshim.so must come first in LD_PRELOAD, before libfaketime.)
 *
 * xdcr-agent: copied unchanged (this comment aside) from the team's research tools
 * (tools/ftshim, see docs: redis-replication-notes §10.2) so that the clock-skew tests can run a
 * real redis-server with a skewed clock; built as the CMake target xdcr_ftshim and preloaded by
 * tests/support/faketime.cc. Test use only: never preload it into production processes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static int (*next_clock_gettime)(clockid_t, struct timespec *);
static int (*next_cond_init)(pthread_cond_t *, const pthread_condattr_t *);
static volatile int ready;

int clock_gettime(clockid_t clk, struct timespec *ts) {
    if (!ready)
        return (int)syscall(SYS_clock_gettime, clk, ts);
    return next_clock_gettime(clk, ts);
}

int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a) {
    if (!ready) {
        if (a != NULL) return ENOTSUP;      /* not seen during early init */
        memset(c, 0, sizeof *c);            /* == PTHREAD_COND_INITIALIZER */
        return 0;
    }
    return next_cond_init(c, a);
}

__attribute__((constructor)) static void ftshim_init(void) {
    free(malloc(16));                                   /* allocator initialised */
    next_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    next_cond_init = dlvsym(RTLD_NEXT, "pthread_cond_init", "GLIBC_2.3.2");
    if (!next_cond_init) next_cond_init = dlsym(RTLD_NEXT, "pthread_cond_init");
    ready = 1;
    struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);  /* libfaketime init now */
}
