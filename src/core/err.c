/* err.c - the one table mapping sl_err to AMQP reply codes and MSMQ HRESULTs. */
#include "err.h"

#include <stddef.h>

#define MQ_OK 0x00000000u
#define MQ_ERROR 0xC00E0001u

static const sl_err_info table[SL_ERR__COUNT] = {
    [SL_OK] = {"OK", 200, 0, MQ_OK, "MQ_OK"},
    [SL_ERR_CONTENT_TOO_LARGE] = {"CONTENT_TOO_LARGE", 311, 0, 0xC00E003Bu,
                                  "MQ_ERROR_ILLEGAL_PROPERTY_SIZE"},
    [SL_ERR_NO_ROUTE] = {"NO_ROUTE", 312, 0, 0xC00E0003u, "MQ_ERROR_QUEUE_NOT_FOUND"},
    [SL_ERR_CONNECTION_FORCED] = {"CONNECTION_FORCED", 320, 1, 0xC00E0008u,
                                  "MQ_ERROR_OPERATION_CANCELLED"},
    [SL_ERR_INVALID_PATH] = {"INVALID_PATH", 402, 1, 0xC00E0014u,
                             "MQ_ERROR_ILLEGAL_QUEUE_PATHNAME"},
    [SL_ERR_ACCESS_REFUSED] = {"ACCESS_REFUSED", 403, 0, 0xC00E0025u, "MQ_ERROR_ACCESS_DENIED"},
    [SL_ERR_NOT_FOUND] = {"NOT_FOUND", 404, 0, 0xC00E0003u, "MQ_ERROR_QUEUE_NOT_FOUND"},
    [SL_ERR_RESOURCE_LOCKED] = {"RESOURCE_LOCKED", 405, 0, 0xC00E0009u,
                                "MQ_ERROR_SHARING_VIOLATION"},
    [SL_ERR_PRECONDITION] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0006u,
                             "MQ_ERROR_INVALID_PARAMETER"},
    [SL_ERR_FRAME] = {"FRAME_ERROR", 501, 1, MQ_ERROR, "MQ_ERROR"},
    [SL_ERR_SYNTAX] = {"SYNTAX_ERROR", 502, 1, MQ_ERROR, "MQ_ERROR"},
    [SL_ERR_COMMAND_INVALID] = {"COMMAND_INVALID", 503, 1, 0xC00E0064u,
                                "MQ_ERROR_ILLEGAL_OPERATION"},
    [SL_ERR_CHANNEL] = {"CHANNEL_ERROR", 504, 1, MQ_ERROR, "MQ_ERROR"},
    [SL_ERR_UNEXPECTED_FRAME] = {"UNEXPECTED_FRAME", 505, 1, MQ_ERROR, "MQ_ERROR"},
    [SL_ERR_RESOURCE] = {"RESOURCE_ERROR", 506, 1, 0xC00E0027u, "MQ_ERROR_INSUFFICIENT_RESOURCES"},
    [SL_ERR_NOT_ALLOWED] = {"NOT_ALLOWED", 530, 1, 0xC00E0025u, "MQ_ERROR_ACCESS_DENIED"},
    [SL_ERR_NOT_IMPLEMENTED] = {"NOT_IMPLEMENTED", 540, 1, 0xC00E0064u,
                                "MQ_ERROR_ILLEGAL_OPERATION"},
    [SL_ERR_INTERNAL] = {"INTERNAL_ERROR", 541, 1, MQ_ERROR, "MQ_ERROR"},
    [SL_ERR_NOMEM] = {"RESOURCE_ERROR", 506, 1, 0xC00E0027u, "MQ_ERROR_INSUFFICIENT_RESOURCES"},
    [SL_ERR_QUEUE_NOT_FOUND] = {"NOT_FOUND", 404, 0, 0xC00E0003u, "MQ_ERROR_QUEUE_NOT_FOUND"},
    [SL_ERR_QUEUE_EXISTS] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0005u, "MQ_ERROR_QUEUE_EXISTS"},
    [SL_ERR_QUEUE_DELETED] = {"NOT_FOUND", 404, 0, 0xC00E005Au, "MQ_ERROR_QUEUE_DELETED"},
    [SL_ERR_INVALID_PARAMETER] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0006u,
                                  "MQ_ERROR_INVALID_PARAMETER"},
    [SL_ERR_ILLEGAL_PROPID] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0039u,
                               "MQ_ERROR_ILLEGAL_PROPID"},
    [SL_ERR_MESSAGE_NOT_FOUND] = {"NOT_FOUND", 404, 0, 0xC00E0088u, "MQ_ERROR_MESSAGE_NOT_FOUND"},
    [SL_ERR_MESSAGE_LOCKED_UNDER_TX] = {"RESOURCE_LOCKED", 405, 0, 0xC00E009Cu,
                                        "MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION"},
    [SL_ERR_MESSAGE_ALREADY_RECEIVED] = {"PRECONDITION_FAILED", 406, 0, 0xC00E001Du,
                                         "MQ_ERROR_MESSAGE_ALREADY_RECEIVED"},
    [SL_ERR_TRANSACTION_USAGE] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0050u,
                                  "MQ_ERROR_TRANSACTION_USAGE"},
    [SL_ERR_TRANSACTION_SEQUENCE] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0051u,
                                     "MQ_ERROR_TRANSACTION_SEQUENCE"},
    [SL_ERR_ILLEGAL_FORMATNAME] = {"PRECONDITION_FAILED", 406, 0, 0xC00E001Eu,
                                   "MQ_ERROR_ILLEGAL_FORMATNAME"},
    [SL_ERR_UNINITIALIZED_OBJECT] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0094u,
                                     "MQ_ERROR_UNINITIALIZED_OBJECT"},
    [SL_ERR_IO] = {"INTERNAL_ERROR", 541, 1, MQ_ERROR, "MQ_ERROR"},
    [SL_ERR_INVALID_HANDLE] = {"NOT_FOUND", 404, 0, 0xC00E0007u, "MQ_ERROR_INVALID_HANDLE"},
    [SL_ERR_STALE_HANDLE] = {"NOT_FOUND", 404, 0, 0xC00E0056u, "MQ_ERROR_STALE_HANDLE"},
    [SL_ERR_UNSUPPORTED_ACCESS_MODE] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0045u,
                                        "MQ_ERROR_UNSUPPORTED_ACCESS_MODE"},
    [SL_ERR_UNSUPPORTED_FORMATNAME_OPERATION] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0020u,
                                                 "MQ_ERROR_UNSUPPORTED_FORMATNAME_OPERATION"},
    [SL_ERR_HANDLE_LIMIT] = {"PRECONDITION_FAILED", 406, 0, 0xC00E0027u,
                             "MQ_ERROR_INSUFFICIENT_RESOURCES"},
    [SL_ERR_NOINTERFACE] = {"PRECONDITION_FAILED", 406, 0, 0x80004002u, "E_NOINTERFACE"},
    [SL_ERR_MEMBER_NOT_FOUND] = {"NOT_FOUND", 404, 0, 0x80020003u, "DISP_E_MEMBERNOTFOUND"},
    [SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE] = {"NOT_FOUND", 404, 0, 0xC00E0069u,
                                             "MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE"},
};

const sl_err_info *sl_err_get(sl_err e)
{
    if ((unsigned)e >= SL_ERR__COUNT || table[e].name == NULL)
        return &table[SL_ERR_INTERNAL];
    return &table[e];
}

static const struct {
    uint16_t code;
    const char *name;
} code_names[] = {
    {200, "REPLY_SUCCESS"},       {311, "CONTENT_TOO_LARGE"}, {312, "NO_ROUTE"},
    {313, "NO_CONSUMERS"},        {320, "CONNECTION_FORCED"}, {402, "INVALID_PATH"},
    {403, "ACCESS_REFUSED"},      {404, "NOT_FOUND"},         {405, "RESOURCE_LOCKED"},
    {406, "PRECONDITION_FAILED"}, {501, "FRAME_ERROR"},       {502, "SYNTAX_ERROR"},
    {503, "COMMAND_INVALID"},     {504, "CHANNEL_ERROR"},     {505, "UNEXPECTED_FRAME"},
    {506, "RESOURCE_ERROR"},      {530, "NOT_ALLOWED"},       {540, "NOT_IMPLEMENTED"},
    {541, "INTERNAL_ERROR"},
};

const char *sl_amqp_code_name(uint16_t code)
{
    for (size_t i = 0; i < sizeof code_names / sizeof code_names[0]; i++)
        if (code_names[i].code == code)
            return code_names[i].name;
    return "";
}

int sl_amqp_code_is_hard(uint16_t code)
{
    return code == 320 || code == 402 || code >= 500;
}
