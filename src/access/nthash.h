/* nthash.h - the NT hash of a password: MD4 of its UTF-16LE form (MS-NLMP 3.3.1, NTOWFv1),
 * what an NTLM login is checked against. access/ keeps it beside each user's password hash
 * (acc_user.nt_hash) when access.keep_nt_hash is on; rpc/ntlm.c reads it through its
 * ntlm_hash_fn. MD4 comes from OpenSSL's legacy provider, in a library context of our own
 * (loaded once, on first use), so the process's default context never offers MD4.
 */
#ifndef SL_ACCESS_NTHASH_H
#define SL_ACCESS_NTHASH_H

#include <stddef.h>
#include <stdint.h>

/* MD4(UTF-16LE(pw)) of the UTF-8 password pw (n bytes) into out: 0, or -1 when pw is not
 * UTF-8 (core/utf16.h's policy) or MD4 cannot be loaded. */
int acc_nt_hash(const uint8_t *pw, size_t n, uint8_t out[16]);

#endif
