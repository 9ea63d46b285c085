/* fuzz_mirror.c - libFuzzer target for the mirror's groups (src/cluster/mirror.c): the bytes a
 * follower takes from the replication port and replays into its data directory. Each input is
 * checked as it is (nearly always refused: its CRC), then again with a valid header and CRC
 * patched in, so the op decoder and cl_mirror_apply run on every shape of op list. Applying
 * happens in a fresh directory inside a private temp directory; afterwards nothing may exist
 * in the private directory but that one directory (no name escapes it), and nothing under it
 * may be a symbolic link. A name the decoder accepted must pass cl_mirror_name_ok. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/mirror.h"
#include "store/log.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char base[64], inner[128];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    return remove(p);
}

static int bad_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    CHECK(flag != FTW_SL && flag != FTW_SLN);
    return 0;
}

static void cleanup(void)
{
    nftw(base, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base[0]) {
        snprintf(base, sizeof base, "/tmp/fuzz-mirror-XXXXXX");
        CHECK(mkdtemp(base) != NULL);
        snprintf(inner, sizeof inner, "%s/d", base);
        atexit(cleanup);
    }
    char err[256];
    uint32_t nops;
    cl_mirror_group_check(data, size, NULL, NULL, NULL, &nops, err, sizeof err);
    if (size < 40 || size > (1u << 20))
        return 0;
    uint8_t *g = malloc(size);
    memcpy(g, data, size);
    memcpy(g, "SLMG", 4);
    g[4] = 1;
    g[5] = g[6] = g[7] = 0;
    /* ops count: small, from the input */
    g[33] = g[34] = g[35] = 0;
    uint32_t crc = st_crc32c(0, g, size - 4);
    for (int i = 0; i < 4; i++)
        g[size - 4 + i] = (uint8_t)(crc >> (8 * i));
    CHECK(mkdir(inner, 0755) == 0);
    int dfd = open(inner, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    int ok = cl_mirror_group_check(g, size, NULL, NULL, NULL, &nops, err, sizeof err) == 0;
    int rc = cl_mirror_apply_ex(dfd, g, size, CL_MIRROR_APPLY_NOSYNC, SIZE_MAX, err, sizeof err);
    CHECK(ok || rc == -1);
    close(dfd);
    /* nothing escaped: the private directory holds only the one we applied into */
    DIR *d = opendir(base);
    CHECK(d != NULL);
    struct dirent *de;
    while ((de = readdir(d)))
        CHECK(!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, "d"));
    closedir(d);
    nftw(inner, bad_cb, 16, FTW_PHYS);
    nftw(inner, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(g);
    return 0;
}
