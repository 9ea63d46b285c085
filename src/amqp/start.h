/* start.h - the server's connection.start (AMQP 0-9-1 section 1.4.2.1), the first method a
 * server sends after the protocol header, built in one place for every door that speaks it:
 * the broker's connections and the cluster follower's scripted refusal. Sans-I/O: it fills a
 * method and the caller writes it its own way.
 *
 * Always version 0-9 and locale en_US; product and version are core/version.h's. The
 * properties' order is fixed (clients show them as sent).
 */
#ifndef SL_AMQP_START_H
#define SL_AMQP_START_H

#include "core/buf.h"
#include "amqp/method.h"

typedef struct amqp_start_info {
    const char *information; /* the one-line "information" property */
    /* 1: a full server's properties (platform, copyright, cluster_name, capabilities);
     * 0: product, version and information only (the follower that refuses every login) */
    int full;
    const char *cluster_name; /* with full: the node's name */
    amqp_bytes mechanisms;    /* space-separated SASL mechanisms, in the order offered */
} amqp_start_info;

/* Fill m as connection.start; its server properties are written into props (initialized by
 * the call), which the caller frees once m is written. */
void amqp_start_build(amqp_method *m, sl_buf *props, const amqp_start_info *info);

#endif
