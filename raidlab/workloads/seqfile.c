/* seqfile: write one file with write() calls of one block size, fsync, drop the page
 * cache, read it back with read() calls of the same size; print one JSON line per phase.
 *
 * McCormick (SA-RAID) 3.1: "all of the read and write tests were done by invoking the read
 * and write system calls followed by an fsync system call"; file sizes 64 KB, 1 MB, 256 MB,
 * 4 KB blocks. raidlab.workloads.seqfile runs it (on the host or in the lab VM, which has
 * no Python: hence a static C program).
 *
 *   seqfile --path P --bytes N [--block B] [--no-drop-caches] [--raw]
 *
 * --raw: P is a block device (the paper's raw-device partition test): no create or unlink,
 * the file is its first N bytes. A phase's time runs from open to the end of fsync (write)
 * or of the last read (read), so a cold open's inode read is in it. The page cache is
 * dropped between the phases (sync, then 3 > /proc/sys/vm/drop_caches; POSIX_FADV_DONTNEED
 * on the file as well). Every block is a pattern of its own index, checked on read.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "seqfile: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void fill(unsigned char *buf, size_t block, uint64_t index) {
    for (size_t i = 0; i + 8 <= block; i += 8) {
        uint64_t v = index * 0x9E3779B97F4A7C15ull + i;
        memcpy(buf + i, &v, 8);
    }
}

static void drop_caches(int verbose) {
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd < 0 || write(fd, "3\n", 2) != 2) {
        if (verbose) fprintf(stderr, "seqfile: cannot drop caches: %s\n", strerror(errno));
        if (fd >= 0) close(fd);
        exit(1);
    }
    close(fd);
}

int main(int argc, char **argv) {
    const char *path = NULL;
    long long bytes = -1, block = 4096;
    int drop = 1, raw = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--path") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc) bytes = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--block") && i + 1 < argc) block = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--no-drop-caches")) drop = 0;
        else if (!strcmp(argv[i], "--raw")) raw = 1;
        else { fprintf(stderr, "seqfile: unknown argument %s\n", argv[i]); return 2; }
    }
    if (!path || bytes <= 0 || block <= 0 || bytes % block || block % 8) {
        fprintf(stderr, "usage: seqfile --path P --bytes N [--block B] [--no-drop-caches] [--raw]"
                        " (N a multiple of B, B of 8)\n");
        return 2;
    }
    unsigned char *buf = malloc(block), *want = malloc(block);
    if (!buf || !want) die("malloc");
    long long blocks = bytes / block;

    double t0 = now();
    int fd = open(path, raw ? O_WRONLY : (O_WRONLY | O_CREAT | O_TRUNC), 0644);
    if (fd < 0) die("open for writing");
    for (long long b = 0; b < blocks; b++) {
        fill(buf, block, b);
        if (write(fd, buf, block) != block) die("write");
    }
    if (fsync(fd) != 0) die("fsync");
    double t1 = now();
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (close(fd) != 0) die("close");
    printf("{\"phase\": \"write\", \"bytes\": %lld, \"block\": %lld, \"seconds\": %.9f}\n", bytes, block, t1 - t0);
    fflush(stdout);

    if (drop) drop_caches(1);
    double t2 = now();
    fd = open(path, O_RDONLY);
    if (fd < 0) die("open for reading");
    long long bad = 0;
    for (long long b = 0; b < blocks; b++) {
        ssize_t got = read(fd, buf, block);
        if (got != block) die("read");
        fill(want, block, b);
        if (memcmp(buf, want, block)) bad++;
    }
    double t3 = now();
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    printf("{\"phase\": \"read\", \"bytes\": %lld, \"block\": %lld, \"seconds\": %.9f, \"bad_blocks\": %lld}\n",
           bytes, block, t3 - t2, bad);
    return bad ? 3 : 0;
}
