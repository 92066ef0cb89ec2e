#ifndef SCOPEPROXY_CLIBEVENT_SHIM_H
#define SCOPEPROXY_CLIBEVENT_SHIM_H
// A libc header must come before any event2/ header: event-config.h defines _GNU_SOURCE, which
// otherwise changes glibc's fd_set layout mid-build (PLATFORM_NOTES.md).
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <sys/prctl.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <event2/event.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <event2/dns.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <event2/http.h>
#include <event2/bufferevent_ssl.h>
#include <malloc.h>

// Flags Swift imports as plain Int32 macros are fine; these wrap what it cannot import.
static inline short sp_ev_read(void) { return EV_READ; }
static inline short sp_ev_write(void) { return EV_WRITE; }
static inline short sp_ev_persist(void) { return EV_PERSIST; }
static inline short sp_ev_signal(void) { return EV_SIGNAL; }
static inline short sp_ev_timeout(void) { return EV_TIMEOUT; }
static inline short sp_bev_event_eof(void) { return BEV_EVENT_EOF; }
static inline short sp_bev_event_reading(void) { return BEV_EVENT_READING; }
static inline short sp_bev_event_error(void) { return BEV_EVENT_ERROR; }
static inline short sp_bev_event_timeout(void) { return BEV_EVENT_TIMEOUT; }
static inline short sp_bev_event_connected(void) { return BEV_EVENT_CONNECTED; }
static inline int sp_socket_error(void) { return EVUTIL_SOCKET_ERROR(); }

static inline int sp_set_nodelay(evutil_socket_t fd) {
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Starts a timer event that fires once after `ms` milliseconds (re-adding reschedules it).
static inline int sp_event_add_ms(struct event *ev, long ms) {
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    return event_add(ev, &tv);
}
// bufferevent_ssl.h only forward-declares OpenSSL's `struct ssl_st`: the SSL objects themselves
// come from COpenSSL, which the engine imports beside this module.
static inline int sp_bufferevent_ssl_connecting(void) { return BUFFEREVENT_SSL_CONNECTING; }
static inline int sp_bufferevent_ssl_accepting(void) { return BUFFEREVENT_SSL_ACCEPTING; }

// pidfd_open(2) (Linux 5.3) as the raw system call: glibc wraps it only from 2.36. -1 and errno
// when the kernel (or a seccomp filter) refuses; the runner then polls waitid (WNOWAIT) instead.
static inline int sp_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    return (int)syscall(434, pid, 0);
#endif
}
// The spawned child closes every descriptor from `lowest` up before exec (glibc 2.34), whether or
// not it was opened with O_CLOEXEC: no socket or secret file of the proxy reaches a command.
static inline int sp_spawn_add_closefrom(posix_spawn_file_actions_t *actions, int lowest) {
    return posix_spawn_file_actions_addclosefrom_np(actions, lowest);
}

// pipe2(2) with O_CLOEXEC: glibc declares it only under _GNU_SOURCE, which this header must not
// define before the libc headers (see the top).
static inline int sp_pipe_cloexec(int fds[2]) { return (int)syscall(SYS_pipe2, fds, O_CLOEXEC); }
// 1 once the child has exited, left a zombie (WNOWAIT: its pid, and so its process group's id,
// stay its own until it is reaped), 0 while it runs, -1 and errno on error. The runner's fallback
// when pidfd_open is refused.
static inline int sp_child_has_exited(pid_t pid) {
    siginfo_t info;
    info.si_pid = 0;
    if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return -1;
    return info.si_pid != 0;
}
// The wait status macros Swift cannot import.
static inline int sp_wait_exited(int status) { return WIFEXITED(status); }
static inline int sp_wait_exit_status(int status) { return WEXITSTATUS(status); }
static inline int sp_wait_signaled(int status) { return WIFSIGNALED(status); }
static inline int sp_wait_signal(int status) { return WTERMSIG(status); }

static inline void sp_set_thread_name(const char *name) { prctl(PR_SET_NAME, name, 0, 0, 0); }
// Not dumpable (proc(5), PR_SET_DUMPABLE): another process of the same user, such as a
// `command:` secret's program, can no longer read this one's /proc/PID/environ, mem or fd/.
static inline int sp_forbid_inspection(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }
static inline int sp_is_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }

// glibc allocator thresholds (malloc.h is not in Swift's Glibc module).
static inline int sp_set_malloc_trim_threshold(int bytes) { return mallopt(M_TRIM_THRESHOLD, bytes); }
static inline int sp_set_malloc_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }
#endif
