/* api_definitions.c - /api/definitions[/{vhost}]: GET exports, POST imports RabbitMQ's
 * definitions document. The document (what is in it, how an import checks and applies it) is
 * defs/defs.h's; this file is the HTTP around it: administrators only (the document carries
 * password hashes and every vhost), a per-vhost URL naming an existing vhost, the disk alarm
 * refusing imports, and RabbitMQ's codes (400 for a malformed document, 204 when imported).
 */
#include "core/log.h"
#include "defs/defs.h"
#include "mgmt/mgmt_internal.h"

static enum MHD_Result import_defs(req *r, const char *forced_vhost)
{
    json_t *body = mgmt_req_body(r, 0);
    if (!body)
        return MHD_YES;
    if (!mgmt_req_disk_ok(r, 0))
        return MHD_YES;
    char err[700];
    sl_err rc = defs_import(r->m->n, body, forced_vhost, err, sizeof err);
    if (rc == SL_ERR_SYNTAX)
        return mgmt_reply_error(r, 400, "bad_request", "%s", err);
    if (rc != SL_OK)
        return mgmt_reply_sl_err(r, rc, "%s", err);
    sl_info("http: definitions imported by '%s'", r->user);
    return mgmt_reply_empty(r, 204);
}

enum MHD_Result mgmt_api_definitions(req *r)
{
    if (!mgmt_req_require_admin(r)) /* hashes and every vhost: administrators only, as RabbitMQ */
        return MHD_YES;
    qm_vhost *only = NULL;
    if (r->nsegs == 2 && !(only = mgmt_req_vhost(r, r->segs[1])))
        return MHD_YES;
    if (r->nsegs > 2)
        return mgmt_reply_not_found(r);
    if (mgmt_req_is(r, "GET"))
        return mgmt_reply_json(r, 200, defs_export(r->m->n, only ? only->name : NULL));
    if (mgmt_req_is(r, "POST"))
        return import_defs(r, only ? only->name : NULL);
    return mgmt_reply_method_not_allowed(r);
}
