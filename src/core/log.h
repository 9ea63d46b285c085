/* log.h - leveled logging to stderr, one line per event. */
#ifndef SL_CORE_LOG_H
#define SL_CORE_LOG_H

enum sl_log_level { SL_LOG_DEBUG = 0, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR };

extern int sl_log_min_level;
/* Parse "debug" / "info" / "warning" / "error" (also "warn"); -1 if unknown. */
int sl_log_level_parse(const char *s);
void sl_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sl_debug(...)                                                                              \
    do {                                                                                           \
        if (sl_log_min_level <= SL_LOG_DEBUG)                                                      \
            sl_log(SL_LOG_DEBUG, __VA_ARGS__);                                                     \
    } while (0)
#define sl_info(...) sl_log(SL_LOG_INFO, __VA_ARGS__)
#define sl_warn(...) sl_log(SL_LOG_WARN, __VA_ARGS__)
#define sl_error(...) sl_log(SL_LOG_ERROR, __VA_ARGS__)

#endif
