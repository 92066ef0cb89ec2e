#ifndef SCOPEPROXY_CNGHTTP2_SHIM_H
#define SCOPEPROXY_CNGHTTP2_SHIM_H
// libnghttp2 (Debian 12: 1.52): HTTP/2 framing, HPACK and flow control, driven from the event loop
// with nghttp2_session_mem_recv / nghttp2_session_mem_send (no I/O callbacks). Every decision about a
// stream stays in Swift.
#include <nghttp2/nghttp2.h>

#endif
