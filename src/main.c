/* main.c - sluiced: parse settings, prepare the data directory, start the broker, run the
 * event loop until SIGTERM / SIGINT, then close every connection with 320 and exit 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "broker/broker.h"
#include "core/log.h"
#include "core/version.h"
#include "mgmt/mgmt.h"
#include "msmq/server.h"
#include "store/log.h"

int main(int argc, char **argv)
{
    sl_config cfg;
    sl_config_defaults(&cfg);
    int rc = sl_config_from_args(&cfg, argc, argv);
    if (rc != 0) {
        sl_config_free(&cfg);
        return rc > 0 ? 0 : 2;
    }
    sl_log_min_level = cfg.log_level;
    /* Tests only: slow or failing syncs (store/log.h). */
    const char *fault = getenv("SLUICE_FAULT");
    if (fault && *fault) {
        char err[256];
        if (st_fault_configure(fault, err, sizeof err) < 0) {
            sl_error("%s", err);
            sl_config_free(&cfg);
            return 2;
        }
        sl_warn("SLUICE_FAULT=%s: store syncs are made slow or failing on purpose", fault);
    }
    if (mkdir(cfg.data_dir, 0750) < 0 && errno != EEXIST) {
        sl_error("cannot create data directory %s: %s", cfg.data_dir, strerror(errno));
        sl_config_free(&cfg);
        return 1;
    }
    sl_info("%s %s starting: node %s, data directory %s", SLUICE_PRODUCT, SLUICE_VERSION,
            cfg.node_name, cfg.data_dir);
    broker *b = broker_new(&cfg);
    if (!b || broker_listen(b) < 0) {
        broker_free(b);
        sl_config_free(&cfg);
        return 1;
    }
    mgmt *m = NULL;
    if (cfg.mgmt_port >= 0) {
        char err[256];
        m = mgmt_start(b, err, sizeof err);
        if (!m) {
            sl_error("management API: %s", err);
            broker_free(b);
            sl_config_free(&cfg);
            return 1;
        }
    }
    char merr[256];
    msmq_server *mq = msmq_start(b, merr, sizeof merr);
    if (!mq && merr[0]) {
        sl_error("listeners.msmq: %s", merr);
        mgmt_stop(m);
        broker_free(b);
        sl_config_free(&cfg);
        return 1;
    }
    if (cfg.cluster.enabled && broker_cluster_start(b, m ? mgmt_port(m) : 0) < 0) {
        msmq_stop(mq);
        mgmt_stop(m);
        broker_free(b);
        sl_config_free(&cfg);
        return 1;
    }
    broker_run(b);
    msmq_stop(mq);
    mgmt_stop(m);
    broker_free(b);
    sl_config_free(&cfg);
    sl_info("stopped");
    return 0;
}
