/* The TLS benchmark's compiled client (bench/tls_bench.py builds and runs it): the Python client
 * bounded the rates it measured. One process sends GET /1k until the deadline and prints how many
 * 200 answers it read, then, after a space, the first error if one ended it.
 *
 *   tls_client MODE PROXY_PORT ORIGIN_PORT TLS_PORT CA_FILE SECONDS
 *
 * MODE: plain (HTTP through the proxy, absolute-form, keep-alive), keepalive (CONNECT, TLS to the
 * origin's name through the tunnel, keep-alive), handshake (a new CONNECT and TLS handshake for
 * every request, Connection: close). PROXY_PORT 0: straight to the origin's TLS port (direct).
 * The certificate is verified against CA_FILE, host name "localhost", as the Python client does.
 * Loopback only. */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int connect_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* One connection: a socket, and TLS over it unless plain. */
struct connection {
    int fd;
    SSL *ssl;
    char buffer[65536];
    size_t used;
};

static long receive(struct connection *c, char *into, size_t room) {
    if (c->ssl) {
        int n = SSL_read(c->ssl, into, (int)room);
        return n > 0 ? n : -1;
    }
    return read(c->fd, into, room);
}

static int send_all(struct connection *c, const char *bytes, size_t count) {
    while (count > 0) {
        long n = c->ssl ? SSL_write(c->ssl, bytes, (int)count) : write(c->fd, bytes, count);
        if (n <= 0) return -1;
        bytes += n;
        count -= (size_t)n;
    }
    return 0;
}

/* Reads one response whose head says 200 and whose body has a Content-Length; 0, or an error text. */
static const char *read_response(struct connection *c) {
    for (;;) {
        char *end = memmem(c->buffer, c->used, "\r\n\r\n", 4);
        if (end) {
            size_t head = (size_t)(end - c->buffer) + 4;
            if (c->used < 12 || memcmp(c->buffer + 8, " 200 ", 5) != 0) return "not a 200 answer";
            long length = -1;
            for (char *line = c->buffer; line < end;) {
                char *next = memmem(line, (size_t)(end - line) + 2, "\r\n", 2);
                if (!next) break;
                if (next - line > 15 && strncasecmp(line, "content-length:", 15) == 0) length = strtol(line + 15, NULL, 10);
                line = next + 2;
            }
            if (length < 0) return "no Content-Length";
            if (head + (size_t)length > sizeof c->buffer) return "response too large";
            while (c->used < head + (size_t)length) {
                long n = receive(c, c->buffer + c->used, sizeof c->buffer - c->used);
                if (n <= 0) return "closed in a body";
                c->used += (size_t)n;
            }
            memmove(c->buffer, c->buffer + head + length, c->used - head - (size_t)length);
            c->used -= head + (size_t)length;
            return NULL;
        }
        if (c->used == sizeof c->buffer) return "head too large";
        long n = receive(c, c->buffer + c->used, sizeof c->buffer - c->used);
        if (n <= 0) return "closed before a response";
        c->used += (size_t)n;
    }
}

static void disconnect(struct connection *c) {
    if (c->ssl) {
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->used = 0;
}

static const char *open_connection(struct connection *c, SSL_CTX *context, const char *mode, int proxy, int tls_port) {
    c->used = 0;
    c->ssl = NULL;
    if (strcmp(mode, "plain") == 0) {
        c->fd = connect_port(proxy);
        return c->fd < 0 ? "cannot connect to the proxy" : NULL;
    }
    c->fd = connect_port(proxy ? proxy : tls_port);
    if (c->fd < 0) return "cannot connect";
    if (proxy) {
        char request[128];
        int length = snprintf(request, sizeof request, "CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n", tls_port, tls_port);
        if (send_all(c, request, (size_t)length) != 0) return "CONNECT not sent";
        /* The answer's head, byte by byte: nothing after it may be taken from the socket. */
        size_t got = 0;
        while (got < 4 || memcmp(c->buffer + got - 4, "\r\n\r\n", 4) != 0) {
            if (got == 1024 || read(c->fd, c->buffer + got, 1) != 1) return "CONNECT not answered";
            got++;
        }
        if (got < 12 || memcmp(c->buffer + 8, " 200", 4) != 0) return "CONNECT refused";
    }
    c->ssl = SSL_new(context);
    SSL_set_fd(c->ssl, c->fd);
    SSL_set_tlsext_host_name(c->ssl, "localhost");
    SSL_set1_host(c->ssl, "localhost");
    if (SSL_connect(c->ssl) != 1) return "TLS handshake failed";
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: tls_client MODE PROXY_PORT ORIGIN_PORT TLS_PORT CA_FILE SECONDS\n");
        return 2;
    }
    const char *mode = argv[1];
    int proxy = atoi(argv[2]), origin = atoi(argv[3]), tls_port = atoi(argv[4]);
    double deadline = now() + atof(argv[6]);
    SSL_CTX *context = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_load_verify_locations(context, argv[5], NULL) != 1) {
        printf("0 cannot read %s\n", argv[5]);
        return 0;
    }
    int close_each = strcmp(mode, "handshake") == 0;
    char request[256];
    int length = strcmp(mode, "plain") == 0
        ? snprintf(request, sizeof request, "GET http://127.0.0.1:%d/1k HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", origin, origin)
        : snprintf(request, sizeof request, "GET /1k HTTP/1.1\r\nHost: localhost:%d\r\n%s\r\n", tls_port,
                   close_each ? "Connection: close\r\n" : "");
    static struct connection c = {.fd = -1};
    long count = 0;
    const char *error = NULL;
    while (!error && now() < deadline) {
        if (c.fd < 0 && (error = open_connection(&c, context, mode, proxy, tls_port))) break;
        if (send_all(&c, request, (size_t)length) != 0) {
            error = "request not sent";
            break;
        }
        if ((error = read_response(&c))) break;
        count++;
        if (close_each) disconnect(&c);
    }
    disconnect(&c);
    printf("%ld%s%s\n", count, error ? " " : "", error ? error : "");
    return 0;
}
