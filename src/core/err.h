/* err.h - the one error enum of Sluice.
 *
 * Every layer (codec, queue model, broker, management API) reports failures as an sl_err.
 * err.c holds the single table that maps each error to its AMQP reply code (and whether that
 * code is a channel- or connection-level error) and to the MSMQ HRESULT the management API
 * reports. Add an error here and a row there; nothing else maps codes.
 */
#ifndef SL_CORE_ERR_H
#define SL_CORE_ERR_H

#include <stdint.h>

typedef enum sl_err {
    SL_OK = 0,
    /* AMQP-shaped failures (the reply code says which) */
    SL_ERR_CONTENT_TOO_LARGE, /* 311 */
    SL_ERR_NO_ROUTE,          /* 312 (basic.return) */
    SL_ERR_CONNECTION_FORCED, /* 320 */
    SL_ERR_INVALID_PATH,      /* 402 */
    SL_ERR_ACCESS_REFUSED,    /* 403 */
    SL_ERR_NOT_FOUND,         /* 404 */
    SL_ERR_RESOURCE_LOCKED,   /* 405 */
    SL_ERR_PRECONDITION,      /* 406 */
    SL_ERR_FRAME,             /* 501 */
    SL_ERR_SYNTAX,            /* 502 */
    SL_ERR_COMMAND_INVALID,   /* 503 */
    SL_ERR_CHANNEL,           /* 504 */
    SL_ERR_UNEXPECTED_FRAME,  /* 505 */
    SL_ERR_RESOURCE,          /* 506 */
    SL_ERR_NOT_ALLOWED,       /* 530 */
    SL_ERR_NOT_IMPLEMENTED,   /* 540 */
    SL_ERR_INTERNAL,          /* 541 */
    SL_ERR_NOMEM,             /* 506 over AMQP */
    /* Queue-model failures with an MSMQ name of their own */
    SL_ERR_QUEUE_NOT_FOUND,          /* 404 / MQ_ERROR_QUEUE_NOT_FOUND */
    SL_ERR_QUEUE_EXISTS,             /* 406 / MQ_ERROR_QUEUE_EXISTS */
    SL_ERR_QUEUE_DELETED,            /* 404 / MQ_ERROR_QUEUE_DELETED */
    SL_ERR_INVALID_PARAMETER,        /* 406 / MQ_ERROR_INVALID_PARAMETER */
    SL_ERR_ILLEGAL_PROPID,           /* 406 / MQ_ERROR_ILLEGAL_PROPID */
    SL_ERR_MESSAGE_NOT_FOUND,        /* 404 / MQ_ERROR_MESSAGE_NOT_FOUND */
    SL_ERR_MESSAGE_LOCKED_UNDER_TX,  /* 405 / MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION */
    SL_ERR_MESSAGE_ALREADY_RECEIVED, /* 406 / MQ_ERROR_MESSAGE_ALREADY_RECEIVED */
    SL_ERR_TRANSACTION_USAGE,        /* 406 / MQ_ERROR_TRANSACTION_USAGE */
    SL_ERR_TRANSACTION_SEQUENCE,     /* 406 / MQ_ERROR_TRANSACTION_SEQUENCE */
    SL_ERR_ILLEGAL_FORMATNAME,       /* 406 / MQ_ERROR_ILLEGAL_FORMATNAME */
    SL_ERR_UNINITIALIZED_OBJECT,     /* 406 / MQ_ERROR_UNINITIALIZED_OBJECT */
    SL_ERR_QUEUE_FULL,               /* 406 / MQ_ERROR_INSUFFICIENT_RESOURCES: a move into a
                                        queue at its x-max-length / -bytes (the queue quota) */
    SL_ERR_IO,                       /* 541 / MQ_ERROR */
    /* Handles and management objects (issue 10) */
    SL_ERR_INVALID_HANDLE,                   /* 404 / MQ_ERROR_INVALID_HANDLE */
    SL_ERR_STALE_HANDLE,                     /* 404 / MQ_ERROR_STALE_HANDLE (an earlier run's) */
    SL_ERR_UNSUPPORTED_ACCESS_MODE,          /* 406 / MQ_ERROR_UNSUPPORTED_ACCESS_MODE */
    SL_ERR_UNSUPPORTED_FORMATNAME_OPERATION, /* 406 / MQ_ERROR_UNSUPPORTED_FORMATNAME_OPERATION */
    SL_ERR_HANDLE_LIMIT,                     /* 406 / MQ_ERROR_INSUFFICIENT_RESOURCES (a quota) */
    SL_ERR_NOINTERFACE,                      /* 406 / E_NOINTERFACE (QueryInterface) */
    SL_ERR_MEMBER_NOT_FOUND,                 /* 404 / DISP_E_MEMBERNOTFOUND (IDispatch) */
    SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE,     /* 404 / MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE */
    SL_ERR_QUEUE_NOT_ACTIVE,      /* 404 / MQ_ERROR_QUEUE_NOT_ACTIVE (no such outgoing queue) */
    SL_ERR_SERVICE_NOT_AVAILABLE, /* 503 / MQ_ERROR_SERVICE_NOT_AVAILABLE */
    /* MS-MQMP over DCE/RPC (issue 34) */
    SL_ERR_FORMATNAME_BUFFER_TOO_SMALL, /* 406 / MQ_ERROR_FORMATNAME_BUFFER_TOO_SMALL */
    SL_ERR_NO_DS,       /* 503 / MQ_ERROR_NO_DS: asks for the directory service, which a Sluice
                           node has not (workgroup mode) */
    SL_ERR_DTC_CONNECT, /* 503 / MQ_ERROR_DTC_CONNECT: asks for MSDTC, which a Sluice node has
                           not */
    SL_ERR__COUNT
} sl_err;

typedef struct sl_err_info {
    const char *name;         /* "NOT_FOUND": the AMQP reply-text prefix */
    uint16_t amqp_code;       /* AMQP 0-9-1 reply code */
    uint8_t hard;             /* 1: connection-level (hard) error, 0: channel-level (soft) */
    uint32_t hresult;         /* MSMQ HRESULT the management API reports */
    const char *hresult_name; /* "MQ_ERROR_QUEUE_NOT_FOUND" */
} sl_err_info;

const sl_err_info *sl_err_get(sl_err e);
static inline uint16_t sl_err_amqp_code(sl_err e)
{
    return sl_err_get(e)->amqp_code;
}
static inline int sl_err_is_hard(sl_err e)
{
    return sl_err_get(e)->hard;
}
/* Reply-text name for an AMQP reply code ("NOT_FOUND" for 404), "" for unknown codes. */
const char *sl_amqp_code_name(uint16_t code);
/* 1 when the AMQP reply code is connection-level (hard). */
int sl_amqp_code_is_hard(uint16_t code);

#endif
