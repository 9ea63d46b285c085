/* start.c - the server's connection.start (see start.h). */
#include "amqp/start.h"

#include <string.h>

#include "core/version.h"
#include "amqp/table.h"

/* What a full server tells clients it does, as RabbitMQ names it (every one true). */
static const char *const caps[] = {"publisher_confirms",
                                   "exchange_exchange_bindings",
                                   "basic.nack",
                                   "consumer_cancel_notify",
                                   "connection.blocked",
                                   "consumer_priorities",
                                   "authentication_failure_close",
                                   "per_consumer_qos"};

void amqp_start_build(amqp_method *m, sl_buf *props, const amqp_start_info *info)
{
    memset(m, 0, sizeof *m);
    m->id = AMQP_CONNECTION_START;
    amqp_connection_start *s = &m->u.connection_start;
    s->version_major = 0;
    s->version_minor = 9;
    sl_buf_init(props);
    size_t mark = amqp_tbl_begin(props);
    amqp_tbl_put_str(props, "product", AMQP_BYTES(SLUICE_PRODUCT));
    amqp_tbl_put_str(props, "version", AMQP_BYTES(SLUICE_VERSION));
    if (info->full) {
        amqp_tbl_put_str(props, "platform", AMQP_BYTES("C/Linux"));
        amqp_tbl_put_str(props, "copyright", AMQP_BYTES("Copyright (c) the Sluice authors"));
    }
    amqp_tbl_put_str(props, "information", amqp_cstr(info->information));
    if (info->full) {
        amqp_tbl_put_str(props, "cluster_name", amqp_cstr(info->cluster_name));
        size_t cmark = amqp_tbl_put_table_begin(props, "capabilities");
        for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
            amqp_tbl_put_bool(props, caps[i], 1);
        amqp_tbl_end(props, cmark);
    }
    amqp_tbl_end(props, mark);
    s->server_properties = (amqp_bytes){props->data + mark + 4, props->len - mark - 4};
    s->mechanisms = info->mechanisms;
    s->locales = AMQP_BYTES("en_US");
}
