/* replay: issue a block trace's requests on a device at their arrival times (open loop) and
 * print their response times as one JSON object.
 *
 *   replay --device D --trace T [--threads N] [--scale S]
 *
 * T is text, one request per line, in time order: `TIME OP OFFSET LENGTH` (TIME in seconds
 * from the trace's start, OP r or w, OFFSET and LENGTH in bytes, multiples of 512). A
 * dispatcher thread waits for each request's arrival time (divided by S, default 1) and hands
 * it to a pool of N worker threads (default 64), each of which does one pread or pwrite with
 * O_DIRECT. A request's response time runs from its arrival time to the end of its call, so
 * time spent waiting for a free worker counts, as a queue in front of a disk counts in the
 * papers' simulators; `late` counts the requests dispatched more than 1 ms after their
 * arrival (the replayer could not keep up). Written data is a pattern of the request's
 * index; nothing is read back for checking (a replay measures time, fio --verify checks data).
 *
 * raidlab.workloads.replay generates the trace (a synthetic profile or a trace file in any of
 * raidlab's formats), runs this on the host or in the lab VM (which has no Python: hence a
 * static C program) and reads its output.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    double time;
    uint64_t offset;
    uint32_t length;
    char op;
    double arrival, done;
} request_t;

static request_t *reqs;
static size_t nreqs, capacity;
static size_t next_ready, dispatched;  /* requests [next_ready, dispatched) wait for a worker */
static int finished_dispatch;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static int fd;
static uint32_t max_length = 4096;
static int failed_errno;
static size_t failed_index;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "replay: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void sleep_until(double when) {
    double left = when - now();
    if (left <= 0) return;
    struct timespec ts = {(time_t)left, (long)((left - (time_t)left) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void read_trace(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die(path);
    char line[256];
    size_t lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        request_t r = {0};
        unsigned long long offset;
        unsigned long length;
        if (sscanf(line, "%lf %c %llu %lu", &r.time, &r.op, &offset, &length) != 4 ||
            (r.op != 'r' && r.op != 'w') || offset % 512 || length % 512 || length == 0) {
            fprintf(stderr, "replay: %s line %zu: not 'TIME r|w OFFSET LENGTH' in sectors: %s", path, lineno, line);
            exit(2);
        }
        r.offset = offset;
        r.length = (uint32_t)length;
        if (nreqs && r.time < reqs[nreqs - 1].time) {
            fprintf(stderr, "replay: %s line %zu: time goes backwards\n", path, lineno);
            exit(2);
        }
        if (nreqs == capacity) {
            capacity = capacity ? capacity * 2 : 4096;
            reqs = realloc(reqs, capacity * sizeof *reqs);
            if (!reqs) die("realloc");
        }
        if (r.length > max_length) max_length = r.length;
        reqs[nreqs++] = r;
    }
    fclose(f);
}

static void *worker(void *arg) {
    (void)arg;
    void *buf;
    if (posix_memalign(&buf, 4096, max_length)) die("posix_memalign");
    for (;;) {
        pthread_mutex_lock(&lock);
        while (next_ready == dispatched && !finished_dispatch) pthread_cond_wait(&ready, &lock);
        if (next_ready == dispatched) {
            pthread_mutex_unlock(&lock);
            break;
        }
        size_t i = next_ready++;
        pthread_mutex_unlock(&lock);
        request_t *r = &reqs[i];
        ssize_t got;
        if (r->op == 'w') {
            memset(buf, (int)(i & 0xff), r->length);
            got = pwrite(fd, buf, r->length, (off_t)r->offset);
        } else {
            got = pread(fd, buf, r->length, (off_t)r->offset);
        }
        r->done = now();
        if (got != (ssize_t)r->length) {
            pthread_mutex_lock(&lock);
            if (!failed_errno) {
                failed_errno = got < 0 ? errno : EIO;
                failed_index = i;
            }
            pthread_mutex_unlock(&lock);
        }
    }
    free(buf);
    return NULL;
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void summary(const char *name, char op) {
    size_t n = 0;
    double *lat = malloc((nreqs ? nreqs : 1) * sizeof *lat);
    double sum = 0;
    for (size_t i = 0; i < nreqs; i++) {
        if (op && reqs[i].op != op) continue;
        lat[n] = (reqs[i].done - reqs[i].arrival) * 1e3;
        sum += lat[n++];
    }
    qsort(lat, n, sizeof *lat, by_double);
    if (n)
        printf("\"%s\": {\"count\": %zu, \"mean_ms\": %.4f, \"p50_ms\": %.4f, \"p99_ms\": %.4f, \"max_ms\": %.4f}",
               name, n, sum / n, lat[n / 2], lat[(size_t)(0.99 * (n - 1))], lat[n - 1]);
    else
        printf("\"%s\": {\"count\": 0}", name);
    free(lat);
}

int main(int argc, char **argv) {
    const char *device = NULL, *trace = NULL;
    int threads = 64;
    double scale = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc) scale = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: replay --device D --trace T [--threads N] [--scale S]\n");
            return 2;
        }
    }
    if (!device || !trace || threads < 1 || scale <= 0) {
        fprintf(stderr, "usage: replay --device D --trace T [--threads N] [--scale S]\n");
        return 2;
    }
    read_trace(trace);
    fd = open(device, O_RDWR | O_DIRECT);
    if (fd < 0) die(device);
    pthread_t *pool = calloc((size_t)threads, sizeof *pool);
    for (int t = 0; t < threads; t++)
        if (pthread_create(&pool[t], NULL, worker, NULL)) die("pthread_create");
    double start = now();
    size_t late = 0;
    for (size_t i = 0; i < nreqs; i++) {
        double arrival = start + reqs[i].time / scale;
        sleep_until(arrival);
        reqs[i].arrival = arrival;
        if (now() - arrival > 1e-3) late++;
        pthread_mutex_lock(&lock);
        dispatched = i + 1;
        pthread_cond_signal(&ready);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_lock(&lock);
    finished_dispatch = 1;
    pthread_cond_broadcast(&ready);
    pthread_mutex_unlock(&lock);
    for (int t = 0; t < threads; t++) pthread_join(pool[t], NULL);
    double elapsed = now() - start;
    if (failed_errno) {
        fprintf(stderr, "replay: request %zu (%c %llu+%u) failed: %s\n", failed_index, reqs[failed_index].op,
                (unsigned long long)reqs[failed_index].offset, reqs[failed_index].length, strerror(failed_errno));
        return 1;
    }
    printf("{\"requests\": %zu, \"elapsed_s\": %.3f, \"late\": %zu, \"threads\": %d, \"scale\": %g, ",
           nreqs, elapsed, late, threads, scale);
    summary("all", 0);
    printf(", ");
    summary("read", 'r');
    printf(", ");
    summary("write", 'w');
    printf("}\n");
    close(fd);
    return 0;
}
