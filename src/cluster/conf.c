/* conf.c - the cluster's settings under the cluster's names (the keys are listed in conf.h).
 * What each key takes, its default and its error text are rows of the settings table
 * (node/settings.c); what must hold together and the secret file are node/config.c's, since
 * the node reads its configuration before any cluster code runs. */
#include "cluster/conf.h"

#include "node/settings.h"

void cl_conf_defaults(cl_conf *c)
{
    node_cluster_conf_defaults(c);
}

void cl_conf_free(cl_conf *c)
{
    node_cluster_conf_free(c);
}

int cl_conf_apply(cl_conf *c, const char *key, const char *value, const char **err)
{
    return node_settings_apply_cluster(c, key, value, err);
}

const char *cl_conf_check(const cl_conf *c)
{
    return node_cluster_conf_check(c);
}

int cl_conf_load_secret(cl_conf *c, char *err, size_t errlen)
{
    return node_cluster_conf_load_secret(c, err, errlen);
}
