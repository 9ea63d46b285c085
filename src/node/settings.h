/* settings.h - every configuration key as one table (issue 45): key, aliases, type, where it
 * lands in sl_config, default, error text and meaning (node/settings.c).
 *
 * sl_settings_apply is the one way a `key = value` (from the config file or a flag) reaches
 * sl_config; sl_settings_defaults sets every default from the same rows.
 * `sluiced --print-settings` prints the table (sl_settings_print), which
 * tests/integration/test_config_doc.py holds docs/configuration.md to.
 */
#ifndef SL_NODE_SETTINGS_H
#define SL_NODE_SETTINGS_H

#include <stdio.h>

#include "node/config.h"

/* Apply one setting: NULL, or why the value (or the key: "unknown setting") is refused. The
 * texts are those sluiced always printed; the caller names the key and the file's line. */
const char *sl_settings_apply(sl_config *c, const char *key, const char *value);
/* Every row's default into c, which is zeroed first (its strings are not freed). */
void sl_settings_defaults(sl_config *c);
/* The cluster's keys alone (cluster/conf.h cl_conf_apply): 1 when key is one of them
 * (cluster_formation.* or cluster.*), with *err NULL when applied, else the reason; 0 when it
 * is not a cluster key. */
int sl_settings_apply_cluster(sl_cluster_conf *c, const char *key, const char *value,
                              const char **err);
void sl_settings_cluster_defaults(sl_cluster_conf *c);
/* One line a key: KEY TAB TYPE TAB DEFAULT TAB MEANING; an alias as ALIAS TAB alias TAB TAB
 * KEY. A TLS group's keys are printed one by one under its prefix. */
void sl_settings_print(FILE *out);

#endif
