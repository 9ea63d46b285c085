/* console_assets.h - the web console's files (and the .md files of docs/) as built into
 * sluiced: a table generated at build time by scripts/embed-console.sh
 * ($(BUILD)/gen/console_assets.c), read by static.c. Paths start with "/" and name files only (no
 * directories, no ".."). */
#ifndef SL_MGMT_CONSOLE_ASSETS_H
#define SL_MGMT_CONSOLE_ASSETS_H

struct console_asset {
    const char *path;  /* "/index.html", "/js/app.js" */
    const char *ctype; /* Content-Type */
    const char *etag;  /* quoted, from the content's SHA-256 */
    const unsigned char *data;
    unsigned len;
};

extern const struct console_asset console_assets[];
extern const unsigned console_n_assets;

#endif
