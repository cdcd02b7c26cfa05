/* A stand-in for a vendor management library, compiled by the tests (see conftest.py).
 *
 * It exports what the loader's tests need to observe from the C side: the OS thread a call
 * runs on, errno, a per-thread "last error" like the ones real vendor libraries keep, and a
 * call that blocks until the test releases it (so timeouts are tested without sleeping and
 * without leaving a thread stuck forever).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

static __thread int last_error;
static long loaded_on_tid;

/* Runs inside dlopen(): records which OS thread loaded the library. */
__attribute__((constructor)) static void record_loading_thread(void) {
    loaded_on_tid = (long)syscall(SYS_gettid);
}

long fake_loaded_on(void) { return loaded_on_tid; }

int fake_add(int a, int b) { return a + b; }

/* The kernel's id of the calling thread: equals threading.get_native_id() there. */
long fake_gettid(void) { return (long)syscall(SYS_gettid); }

/* Fails like a POSIX call: returns -1 and sets errno. */
int fake_fail_with_errno(int code) {
    errno = code;
    return -1;
}

/* Per-thread state, as in vendor libraries with a "get last error" function. */
void fake_set_last_error(int code) { last_error = code; }
int fake_get_last_error(void) { return last_error; }

/* Writes one byte to started_fd (if >= 0), then blocks until release_fd is readable or
 * closed. Returns what read() returned: 1 for a byte, 0 once the writer closed it. */
int fake_block(int started_fd, int release_fd) {
    char c = 's';
    ssize_t n;
    if (started_fd >= 0 && write(started_fd, &c, 1) != 1) return -1;
    do {
        n = read(release_fd, &c, 1);
    } while (n < 0 && errno == EINTR);
    return (int)n;
}
