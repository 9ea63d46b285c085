/* login.c - password logins, at once or on the verifier's thread (see login.h). */
#include "node/login.h"

#include <stdio.h>
#include <string.h>

#include "access/verifier.h"
#include "core/mem.h"
#include "node/node.h"

#define WHY_LEN 1400 /* a refusal names the user (up to 255 bytes) and the reason */

struct node_login {
    acc_db *acc;
    acc_verify_job *job;
    char *name;
    size_t name_len;
    uint8_t *hash; /* the stored hash that was checked: a new password refuses */
    size_t hash_len;
    int loopback;
    node_login_fn done;
    void *ctx;
};

static void login_free(node_login *l)
{
    sl_free(l->name);
    sl_free(l->hash);
    sl_free(l);
}

/* The verifier's answer (loop thread). */
static void checked(void *owner, int ok)
{
    node_login *l = owner;
    const acc_user *u = NULL;
    char why[WHY_LEN];
    sl_err e = acc_login_checked(l->acc, l->name, l->name_len, l->hash, l->hash_len, ok,
                                 l->loopback, &u, why, sizeof why);
    node_login_fn done = l->done;
    void *ctx = l->ctx;
    login_free(l);
    done(ctx, e, e == SL_OK ? u : NULL, e == SL_OK ? "" : why);
}

node_login *node_login_start(sl_node *n, const char *name, size_t len, const uint8_t *pass,
                             size_t plen, int loopback, node_login_fn done, void *ctx)
{
    char why[WHY_LEN];
    const acc_user *slow = acc_user_find(n->acc, name, len);
    if (n->verifier && acc_login_is_slow(slow, plen)) {
        node_login *l = sl_xcalloc(1, sizeof *l);
        l->job = acc_verifier_post(n->verifier, slow->algo, slow->hash, slow->hash_len, pass, plen,
                                   checked, l);
        if (!l->job) {
            sl_free(l);
            /* the queue of slow checks is full (a storm of logins): refused now, rather than
             * let the queue, or the loop, grow */
            snprintf(why, sizeof why,
                     "user '%.*s' - too many slow password checks waiting (%u); refused unchecked",
                     (int)len, name, acc_verifier_pending(n->verifier));
            done(ctx, SL_ERR_ACCESS_REFUSED, NULL, why);
            return NULL;
        }
        l->acc = n->acc;
        l->name = sl_xstrndup(name, len);
        l->name_len = len;
        l->hash = sl_xmalloc(slow->hash_len ? slow->hash_len : 1);
        memcpy(l->hash, slow->hash, slow->hash_len);
        l->hash_len = slow->hash_len;
        l->loopback = loopback;
        l->done = done;
        l->ctx = ctx;
        return l;
    }
    const acc_user *u = NULL;
    sl_err e = acc_login_password(n->acc, name, len, pass, plen, loopback, &u, why, sizeof why);
    done(ctx, e, e == SL_OK ? u : NULL, e == SL_OK ? "" : why);
    return NULL;
}

void node_login_cancel(node_login *l)
{
    acc_verify_cancel(l->job);
    login_free(l);
}
