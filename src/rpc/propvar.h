/* propvar.h - the management properties' plain values (mq/info.h) as MS-MQMQ PROPVARIANTs in
 * NDR20, for R_QMMgmtGetInfo's apVar (MS-MQMR 3.1.4.1). See propvar.c for the layout.
 */
#ifndef SL_RPC_PROPVAR_H
#define SL_RPC_PROPVAR_H

#include <stdint.h>

#include "mq/info.h"
#include "rpc/ndr.h"

/* An array of PROPVARIANTs is every element's inline part (rpc_msrpc_pv_inline), then every
 * element's referents in order (rpc_msrpc_pv_deferred). vt is the property's VARTYPE; a value of
 * kind MQ_V_NULL goes as VT_NULL whatever vt. prop (a PROPID_MGMT_QUEUE_*) gives a VT_VARIANT
 * vector's element types. */
void rpc_msrpc_pv_inline(ndr_wr *w, uint16_t vt, const mq_value *v);
void rpc_msrpc_pv_deferred(ndr_wr *w, uint16_t vt, const mq_value *v, int prop);

#endif
