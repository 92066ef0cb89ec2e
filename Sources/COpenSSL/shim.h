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

static inline long sp_ssl_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}
static inline long sp_bio_get_mem_data(BIO *bio, char **out) { return BIO_get_mem_data(bio, out); }
static inline void sp_openssl_free(void *p) { OPENSSL_free(p); }
#endif
