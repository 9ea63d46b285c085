/* version.h - the product name and version advertised to clients and tools. */
#ifndef SL_CORE_VERSION_H
#define SL_CORE_VERSION_H

#define SLUICE_PRODUCT "Sluice"
#define SLUICE_VERSION "0.1.0"
/* The RabbitMQ release whose stream protocol the stream door speaks, as its PeerProperties
 * "version": RabbitMQ's stream clients turn features on by that version (3.13: filtering,
 * CreateSuperStream and DeleteSuperStream), not by ExchangeCommandVersions alone. */
#define SLUICE_RABBITMQ_COMPAT "3.13.7"

#endif
