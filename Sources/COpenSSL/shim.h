#ifndef SCOPEPROXY_COPENSSL_SHIM_H
#define SCOPEPROXY_COPENSSL_SHIM_H
#include <sys/types.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/rand.h>
#include <openssl/hmac.h>

static inline long sp_ssl_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}
static inline long sp_ssl_ctx_set_min_proto_version(SSL_CTX *ctx, int version) { return SSL_CTX_set_min_proto_version(ctx, version); }
static inline int sp_tls1_2_version(void) { return TLS1_2_VERSION; }
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

/// ALPN inside intercepted tunnels: h2 when the client offers it (the proxy's preference, RFC 7301
/// §3.2 lets the server choose), else http/1.1; a client offering neither gets no protocol.
static inline int sp_alpn_select_h2_or_http11(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                                               const unsigned char *in, unsigned int inlen, void *arg) {
    static const unsigned char preferred[] = { 2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1' };
    (void)ssl; (void)arg;
    if (SSL_select_next_proto((unsigned char **)out, outlen, preferred, sizeof(preferred), in, inlen) == OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_OK;
    return SSL_TLSEXT_ERR_NOACK;
}
static inline void sp_ssl_ctx_select_h2_or_http11(SSL_CTX *ctx) { SSL_CTX_set_alpn_select_cb(ctx, sp_alpn_select_h2_or_http11, NULL); }
/// Whether the handshake chose h2 (1) or anything else (0).
static inline int sp_ssl_alpn_is_h2(const SSL *ssl) {
    const unsigned char *data = NULL;
    unsigned int length = 0;
    SSL_get0_alpn_selected(ssl, &data, &length);
    return length == 2 && data[0] == 'h' && data[1] == '2';
}

static inline long sp_bio_get_mem_data(BIO *bio, char **out) { return BIO_get_mem_data(bio, out); }
static inline void sp_openssl_free(void *p) { OPENSSL_free(p); }

// Client certificates (the TLS client listener): subject alternative names and the peer's chain.
static inline int sp_general_names_count(const GENERAL_NAMES *names) { return sk_GENERAL_NAME_num(names); }
static inline const GENERAL_NAME *sp_general_names_at(const GENERAL_NAMES *names, int index) { return sk_GENERAL_NAME_value(names, index); }
static inline void sp_general_names_free(GENERAL_NAMES *names) { GENERAL_NAMES_free(names); }
static inline int sp_general_name_type(const GENERAL_NAME *name) { return name->type; }
/// The IA5String of a DNS, email or URI name; the OCTET STRING of an IP address; NULL otherwise.
static inline const ASN1_STRING *sp_general_name_string(const GENERAL_NAME *name) {
    switch (name->type) {
    case GEN_DNS: return name->d.dNSName;
    case GEN_EMAIL: return name->d.rfc822Name;
    case GEN_URI: return name->d.uniformResourceIdentifier;
    case GEN_IPADD: return name->d.iPAddress;
    default: return NULL;
    }
}
static inline int sp_gen_dns(void) { return GEN_DNS; }
static inline int sp_gen_email(void) { return GEN_EMAIL; }
static inline int sp_gen_uri(void) { return GEN_URI; }
static inline int sp_gen_ipadd(void) { return GEN_IPADD; }
static inline long sp_ssl_ctx_no_tickets(SSL_CTX *ctx) { SSL_CTX_set_num_tickets(ctx, 0); return SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET); }
#endif
