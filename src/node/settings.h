/* settings.h - every configuration key as one table (issue 45): key, aliases, type, where it
 * lands in node_config, default, error text and meaning (node/settings.c).
 *
 * node_settings_apply is the one way a `key = value` (from the config file or a flag) reaches
 * node_config; node_settings_defaults sets every default from the same rows.
 * `sluiced --print-settings` prints the table (node_settings_print), which
 * tests/integration/test_config_doc.py holds docs/configuration.md to.
 */
#ifndef SL_NODE_SETTINGS_H
#define SL_NODE_SETTINGS_H

#include <stdio.h>

#include "node/config.h"

/* Apply one setting: NULL, or why the value (or the key: "unknown setting") is refused. The
 * texts are those sluiced always printed; the caller names the key and the file's line. */
const char *node_settings_apply(node_config *c, const char *key, const char *value);
/* Every row's default into c, which is zeroed first (its strings are not freed). */
void node_settings_defaults(node_config *c);
/* The cluster's keys alone (cluster/conf.h cl_conf_apply): 1 when key is one of them
 * (cluster_formation.* or cluster.*), with *err NULL when applied, else the reason; 0 when it
 * is not a cluster key. */
int node_settings_apply_cluster(node_cluster_conf *c, const char *key, const char *value,
                                const char **err);
void node_settings_cluster_defaults(node_cluster_conf *c);
/* One line a key: KEY TAB TYPE TAB DEFAULT TAB MEANING; an alias as ALIAS TAB alias TAB TAB
 * KEY. A TLS group's keys are printed one by one under its prefix. */
void node_settings_print(FILE *out);

#endif
