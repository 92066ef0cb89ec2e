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
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <event2/event.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <event2/dns.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <event2/http.h>
#include <event2/bufferevent_ssl.h>

// Flags Swift imports as plain Int32 macros are fine; these wrap what it cannot import.
static inline short sp_ev_read(void) { return EV_READ; }
static inline short sp_ev_write(void) { return EV_WRITE; }
static inline short sp_ev_persist(void) { return EV_PERSIST; }
static inline short sp_ev_signal(void) { return EV_SIGNAL; }
static inline short sp_bev_event_eof(void) { return BEV_EVENT_EOF; }
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
// OpenSSL macros Swift cannot import (PLATFORM_NOTES.md).
static inline long sp_ssl_set_tlsext_host_name(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
static inline long sp_ssl_ctx_set_min_proto_version(SSL_CTX *ctx, int version) { return SSL_CTX_set_min_proto_version(ctx, version); }
static inline int sp_tls1_2_version(void) { return TLS1_2_VERSION; }
static inline int sp_bufferevent_ssl_connecting(void) { return BUFFEREVENT_SSL_CONNECTING; }
static inline int sp_bufferevent_ssl_accepting(void) { return BUFFEREVENT_SSL_ACCEPTING; }
static inline long sp_ssl_ctx_set_session_cache_off(SSL_CTX *ctx) { return SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF); }

/// ALPN: always choose http/1.1 (clients offering only h2 get no protocol and fall back to http/1.1).
static inline int sp_alpn_select_http11(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                                         const unsigned char *in, unsigned int inlen, void *arg) {
    static const unsigned char http11[] = { 8, 'h', 't', 't', 'p', '/', '1', '.', '1' };
    (void)ssl; (void)arg;
    if (SSL_select_next_proto((unsigned char **)out, outlen, http11, sizeof(http11), in, inlen) == OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_OK;
    return SSL_TLSEXT_ERR_NOACK;
}
static inline void sp_ssl_ctx_select_http11(SSL_CTX *ctx) { SSL_CTX_set_alpn_select_cb(ctx, sp_alpn_select_http11, NULL); }

static inline void sp_set_thread_name(const char *name) { prctl(PR_SET_NAME, name, 0, 0, 0); }
#endif
