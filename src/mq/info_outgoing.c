/* info_outgoing.c - the management properties of outgoing queues (STATE, FOREIGN, NEXTHOPS,
 * EOD_*, CONNECTION_HISTORY) and EOD_SOURCE_INFO of destination queues, as plain values
 * (info.h). The state lives in src/link/ (link_outq_get_info) and the store's incoming
 * sequences (persist_eod_in_all); this file only reads them.
 */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "node/node.h"
#include "persist/persist.h"
#include "mq/info.h"
#include "mq/caller.h"
#include "mq/formatname.h"
#include "mq/mq.h"
#include "node/node.h"

const char *mq_info_foreign_name(eod_foreign f)
{
    return f == LINK_FOREIGN_YES ? "YES" : f == LINK_FOREIGN_NO ? "NO" : "UNKNOWN";
}

const char *mq_info_hist_status_name(uint32_t s)
{
    switch (s) {
    case 0x00000000u:
        return "InProcess";
    case 0x00000001u:
        return "EstablishPacketReceived";
    case 0x00000002u:
        return "Established";
    case 0x80000004u:
        return "SocketConnectFailure";
    case 0x80000006u:
        return "SocketSendFailure";
    case 0x80000007u:
        return "ConnectionNotReady";
    case 0x80000008u:
        return "DnsFailure";
    case 0x8000000Bu:
        return "ConnectionRefused";
    default:
        return "UnknownFailure";
    }
}

void mq_seqinfo_of(const eod_seqinfo *l, mq_seqinfo *out)
{
    out->seq_id = l->seq_id;
    out->seq_no = l->seq_no;
    out->prev_no = l->prev_no;
    out->seq_no64 = l->seq_no64;
    out->prev_no64 = l->prev_no64;
}

static void v_seq(mq_value *v, const eod_seqinfo *s)
{
    v->kind = MQ_V_SEQINFO;
    mq_seqinfo_of(s, &v->seq);
}

/* n parallel vectors of len elements each (zeroed), as one VT_VARIANT vector */
static void v_vectors(mq_value *v, size_t n, size_t len)
{
    v->kind = MQ_V_LIST;
    v->n = n;
    v->items = sl_xcalloc(n ? n : 1, sizeof *v->items);
    for (size_t i = 0; i < n; i++) {
        v->items[i].kind = MQ_V_LIST;
        v->items[i].n = len;
        v->items[i].items = sl_xcalloc(len ? len : 1, sizeof(mq_value));
    }
}

void mq_info_outgoing_value(qm_queue *q, int id, uint16_t *vt, mq_value *out)
{
    eod_outq_info in;
    link_outq_get_info(q, &in);
    switch (id) {
    case 3:
        mq_value_str(out, "PRIVATE");
        return;
    case 4:
        mq_value_str(out, "REMOTE");
        return;
    case 5:
        mq_value_str(out, "UNKNOWN"); /* the destination's, which the sender does not know */
        return;
    case 6:
        mq_value_str(out, mq_info_foreign_name(in.foreign));
        return;
    case 11:
        mq_value_str(out, eod_state_name(in.state));
        return;
    case 12:
        out->kind = MQ_V_LIST;
        if (in.next_hop[0]) {
            out->items = sl_xcalloc(1, sizeof *out->items);
            out->n = 1;
            mq_value_str(&out->items[0], in.next_hop);
        }
        return;
    case 13:
        v_seq(out, &in.last_ack);
        return;
    case 14:
        mq_value_int(out, in.last_ack_time);
        return;
    case 15:
        mq_value_int(out, (int64_t)in.last_ack_count);
        return;
    case 16:
        v_seq(out, &in.first_non_ack);
        return;
    case 17:
        v_seq(out, &in.last_non_ack);
        return;
    case 18:
        v_seq(out, &in.next_seq);
        return;
    case 19:
        mq_value_int(out, (int64_t)in.no_read_count);
        return;
    case 20:
        mq_value_int(out, (int64_t)in.no_ack_count);
        return;
    case 21:
        mq_value_int(out, in.resend_time);
        return;
    case 22:
        mq_value_int(out, in.resend_interval_s);
        return;
    case 23:
        mq_value_int(out, (int64_t)in.resend_count);
        return;
    case MQ_PROP_CONNECTION_HISTORY:
        /* four parallel vectors: status, time, error (an HRESULT, signed), address lists
         * (one address each) */
        v_vectors(out, 4, in.n_history);
        for (size_t i = 0; i < in.n_history; i++) {
            const eod_hist *h = &in.history[i];
            mq_value_int(&out->items[0].items[i], h->status);
            mq_value_int(&out->items[1].items[i], h->time);
            mq_value_int(&out->items[2].items[i], (int32_t)h->error);
            mq_value *ad = &out->items[3].items[i];
            ad->kind = MQ_V_LIST;
            ad->items = sl_xcalloc(1, sizeof *ad->items);
            ad->n = 1;
            mq_value_str(&ad->items[0], h->address);
        }
        return;
    case 26:
        mq_value_int(out, 0);
        return;
    case 27:
        out->kind = MQ_V_LIST;
        return;
    default: /* EOD_SOURCE_INFO: destination queues only */
        *vt = MQ_VT_NULL;
        return;
    }
}

/* PROPID_MGMT_QUEUE_EOD_SOURCE_INFO of a destination queue: six parallel vectors over its
 * incoming sequences (format names, senders, SeqIDs, SeqNos, last access, rejects). */
void mq_info_eod_source(mq_state *mq, qm_queue *q, mq_value *out)
{
    persist *st = mq->n->store;
    char name[600];
    if (strcmp(q->vhost->name, "/"))
        snprintf(name, sizeof name, "%s/%s", q->vhost->name, q->name);
    else
        snprintf(name, sizeof name, "%s", q->name);
    size_t n = 0, k = 0;
    persist_eod_in **all = st ? persist_eod_in_all(st, &n) : NULL;
    for (size_t i = 0; i < n; i++)
        if (all[i]->dest && !strcmp(all[i]->dest, name))
            k++;
    v_vectors(out, 6, k);
    k = 0;
    for (size_t i = 0; i < n; i++) {
        persist_eod_in *e = all[i];
        if (!e->dest || strcmp(e->dest, name))
            continue;
        char f[800];
        snprintf(f, sizeof f, "DIRECT=OS:%s\\private$\\%s", mq_fmt_computer(mq), name);
        mq_value_str(&out->items[0].items[k], f);
        mq_value *s = &out->items[1].items[k];
        s->kind = MQ_V_SENDER;
        memcpy(s->guid, e->sender, 16);
        s->s = sl_xstrdup(e->sender_name ? e->sender_name : "");
        mq_value_int(&out->items[2].items[k], (int64_t)e->seq_id);
        mq_value_int(&out->items[3].items[k], (int64_t)e->seq_no);
        mq_value_int(&out->items[4].items[k], (int64_t)(e->access_ms / 1000));
        mq_value_int(&out->items[5].items[k], (int64_t)e->rejects);
        k++;
    }
}
