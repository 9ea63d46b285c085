/* tls.c - TLS streams over non-blocking sockets with OpenSSL (see tls.h).
 *
 * The stream sits directly on the fd (SSL_set_fd): OpenSSL reads and writes the socket, and
 * reports SSL_ERROR_WANT_READ / WANT_WRITE when the socket would block; those are remembered
 * in t->wants for the event loop. Partial writes and moving write buffers are allowed, since
 * the caller's output buffer is consumed and compacted between calls; read and write buffers
 * are released while idle (SSL_MODE_RELEASE_BUFFERS), so an idle TLS connection costs a few
 * KiB rather than 34. Reads run ahead (a recv takes every record there is), so
 * sl_tls_pending also counts records buffered but not yet decrypted.
 */
#include "net/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>

#include "core/mem.h"
#include "net/loop.h"

struct sl_tls_ctx {
    SSL_CTX *ctx;
    int server;
    int verify;
};

struct sl_tls {
    SSL *ssl;
    int wants;
    char err[256];
};

unsigned sl_tls_version_bit(const char *name)
{
    static const struct {
        const char *name;
        unsigned bit;
    } v[] = {{"tlsv1", SL_TLS_V1_0},   {"tlsv1.0", SL_TLS_V1_0}, {"tlsv1.1", SL_TLS_V1_1},
             {"tlsv1.2", SL_TLS_V1_2}, {"tlsv1.3", SL_TLS_V1_3}, {"tls1.2", SL_TLS_V1_2},
             {"tls1.3", SL_TLS_V1_3}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!strcasecmp(name, v[i].name))
            return v[i].bit;
    return 0;
}

static void openssl_reason(char *err, size_t errlen, const char *what, const char *file)
{
    unsigned long e = ERR_peek_last_error();
    char r[200] = "unknown error";
    if (e)
        ERR_error_string_n(e, r, sizeof r);
    ERR_clear_error();
    snprintf(err, errlen, "%s%s%s: %s", what, file ? " " : "", file ? file : "", r);
}

static int key_password_cb(char *buf, int size, int rwflag, void *u)
{
    (void)rwflag;
    const char *pw = u;
    int n = pw ? (int)strlen(pw) : 0;
    if (n >= size)
        n = size - 1;
    if (n > 0)
        memcpy(buf, pw, (size_t)n);
    return n;
}

static int version_of(unsigned bit)
{
    switch (bit) {
    case SL_TLS_V1_0:
        return TLS1_VERSION;
    case SL_TLS_V1_1:
        return TLS1_1_VERSION;
    case SL_TLS_V1_2:
        return TLS1_2_VERSION;
    default:
        return TLS1_3_VERSION;
    }
}

sl_tls_ctx *sl_tls_ctx_new(int server, const sl_tls_opts *o, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx) {
        openssl_reason(err, errlen, "cannot create a TLS context", NULL);
        return NULL;
    }
    /* Versions: the lowest and highest of the set (OpenSSL takes a range). */
    unsigned vs = o->versions ? o->versions : (SL_TLS_V1_2 | SL_TLS_V1_3);
    unsigned lo = 0, hi = 0;
    for (unsigned b = SL_TLS_V1_0; b <= SL_TLS_V1_3; b <<= 1)
        if (vs & b) {
            if (!lo)
                lo = b;
            hi = b;
        }
    if (lo < SL_TLS_V1_2)
        SSL_CTX_set_security_level(ctx, 0); /* old protocols were asked for explicitly */
    SSL_CTX_set_min_proto_version(ctx, version_of(lo));
    SSL_CTX_set_max_proto_version(ctx, version_of(hi));
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 (o->honor_cipher_order ? SSL_OP_CIPHER_SERVER_PREFERENCE : 0));
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    /* Servers read ahead: one recv takes as many records as there are (clients send a record
     * per frame, three per message) instead of two recv calls per record; the broker then asks
     * sl_tls_pending before it stops reading. Client streams do not: a read leaves nothing
     * buffered beyond the record it returns, so socket readiness alone tells when to read
     * (what the link's reader relies on). */
    if (server)
        SSL_CTX_set_read_ahead(ctx, 1);
    if (o->ciphers && *o->ciphers && !SSL_CTX_set_cipher_list(ctx, o->ciphers)) {
        openssl_reason(err, errlen, "ssl_options.ciphers: no usable cipher in", o->ciphers);
        goto fail;
    }
    if (o->ciphersuites && *o->ciphersuites && !SSL_CTX_set_ciphersuites(ctx, o->ciphersuites)) {
        openssl_reason(err, errlen, "ssl_options.ciphers: no usable TLS 1.3 suite in",
                       o->ciphersuites);
        goto fail;
    }
    if (o->key_password) {
        SSL_CTX_set_default_passwd_cb(ctx, key_password_cb);
        SSL_CTX_set_default_passwd_cb_userdata(ctx, (void *)o->key_password);
    }
    if (o->certfile && *o->certfile) {
        if (SSL_CTX_use_certificate_chain_file(ctx, o->certfile) != 1) {
            openssl_reason(err, errlen, "cannot load the certificate", o->certfile);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, o->keyfile ? o->keyfile : o->certfile,
                                        SSL_FILETYPE_PEM) != 1) {
            openssl_reason(err, errlen, "cannot load the private key",
                           o->keyfile ? o->keyfile : o->certfile);
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            openssl_reason(err, errlen, "the private key does not match the certificate",
                           o->keyfile);
            goto fail;
        }
    } else if (server) {
        snprintf(err, errlen, "a TLS listener needs ssl_options.certfile and keyfile");
        goto fail;
    }
    if (o->cacertfile && *o->cacertfile) {
        if (SSL_CTX_load_verify_locations(ctx, o->cacertfile, NULL) != 1) {
            openssl_reason(err, errlen, "cannot load the CA certificates", o->cacertfile);
            goto fail;
        }
        if (server) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->cacertfile);
            if (names)
                SSL_CTX_set_client_CA_list(ctx, names);
        }
    } else if (!server && o->verify_peer) {
        SSL_CTX_set_default_verify_paths(ctx);
    }
    int mode = SSL_VERIFY_NONE;
    if (o->verify_peer) {
        mode = SSL_VERIFY_PEER;
        if (server && o->fail_if_no_peer_cert)
            mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    }
    SSL_CTX_set_verify(ctx, mode, NULL);
    if (o->depth > 0)
        SSL_CTX_set_verify_depth(ctx, o->depth);
    if (server) {
        static const unsigned char sid[] = "sluice";
        SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
    }
    sl_tls_ctx *c = sl_xcalloc(1, sizeof *c);
    c->ctx = ctx;
    c->server = server;
    c->verify = o->verify_peer;
    return c;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

void sl_tls_ctx_free(sl_tls_ctx *c)
{
    if (!c)
        return;
    SSL_CTX_free(c->ctx);
    sl_free(c);
}

sl_tls *sl_tls_new(sl_tls_ctx *c, int fd, const char *peer_host)
{
    SSL *ssl = SSL_new(c->ctx);
    if (!ssl) {
        ERR_clear_error();
        return NULL;
    }
    if (SSL_set_fd(ssl, fd) != 1) {
        ERR_clear_error();
        SSL_free(ssl);
        return NULL;
    }
    if (c->server) {
        SSL_set_accept_state(ssl);
    } else {
        SSL_set_connect_state(ssl);
        if (peer_host && *peer_host) {
            unsigned char addr[16];
            int is_ip = inet_pton(AF_INET, peer_host, addr) == 1 ||
                        inet_pton(AF_INET6, peer_host, addr) == 1;
            if (!is_ip)
                SSL_set_tlsext_host_name(ssl, peer_host);
            if (c->verify) {
                X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
                if (is_ip)
                    X509_VERIFY_PARAM_set1_ip_asc(vp, peer_host);
                else
                    SSL_set1_host(ssl, peer_host);
            }
        }
    }
    sl_tls *t = sl_xcalloc(1, sizeof *t);
    t->ssl = ssl;
    return t;
}

void sl_tls_free(sl_tls *t)
{
    if (!t)
        return;
    SSL_free(t->ssl);
    sl_free(t);
}

/* Turn an OpenSSL result into our conventions; returns what the caller returns. */
static int failure(sl_tls *t, int rc, const char *what)
{
    int e = SSL_get_error(t->ssl, rc);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        t->wants = SL_EV_READ;
        errno = EAGAIN;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        t->wants = SL_EV_WRITE;
        errno = EAGAIN;
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        ERR_clear_error();
        snprintf(t->err, sizeof t->err, "peer closed the TLS session");
        errno = 0;
        return -2;
    case SSL_ERROR_SYSCALL: {
        int se = errno;
        unsigned long le = ERR_get_error();
        if (le) {
            ERR_error_string_n(le, t->err, sizeof t->err);
        } else if (rc == 0 || se == 0) {
            snprintf(t->err, sizeof t->err, "%s: the peer closed the socket", what);
            se = ECONNRESET;
        } else {
            snprintf(t->err, sizeof t->err, "%s: %s", what, strerror(se));
        }
        ERR_clear_error();
        errno = se ? se : ECONNRESET;
        return -1;
    }
    default: {
        unsigned long le = ERR_get_error();
        char r[200] = "protocol error";
        if (le)
            ERR_error_string_n(le, r, sizeof r);
        long vr = SSL_get_verify_result(t->ssl);
        if (vr != X509_V_OK)
            snprintf(t->err, sizeof t->err, "%s: %s (certificate: %s)", what, r,
                     X509_verify_cert_error_string(vr));
        else
            snprintf(t->err, sizeof t->err, "%s: %s", what, r);
        ERR_clear_error();
        errno = EPROTO;
        return -1;
    }
    }
}

int sl_tls_handshake(sl_tls *t)
{
    ERR_clear_error();
    int rc = SSL_do_handshake(t->ssl);
    if (rc == 1) {
        t->wants = 0;
        return 1;
    }
    int f = failure(t, rc, "TLS handshake");
    if (f == 0)
        return 0;
    if (f == -2)
        snprintf(t->err, sizeof t->err, "TLS handshake: the peer closed the session");
    return -1;
}

/* OpenSSL's error queue is kept empty between calls (every failure path below, and the
 * context set-up, clear it once they have read it), so the hot calls need not clear it
 * first: ERR_clear_error costs a few percent of a busy TLS connection in OpenSSL 3. */
ssize_t sl_tls_read(sl_tls *t, void *buf, size_t n)
{
    int rc = SSL_read(t->ssl, buf, n > 1u << 30 ? 1 << 30 : (int)n);
    if (rc > 0)
        return rc;
    int f = failure(t, rc, "TLS read");
    if (f == -2)
        return 0; /* close_notify: a clean end of the stream */
    return -1;
}

ssize_t sl_tls_write(sl_tls *t, const void *buf, size_t n)
{
    if (n == 0)
        return 0;
    int rc = SSL_write(t->ssl, buf, n > 1u << 30 ? 1 << 30 : (int)n);
    if (rc > 0)
        return rc;
    int f = failure(t, rc, "TLS write");
    if (f == -2) {
        errno = EPIPE;
        return -1;
    }
    return -1;
}

int sl_tls_wants(const sl_tls *t)
{
    return t->wants;
}

size_t sl_tls_pending(const sl_tls *t)
{
    /* With read ahead, records read from the socket but not decrypted yet count too
     * (SSL_pending sees only decrypted bytes). */
    int p = SSL_pending(t->ssl);
    return p > 0 ? (size_t)p : SSL_has_pending(t->ssl) ? 1 : 0;
}

void sl_tls_shutdown(sl_tls *t)
{
    if (SSL_is_init_finished(t->ssl)) {
        ERR_clear_error();
        SSL_shutdown(t->ssl);
        ERR_clear_error();
    }
}

const char *sl_tls_error(const sl_tls *t)
{
    return t->err[0] ? t->err : "TLS error";
}

int sl_tls_peer_verified(const sl_tls *t)
{
    return SSL_get0_peer_certificate(t->ssl) && SSL_get_verify_result(t->ssl) == X509_V_OK;
}

int sl_tls_peer_cn(const sl_tls *t, char *out, size_t len)
{
    X509 *c = SSL_get0_peer_certificate(t->ssl);
    if (!c || len == 0)
        return -1;
    X509_NAME *name = X509_get_subject_name(c);
    int i = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
    if (i < 0)
        return -1;
    ASN1_STRING *s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    unsigned char *utf8 = NULL;
    int n = ASN1_STRING_to_UTF8(&utf8, s);
    if (n < 0)
        return -1;
    if ((size_t)n >= len || memchr(utf8, 0, (size_t)n)) {
        OPENSSL_free(utf8);
        return -1; /* longer than a user name can be, or an embedded NUL: refuse */
    }
    memcpy(out, utf8, (size_t)n);
    out[n] = 0;
    OPENSSL_free(utf8);
    return 0;
}

int sl_tls_peer_dn(const sl_tls *t, char *out, size_t len)
{
    X509 *c = SSL_get0_peer_certificate(t->ssl);
    if (!c || len == 0)
        return -1;
    BIO *b = BIO_new(BIO_s_mem());
    if (!b)
        return -1;
    /* RFC 2253/4514: most specific first, "," between RDNs, UTF-8 kept as is. */
    X509_NAME_print_ex(b, X509_get_subject_name(c), 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
    char *p;
    long n = BIO_get_mem_data(b, &p);
    int rc = -1;
    if (n >= 0 && (size_t)n < len) {
        memcpy(out, p, (size_t)n);
        out[n] = 0;
        rc = 0;
    }
    BIO_free(b);
    return rc;
}

const char *sl_tls_protocol(const sl_tls *t)
{
    return SSL_get_version(t->ssl);
}

const char *sl_tls_cipher(const sl_tls *t)
{
    const char *c = SSL_get_cipher_name(t->ssl);
    return c ? c : "";
}
