/*
 * tps: a ServerBench-like transactions-per-second workload (He & Yang, VC-RAID, section 4.2.1).
 *
 * Why C and static: the same program runs on the host and inside the lab VM, whose busybox
 * initramfs has no Python. raidlab builds it with `gcc -O2 -static` (raidlab/workloads/tps.py)
 * and copies it into the runner's scratch directory.
 *
 * What one run does (see tps.py's docstring for what is and is not ServerBench):
 *   prepare: a data set of DATASET bytes in SEGMENTS files seg<k>.dat under --dir, written in
 *            full and fsync'ed; every 512-byte block starts with its global block number so a
 *            read can be checked against the place it should come from.
 *   per client set (e.g. 1,2,3,4 clients): a server process listening on 127.0.0.1 accepts
 *            the clients and forks one handler per connection; each client process sends
 *            MIXES x MIX_TX transactions, one at a time (request, server does the pread/pwrite
 *            on the segment file, response). Reads or writes are drawn with the write ratio,
 *            segment and request-size-aligned offset uniformly (no locality). Transactions
 *            per second = all transactions of the set / (last client's end - common start).
 *   output: one JSON object per line on stdout ("event": "prepare" | "set" | "done").
 *
 * Exit status: 0 ok, 1 a transaction failed (I/O error, verify mismatch, lost connection),
 * 2 bad arguments. Children die with the parent (PR_SET_PDEATHSIG), so a timeout that kills
 * the parent releases everything.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TPS_VERSION "1"
#define BLOCK 512
#define MAGIC 0x54505331u /* "TPS1" */
#define MAX_CLIENTS 64
#define MAX_MIXES 64
#define MAX_SETS 16
#define MAX_REQUEST (64 * 1024)

enum { OP_READ = 1, OP_WRITE = 2, OP_QUIT = 3 };
enum { IO_DIRECT, IO_DSYNC, IO_BUFFERED };

struct request {
    uint32_t magic;
    uint32_t op;
    uint32_t segment;
    uint32_t length;
    uint64_t offset;
};

struct response {
    uint32_t magic;
    int32_t status; /* 0 or an errno */
    uint32_t length;
    uint32_t pad;
};

struct client_result {
    uint32_t client;
    uint32_t transactions;
    uint32_t reads;
    uint32_t writes;
    uint32_t verify_errors;
    int32_t error; /* first errno seen, 0 if none */
    double t_start, t_end;
    double latency_sum, latency_max;
    double mix_seconds[MAX_MIXES];
};

struct server_stats {
    uint64_t reads, writes, bytes_read, bytes_written;
    int32_t error;
    int32_t pad;
};

static struct {
    const char *dir;
    uint64_t dataset;
    unsigned segments;
    unsigned clients[MAX_SETS];
    unsigned nsets;
    unsigned mixes, mix_tx;
    unsigned request_size;
    double write_ratio;
    int io;
    uint64_t seed;
    int prepare, run;
} cfg;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "tps: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void usage(const char *msg)
{
    fprintf(stderr, "tps: %s\n"
            "usage: tps [--prepare] [--run] --dir DIR [--dataset-mb 128] [--segments 4]\n"
            "           [--clients 1,2,3,4] [--mixes 16] [--mix-tx 32] [--request-size 1024]\n"
            "           [--write-ratio 0.5] [--io direct|dsync|buffered] [--seed N]\n", msg);
    exit(2);
}

static uint64_t rng_next(uint64_t *s) /* xorshift64* */
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static double rng_unit(uint64_t *s) { return (rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static int readn(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? (errno = ECONNRESET, -1) : -1;
        p += r;
        n -= r;
    }
    return 0;
}

static int writen(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        p += r;
        n -= r;
    }
    return 0;
}

static void *aligned_buffer(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n))
        die("posix_memalign");
    memset(p, 0, n);
    return p;
}

static uint64_t segment_bytes(void) { return cfg.dataset / cfg.segments; }

static void segment_path(char *out, size_t n, unsigned seg)
{
    snprintf(out, n, "%s/seg%u.dat", cfg.dir, seg);
}

/* Every 512-byte block begins with its global block number and the magic. */
static void tag_blocks(char *buf, size_t len, uint64_t first_block, uint64_t stamp)
{
    for (size_t off = 0; off < len; off += BLOCK) {
        uint64_t tag[3] = {first_block + off / BLOCK, MAGIC, stamp};
        memcpy(buf + off, tag, sizeof tag);
    }
}

static unsigned check_blocks(const char *buf, size_t len, uint64_t first_block)
{
    unsigned bad = 0;
    for (size_t off = 0; off < len; off += BLOCK) {
        uint64_t tag[2];
        memcpy(tag, buf + off, sizeof tag);
        if (tag[0] != first_block + off / BLOCK || tag[1] != MAGIC)
            bad++;
    }
    return bad;
}

static int open_flags(void)
{
    switch (cfg.io) {
    case IO_DIRECT: return O_DIRECT;
    case IO_DSYNC: return O_DSYNC;
    default: return 0;
    }
}

static void prepare(void)
{
    const size_t chunk = 1 << 20;
    char *buf = aligned_buffer(chunk);
    uint64_t seg_bytes = segment_bytes();
    double t0 = now();
    for (unsigned s = 0; s < cfg.segments; s++) {
        char path[4096];
        segment_path(path, sizeof path, s);
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0)
            die(path);
        for (uint64_t off = 0; off < seg_bytes; off += chunk) {
            size_t n = seg_bytes - off < chunk ? seg_bytes - off : chunk;
            tag_blocks(buf, n, (s * seg_bytes + off) / BLOCK, 0);
            if (writen(fd, buf, n))
                die("write data set");
        }
        if (fsync(fd) || close(fd))
            die("fsync data set");
    }
    int dfd = open(cfg.dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(buf);
    printf("{\"event\": \"prepare\", \"version\": \"%s\", \"bytes\": %llu, \"segments\": %u, "
           "\"seconds\": %.6f}\n", TPS_VERSION, (unsigned long long)cfg.dataset, cfg.segments,
           now() - t0);
    fflush(stdout);
}

/* The lab VM's init may leave the loopback interface down; bring it up (root only). */
static void loopback_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0)
        return;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && !(ifr.ifr_flags & IFF_UP)) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    close(s);
}

static void serve_connection(int conn, int stats_fd)
{
    struct server_stats st = {0};
    int fds[MAX_CLIENTS];
    char *buf = aligned_buffer(MAX_REQUEST);
    for (unsigned s = 0; s < cfg.segments; s++) {
        char path[4096];
        segment_path(path, sizeof path, s);
        fds[s] = open(path, O_RDWR | open_flags());
        if (fds[s] < 0)
            die(path);
    }
    for (;;) {
        struct request rq;
        struct response rs = {MAGIC, 0, 0, 0};
        if (readn(conn, &rq, sizeof rq) || rq.magic != MAGIC) {
            st.error = errno ? errno : EPROTO;
            break;
        }
        if (rq.op == OP_QUIT) {
            writen(conn, &rs, sizeof rs);
            break;
        }
        if (rq.segment >= cfg.segments || rq.length > MAX_REQUEST ||
            rq.offset + rq.length > segment_bytes()) {
            st.error = EINVAL;
            break;
        }
        if (rq.op == OP_WRITE) {
            if (readn(conn, buf, rq.length)) {
                st.error = errno;
                break;
            }
            ssize_t n = pwrite(fds[rq.segment], buf, rq.length, rq.offset);
            if (n != (ssize_t)rq.length)
                rs.status = n < 0 ? errno : EIO;
            st.writes++;
            st.bytes_written += rq.length;
            if (writen(conn, &rs, sizeof rs))
                break;
        } else {
            ssize_t n = pread(fds[rq.segment], buf, rq.length, rq.offset);
            if (n != (ssize_t)rq.length)
                rs.status = n < 0 ? errno : EIO;
            else
                rs.length = rq.length;
            st.reads++;
            st.bytes_read += rq.length;
            if (writen(conn, &rs, sizeof rs) || (rs.length && writen(conn, buf, rs.length)))
                break;
        }
        if (rs.status && !st.error)
            st.error = rs.status;
    }
    writen(stats_fd, &st, sizeof st);
    _exit(st.error ? 1 : 0);
}

static void run_server(int listener, unsigned nclients, int stats_fd)
{
    pid_t handlers[MAX_CLIENTS];
    for (unsigned i = 0; i < nclients; i++) {
        int conn = accept(listener, NULL, NULL);
        if (conn < 0)
            die("accept");
        int one = 1;
        setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        handlers[i] = fork();
        if (handlers[i] < 0)
            die("fork");
        if (handlers[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(listener);
            serve_connection(conn, stats_fd);
        }
        close(conn);
    }
    close(listener);
    int failed = 0;
    for (unsigned i = 0; i < nclients; i++) {
        int status;
        if (waitpid(handlers[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
            failed = 1;
    }
    _exit(failed);
}

static void run_client(unsigned client, unsigned nclients, uint16_t port, int ready_fd,
                       int go_fd, int result_fd)
{
    struct client_result res;
    memset(&res, 0, sizeof res);
    res.client = client;
    uint64_t rng = cfg.seed * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)nclients << 32) ^ (client + 1);
    if (!rng)
        rng = 1;
    char *buf = aligned_buffer(MAX_REQUEST);
    uint64_t blocks_per_request_slot = segment_bytes() / cfg.request_size;

    int sock = socket(AF_INET, SOCK_STREAM, 0);
    if (sock < 0)
        die("socket");
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr))
        die("connect");
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char byte = 'r';
    if (writen(ready_fd, &byte, 1) || readn(go_fd, &byte, 1))
        die("start signal");

    res.t_start = now();
    for (unsigned m = 0; m < cfg.mixes && !res.error; m++) {
        double mix_start = now();
        for (unsigned t = 0; t < cfg.mix_tx; t++) {
            int is_write = rng_unit(&rng) < cfg.write_ratio;
            uint32_t seg = rng_next(&rng) % cfg.segments;
            uint64_t slot = rng_next(&rng) % blocks_per_request_slot;
            struct request rq = {MAGIC, is_write ? OP_WRITE : OP_READ, seg, cfg.request_size,
                                 slot * cfg.request_size};
            uint64_t first_block = (seg * segment_bytes() + rq.offset) / BLOCK;
            struct response rs;
            double t0 = now();
            if (is_write)
                tag_blocks(buf, cfg.request_size, first_block,
                           ((uint64_t)client << 32) | res.transactions);
            if (writen(sock, &rq, sizeof rq) ||
                (is_write && writen(sock, buf, cfg.request_size)) ||
                readn(sock, &rs, sizeof rs) || rs.magic != MAGIC) {
                res.error = errno ? errno : EPROTO;
                break;
            }
            if (rs.status) {
                res.error = rs.status;
                break;
            }
            if (!is_write) {
                if (rs.length != cfg.request_size || readn(sock, buf, rs.length)) {
                    res.error = errno ? errno : EPROTO;
                    break;
                }
                res.verify_errors += check_blocks(buf, rs.length, first_block);
                res.reads++;
            } else {
                res.writes++;
            }
            double lat = now() - t0;
            res.latency_sum += lat;
            if (lat > res.latency_max)
                res.latency_max = lat;
            res.transactions++;
        }
        res.mix_seconds[m] = now() - mix_start;
    }
    res.t_end = now();
    struct request quit = {MAGIC, OP_QUIT, 0, 0, 0};
    struct response rs;
    if (!res.error && (writen(sock, &quit, sizeof quit) || readn(sock, &rs, sizeof rs)))
        res.error = errno ? errno : EPROTO;
    close(sock);
    writen(result_fd, &res, sizeof res);
    _exit(res.error || res.verify_errors ? 1 : 0);
}

static int run_set(unsigned nclients)
{
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0)
        die("socket");
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof addr;
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, MAX_CLIENTS) ||
        getsockname(listener, (struct sockaddr *)&addr, &alen))
        die("listen on 127.0.0.1");
    uint16_t port = ntohs(addr.sin_port);

    int stats_pipe[2], ready_pipe[2], go_pipe[2], result_pipes[MAX_CLIENTS][2];
    if (pipe(stats_pipe) || pipe(ready_pipe) || pipe(go_pipe))
        die("pipe");
    pid_t server = fork();
    if (server < 0)
        die("fork");
    if (server == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(stats_pipe[0]);
        run_server(listener, nclients, stats_pipe[1]);
    }
    close(listener);
    close(stats_pipe[1]);

    pid_t clients[MAX_CLIENTS];
    for (unsigned c = 0; c < nclients; c++) {
        if (pipe(result_pipes[c]))
            die("pipe");
        clients[c] = fork();
        if (clients[c] < 0)
            die("fork");
        if (clients[c] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(stats_pipe[0]);
            close(result_pipes[c][0]);
            run_client(c, nclients, port, ready_pipe[1], go_pipe[0], result_pipes[c][1]);
        }
        close(result_pipes[c][1]);
    }
    char byte;
    for (unsigned c = 0; c < nclients; c++)
        if (readn(ready_pipe[0], &byte, 1))
            die("clients did not connect");
    double t0 = now();
    for (unsigned c = 0; c < nclients; c++)
        if (writen(go_pipe[1], "g", 1))
            die("start clients");

    struct client_result res[MAX_CLIENTS];
    int failed = 0;
    for (unsigned c = 0; c < nclients; c++) {
        if (readn(result_pipes[c][0], &res[c], sizeof res[c])) {
            memset(&res[c], 0, sizeof res[c]);
            res[c].error = EPIPE;
        }
        close(result_pipes[c][0]);
    }
    for (unsigned c = 0; c < nclients; c++) {
        int status;
        if (waitpid(clients[c], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
            failed = 1;
    }
    int status;
    if (waitpid(server, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
        failed = 1;
    struct server_stats total = {0}, st;
    while (readn(stats_pipe[0], &st, sizeof st) == 0) {
        total.reads += st.reads;
        total.writes += st.writes;
        total.bytes_read += st.bytes_read;
        total.bytes_written += st.bytes_written;
        if (st.error && !total.error)
            total.error = st.error;
    }
    close(stats_pipe[0]);
    close(ready_pipe[0]);
    close(ready_pipe[1]);
    close(go_pipe[0]);
    close(go_pipe[1]);

    uint64_t tx = 0, reads = 0, writes = 0, verify_errors = 0;
    double t_end = t0, lat_sum = 0, lat_max = 0;
    int error = 0;
    for (unsigned c = 0; c < nclients; c++) {
        tx += res[c].transactions;
        reads += res[c].reads;
        writes += res[c].writes;
        verify_errors += res[c].verify_errors;
        lat_sum += res[c].latency_sum;
        if (res[c].latency_max > lat_max)
            lat_max = res[c].latency_max;
        if (res[c].t_end > t_end)
            t_end = res[c].t_end;
        if (res[c].error && !error)
            error = res[c].error;
    }
    double seconds = t_end - t0;
    /* aggregate throughput of the set during mix m: sum over clients of their mix rates */
    double mix_min = 0, mix_max = 0, mix_sum = 0;
    for (unsigned m = 0; m < cfg.mixes; m++) {
        double rate = 0;
        for (unsigned c = 0; c < nclients; c++)
            if (res[c].mix_seconds[m] > 0)
                rate += cfg.mix_tx / res[c].mix_seconds[m];
        mix_sum += rate;
        if (m == 0 || rate < mix_min)
            mix_min = rate;
        if (rate > mix_max)
            mix_max = rate;
    }
    printf("{\"event\": \"set\", \"clients\": %u, \"transactions\": %llu, \"reads\": %llu, "
           "\"writes\": %llu, \"seconds\": %.6f, \"tps\": %.3f, \"mean_latency_ms\": %.4f, "
           "\"max_latency_ms\": %.4f, \"mix_tps_mean\": %.3f, \"mix_tps_min\": %.3f, "
           "\"mix_tps_max\": %.3f, \"server_reads\": %llu, \"server_writes\": %llu, "
           "\"server_bytes_read\": %llu, \"server_bytes_written\": %llu, "
           "\"verify_errors\": %llu, \"error\": \"%s\"}\n",
           nclients, (unsigned long long)tx, (unsigned long long)reads,
           (unsigned long long)writes, seconds, seconds > 0 ? tx / seconds : 0.0,
           tx ? lat_sum / tx * 1e3 : 0.0, lat_max * 1e3, mix_sum / cfg.mixes, mix_min, mix_max,
           (unsigned long long)total.reads, (unsigned long long)total.writes,
           (unsigned long long)total.bytes_read, (unsigned long long)total.bytes_written,
           (unsigned long long)verify_errors,
           error ? strerror(error) : (total.error ? strerror(total.error) : ""));
    fflush(stdout);
    return failed || error || total.error || verify_errors;
}

static unsigned long parse_uint(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s)
        usage(what);
    return v;
}

int main(int argc, char **argv)
{
    cfg.dataset = 128ULL << 20;
    cfg.segments = 4;
    cfg.clients[0] = 1;
    cfg.nsets = 1;
    cfg.mixes = 16;
    cfg.mix_tx = 32;
    cfg.request_size = 1024;
    cfg.write_ratio = 0.5;
    cfg.io = IO_DIRECT;
    cfg.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--prepare")) {
            cfg.prepare = 1;
            continue;
        }
        if (!strcmp(a, "--run")) {
            cfg.run = 1;
            continue;
        }
        if (!strcmp(a, "--version")) {
            printf("tps %s\n", TPS_VERSION);
            return 0;
        }
        if (!v)
            usage("missing value");
        i++;
        if (!strcmp(a, "--dir"))
            cfg.dir = v;
        else if (!strcmp(a, "--dataset-mb"))
            cfg.dataset = (uint64_t)parse_uint(v, "--dataset-mb") << 20;
        else if (!strcmp(a, "--segments"))
            cfg.segments = parse_uint(v, "--segments");
        else if (!strcmp(a, "--mixes"))
            cfg.mixes = parse_uint(v, "--mixes");
        else if (!strcmp(a, "--mix-tx"))
            cfg.mix_tx = parse_uint(v, "--mix-tx");
        else if (!strcmp(a, "--request-size"))
            cfg.request_size = parse_uint(v, "--request-size");
        else if (!strcmp(a, "--seed"))
            cfg.seed = parse_uint(v, "--seed");
        else if (!strcmp(a, "--write-ratio")) {
            char *end;
            cfg.write_ratio = strtod(v, &end);
            if (*end || cfg.write_ratio < 0 || cfg.write_ratio > 1)
                usage("--write-ratio must be within 0..1");
        } else if (!strcmp(a, "--io")) {
            if (!strcmp(v, "direct"))
                cfg.io = IO_DIRECT;
            else if (!strcmp(v, "dsync"))
                cfg.io = IO_DSYNC;
            else if (!strcmp(v, "buffered"))
                cfg.io = IO_BUFFERED;
            else
                usage("--io must be direct, dsync or buffered");
        } else if (!strcmp(a, "--clients")) {
            char *copy = strdup(v), *tok, *save = NULL;
            cfg.nsets = 0;
            for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (cfg.nsets == MAX_SETS)
                    usage("too many client sets");
                cfg.clients[cfg.nsets] = parse_uint(tok, "--clients");
                if (!cfg.clients[cfg.nsets] || cfg.clients[cfg.nsets] > MAX_CLIENTS)
                    usage("--clients: each count must be within 1..64");
                cfg.nsets++;
            }
            free(copy);
        } else
            usage("unknown option");
    }
    if (!cfg.dir)
        usage("--dir is required");
    if (!cfg.prepare && !cfg.run)
        usage("say --prepare, --run or both");
    if (!cfg.segments || cfg.segments > MAX_CLIENTS || !cfg.mixes || cfg.mixes > MAX_MIXES ||
        !cfg.mix_tx || !cfg.nsets)
        usage("segments 1..64, mixes 1..64, mix-tx and clients must be positive");
    if (!cfg.request_size || cfg.request_size % BLOCK || cfg.request_size > MAX_REQUEST)
        usage("--request-size must be a multiple of 512 up to 65536");
    if (cfg.dataset % ((uint64_t)cfg.segments * cfg.request_size) ||
        segment_bytes() < cfg.request_size)
        usage("the data set must split into segments of whole requests");
    signal(SIGPIPE, SIG_IGN);
    if (cfg.prepare)
        prepare();
    if (!cfg.run)
        return 0;
    loopback_up();
    int failed = 0;
    for (unsigned s = 0; s < cfg.nsets; s++)
        failed |= run_set(cfg.clients[s]);
    printf("{\"event\": \"done\", \"failed\": %s}\n", failed ? "true" : "false");
    return failed ? 1 : 0;
}
