/* clock.h - monotonic and wall-clock time in milliseconds. */
#ifndef SL_CORE_CLOCK_H
#define SL_CORE_CLOCK_H

#include <stdint.h>

uint64_t sl_now_ms(void);  /* monotonic: timers, TTLs, heartbeats */
uint64_t sl_wall_ms(void); /* wall clock: timestamps shown to users */
uint64_t sl_now_us(void);  /* monotonic, finer: budgets of work within one loop turn */

#endif
