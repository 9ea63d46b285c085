/* login.h - a password login for any door: checked at once, or, when the user's hash is a
 * slow one (Argon2id) and the node has a verifier (access/verifier.h), on the verifier's
 * thread with the answer back on the loop. Either way the rules and texts are the access
 * module's (acc_login_password; acc_login_checked, which also refuses when the user was
 * deleted or got a new password while the check ran).
 *
 * Invariant: done is called exactly once per login unless the login is cancelled first;
 * at once (inside node_login_start, which then returns NULL) or later from the loop.
 */
#ifndef SL_NODE_LOGIN_H
#define SL_NODE_LOGIN_H

#include <stddef.h>
#include <stdint.h>

#include "access/access.h"
#include "core/err.h"

struct sl_node;
typedef struct node_login node_login;

/* The answer: SL_OK with u (valid during the call), or a refusal with why (the access
 * module's text, or "user 'NAME' - too many slow password checks waiting (N); refused
 * unchecked" when the verifier's queue is full). */
typedef void (*node_login_fn)(void *ctx, sl_err e, const acc_user *u, const char *why);

/* Checks the password of the user named by name (len bytes: a name from a wire may hold a NUL,
 * and is never cut at one; loopback: the client is on this host). NULL once done was called;
 * else the check in flight, answered later unless node_login_cancel. */
node_login *node_login_start(struct sl_node *n, const char *name, size_t len, const uint8_t *pass,
                             size_t plen, int loopback, node_login_fn done, void *ctx);
/* The caller lets go: done will not be called. */
void node_login_cancel(node_login *l);

#endif
