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

static inline void sp_set_thread_name(const char *name) { prctl(PR_SET_NAME, name, 0, 0, 0); }

// glibc allocator thresholds (malloc.h is not in Swift's Glibc module).
static inline int sp_set_malloc_trim_threshold(int bytes) { return mallopt(M_TRIM_THRESHOLD, bytes); }
static inline int sp_set_malloc_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }
#endif
