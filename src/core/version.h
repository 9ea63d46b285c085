/* version.h - the product name and version advertised to clients and tools. */
#ifndef SL_CORE_VERSION_H
#define SL_CORE_VERSION_H

#define SLUICE_PRODUCT "Sluice"
#define SLUICE_VERSION "0.1.0"

#endif
