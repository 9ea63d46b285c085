/* tls.h - TLS streams over non-blocking sockets (OpenSSL's libssl), server and client side.
 *
 * A stream never blocks: the handshake, reads and writes each return "would block" with the
 * readiness they need next (sl_tls_wants: SL_EV_READ or SL_EV_WRITE, which can differ from
 * the operation: a read may need the socket writable during a key update), so the event loop
 * drives many handshakes at once and a slow or hostile peer never holds up the others.
 *
 * Used by the AMQP listener (amqps, broker/conn.c) and offered to the node-to-node link's
 * client (link_io): sl_tls_new(client ctx, fd, "host") verifies the server's certificate
 * against the context's CA file and the host name (or IP address) given.
 *
 * Reading: a server stream reads ahead (one recv takes every record waiting) and may hold
 * input the socket no longer shows: check sl_tls_pending before waiting for readability. A
 * client stream does not read ahead: with a buffer of 16 KiB or more, a read takes one whole
 * record and nothing stays behind, so readiness alone is enough.
 *
 * Ownership: a context is shared by its streams (refcounted inside OpenSSL) and outlives
 * none of them on its own: free streams first. A stream does not own its fd.
 */
#ifndef SL_NET_TLS_H
#define SL_NET_TLS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct sl_tls_ctx sl_tls_ctx;
typedef struct sl_tls sl_tls;

typedef struct sl_tls_opts {
    const char *cacertfile;   /* trusted CAs (peer verification); NULL: none (client: system) */
    const char *certfile;     /* own certificate chain (server: required) */
    const char *keyfile;      /* its private key (PEM) */
    const char *key_password; /* for an encrypted key, or NULL */
    int verify_peer;          /* ssl_options.verify = verify_peer */
    int fail_if_no_peer_cert; /* server: a client without a certificate is refused */
    int depth;                /* certificate chain depth (0: OpenSSL's default) */
    /* bit 0 TLS 1.0, bit 1 TLS 1.1, bit 2 TLS 1.2, bit 3 TLS 1.3; 0 = 1.2 and 1.3 */
    unsigned versions;
    const char *ciphers;      /* TLS <= 1.2 cipher list (OpenSSL syntax), or NULL */
    const char *ciphersuites; /* TLS 1.3 suites, or NULL */
    int honor_cipher_order;   /* server picks the cipher */
} sl_tls_opts;

#define SL_TLS_V1_0 1u
#define SL_TLS_V1_1 2u
#define SL_TLS_V1_2 4u
#define SL_TLS_V1_3 8u

/* Parse "tlsv1.2" / "tlsv1.3" ... into a version bit; 0 when unknown. */
unsigned sl_tls_version_bit(const char *name);

/* A context: server (listener) or client. NULL with a message naming the file and OpenSSL's
 * reason on a missing or bad certificate or key. */
sl_tls_ctx *sl_tls_ctx_new(int server, const sl_tls_opts *o, char *err, size_t errlen);
void sl_tls_ctx_free(sl_tls_ctx *c);

/* A stream on a connected non-blocking socket. Client: peer_host (a name or an address) is
 * sent as SNI (names only) and, when the context verifies, checked against the server's
 * certificate. NULL only when out of memory. */
sl_tls *sl_tls_new(sl_tls_ctx *c, int fd, const char *peer_host);
void sl_tls_free(sl_tls *t);

/* Drive the handshake: 1 done, 0 in progress (wait for sl_tls_wants), -1 failed (the
 * reason in sl_tls_error: "wrong version number" for a client speaking plain AMQP, the
 * certificate's problem for a refused peer certificate, ...). */
int sl_tls_handshake(sl_tls *t);
/* Like recv / send on the plaintext: > 0 bytes; read 0 = the peer closed; -1 with errno
 * EAGAIN (wait for sl_tls_wants), or ECONNRESET / EPROTO (reason in sl_tls_error). */
ssize_t sl_tls_read(sl_tls *t, void *buf, size_t n);
ssize_t sl_tls_write(sl_tls *t, const void *buf, size_t n);
/* Readiness the last operation that would block needs: SL_EV_READ and/or SL_EV_WRITE. */
int sl_tls_wants(const sl_tls *t);
/* Input buffered inside the stream (decrypted, or read ahead and not yet decrypted): readable
 * without the socket being readable. Non-zero means "read again". */
size_t sl_tls_pending(const sl_tls *t);
/* Send close_notify, best effort (never blocks). */
void sl_tls_shutdown(sl_tls *t);

const char *sl_tls_error(const sl_tls *t);
/* After the handshake: 1 when the peer presented a certificate that verified. */
int sl_tls_peer_verified(const sl_tls *t);
/* The peer certificate's subject: its common name, or the whole distinguished name as
 * RabbitMQ's rabbit_ssl formats it (RFC 4514: "CN=alice,O=example,C=GB"). 0, or -1 without
 * a certificate (or no CN). */
int sl_tls_peer_cn(const sl_tls *t, char *out, size_t len);
int sl_tls_peer_dn(const sl_tls *t, char *out, size_t len);
/* Protocol ("TLSv1.3") and cipher of the session, for logs and the management API. */
const char *sl_tls_protocol(const sl_tls *t);
const char *sl_tls_cipher(const sl_tls *t);

#endif
