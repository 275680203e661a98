"""Command lines for the kernel's caches and the parsing of what they report: device mapper's
writecache and cache targets (dmsetup) and bcache (make-bcache and sysfs). Pure functions,
as raidlab.baselines.mdadm's: the same shell lines run in the lab VM or natively, and the
same parsers read what either place prints.

The targets' tables and status lines follow the kernel's documentation
(Documentation/admin-guide/device-mapper/writecache.rst and cache.rst, Documentation/
admin-guide/bcache.rst); each parser names the fields as the documentation does and keeps
what it does not know as `extra`, so a newer kernel's added counters show up, not break.
"""

from __future__ import annotations

import shlex

from raidlab.baselines import sysfs
from raidlab.errors import UsageError

SECTOR = 512
DM_PREFIX = "raidlab-"  # dmsetup names of the toolkit's devices (raidlab-wc, raidlab-cache, ...)
WRITECACHE_OPTIONS = ("high_watermark", "low_watermark", "writeback_jobs", "autocommit_blocks", "autocommit_time")
CACHE_MODES = ("writeback", "writethrough", "passthrough")
BCACHE_MODES = ("writeback", "writethrough", "writearound", "none")
# dm-cache's block: a multiple of 32 KiB from 32 KiB to 1 GiB (cache.rst)
CACHE_BLOCK_MIN, CACHE_BLOCK_MAX, CACHE_BLOCK_GRAIN = 32 << 10, 1 << 30, 32 << 10


def dm_name(role: str) -> str:
    return DM_PREFIX + role


def dm_path(role: str) -> str:
    return "/dev/mapper/" + dm_name(role)


def dmsetup_create(role: str, table: str) -> list[str]:
    """`dmsetup create` of one device from a one-line table. No udev runs in the lab VM: the
    create does not wait for it, and `mknodes` makes /dev/mapper/NAME (libdevmapper leaves
    node creation to udev when it is built with udev support, as Debian's is)."""
    return ["sh", "-c", f"dmsetup create --noudevsync {dm_name(role)} --table {shlex.quote(table)} && "
                        f"dmsetup mknodes {dm_name(role)}"]


def dmsetup_remove(role: str) -> list[str]:
    return ["dmsetup", "remove", "--noudevsync", dm_name(role)]


def dmsetup_status(role: str) -> list[str]:
    return ["dmsetup", "status", dm_name(role)]


def modprobe(*modules: str) -> list[str]:
    return ["modprobe", "-a", *modules]


# -- dm-writecache ---------------------------------------------------------------------


def writecache_table(origin_sectors: int, origin: str, cache: str, block_size: int, options: dict) -> str:
    """The writecache target in SSD mode ("s"): writes land on `cache` and are written back to
    `origin` between the watermarks (percent of the cache in use)."""
    if block_size not in (512, 1024, 2048, 4096):
        raise UsageError(f"dm-writecache's block size is 512, 1024, 2048 or 4096 bytes, not {block_size}")
    optional: list[str] = []
    for key in WRITECACHE_OPTIONS:
        if options.get(key) is not None:
            optional += [key, str(int(options[key]))]
    return " ".join(["0", str(origin_sectors), "writecache", "s", origin, cache, str(block_size),
                     str(len(optional)), *optional])


WRITECACHE_STATUS = ("error", "blocks", "free_blocks", "writeback_blocks", "read_blocks", "read_hits",
                     "write_blocks", "write_hits_uncommitted", "write_hits_committed", "write_bypass",
                     "write_allocated", "write_blocked_on_freelist", "flushes", "discarded_blocks")


def parse_writecache_status(line: str) -> dict:
    """`dmsetup status` of a writecache device: `START LENGTH writecache F1 F2 ...`, the
    fields named as writecache.rst lists them."""
    words = line.split()
    if len(words) < 4 or words[2] != "writecache":
        raise ValueError(f"not a writecache status line: {line!r}")
    values = [int(w) for w in words[3:]]
    out: dict = dict(zip(WRITECACHE_STATUS, values))
    if len(values) > len(WRITECACHE_STATUS):
        out["extra"] = values[len(WRITECACHE_STATUS):]
    return out


# -- dm-cache --------------------------------------------------------------------------


def check_cache_block(block: int) -> None:
    if not CACHE_BLOCK_MIN <= block <= CACHE_BLOCK_MAX or block % CACHE_BLOCK_GRAIN:
        raise UsageError(f"dm-cache's block of {block} bytes is not a multiple of 32K from 32K to 1G",
                         hint="e.g. -o block=64K")


def linear_table(sectors: int, device: str, offset_sectors: int) -> str:
    return f"0 {sectors} linear {device} {offset_sectors}"


def cache_table(origin_sectors: int, metadata: str, cache: str, origin: str, block: int, mode: str,
                policy: str = "smq") -> str:
    """The cache target: blocks of `origin` promoted to `cache` by `policy`, its mapping kept
    on `metadata`; `mode` writeback, writethrough or passthrough (one feature argument)."""
    check_cache_block(block)
    if mode not in CACHE_MODES:
        raise UsageError(f"dm-cache's mode is one of {', '.join(CACHE_MODES)}, not {mode!r}")
    return f"0 {origin_sectors} cache {metadata} {cache} {origin} {block // SECTOR} 1 {mode} {policy} 0"


def parse_cache_status(line: str) -> dict:
    """`dmsetup status` of a cache device (cache.rst, "Status"): metadata and cache blocks
    used of total, read and write hits and misses, demotions, promotions, dirty blocks, then
    the features, core and policy arguments and the mode words."""
    words = line.split()
    if len(words) < 14 or words[2] != "cache":
        raise ValueError(f"not a cache status line: {line!r}")
    f = words[3:]
    meta_used, meta_total = (int(x) for x in f[1].split("/"))
    used, total = (int(x) for x in f[3].split("/"))
    out = {"metadata_block_sectors": int(f[0]), "metadata_used": meta_used, "metadata_total": meta_total,
           "block_sectors": int(f[2]), "blocks_used": used, "blocks_total": total,
           "read_hits": int(f[4]), "read_misses": int(f[5]), "write_hits": int(f[6]), "write_misses": int(f[7]),
           "demotions": int(f[8]), "promotions": int(f[9]), "dirty": int(f[10])}
    nfeatures = int(f[11])
    out["features"] = f[12:12 + nfeatures]
    rest = f[12 + nfeatures:]
    if rest:
        ncore = int(rest[0])
        out["core"] = rest[1:1 + ncore]
        rest = rest[1 + ncore:]
    if rest:
        out["policy"] = rest[0]
        out["tail"] = rest[1:]
    return out


# -- bcache ----------------------------------------------------------------------------


BCACHE_BUCKET = 512 << 10   # make-bcache's default bucket
# The kernel refuses a cache device of 512 buckets or fewer (cache_alloc in
# drivers/md/bcache/super.c: "ca->sb.nbuckets is too small"); make-bcache alone takes 128.
BCACHE_MIN_BUCKETS = 513


def make_bcache(backing: str, cache: str, mode: str, bucket: int | None = None) -> list[str]:
    """Format `backing` and `cache` together, so the backing device names the cache set and
    attaches to it when both are registered (bcache.rst); `bucket` in bytes, None for
    make-bcache's default."""
    if mode not in BCACHE_MODES:
        raise UsageError(f"bcache's cache_mode is one of {', '.join(BCACHE_MODES)}, not {mode!r}")
    sized = ["--bucket", f"{bucket // 1024}k"] if bucket else []
    return ["make-bcache", *(["--writeback"] if mode == "writeback" else []), *sized, "-B", backing, "-C", cache]


def check_bcache_buckets(cache_bytes: int, bucket: int | None) -> None:
    """Refuse a cache device the kernel would refuse: too few buckets."""
    size = bucket or BCACHE_BUCKET
    if bucket is not None and (bucket < 4096 or bucket & (bucket - 1)):
        raise UsageError(f"bcache's bucket of {bucket} bytes is not a power of two of at least 4K")
    if cache_bytes // size < BCACHE_MIN_BUCKETS:
        raise UsageError(f"bcache's cache device of {cache_bytes >> 20} MiB holds {cache_bytes // size} buckets of "
                         f"{size >> 10} KiB; the kernel needs more than 512",
                         hint=f"give bucket={_pow2_floor(max(4096, cache_bytes // BCACHE_MIN_BUCKETS)) >> 10}K or less, "
                              f"or cache_size={-(-size * BCACHE_MIN_BUCKETS >> 20)}M or more")


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def bcache_register(device: str) -> list[str]:
    """Register a formatted device with the kernel (what udev's bcache-register does)."""
    return ["sh", "-c", f"echo {shlex.quote(device)} > /sys/fs/bcache/register"]


BCACHE_SYSFS = "/sys/block/bcache0/bcache"
BCACHE_DEVICE = "/dev/bcache0"
BCACHE_SETTINGS = ("cache_mode", "sequential_cutoff", "writeback_percent")
BCACHE_FILES = ("state", "cache_mode", "dirty_data", "sequential_cutoff", "writeback_percent",
                "stats_total/cache_hits", "stats_total/cache_misses", "stats_total/cache_bypass_hits",
                "stats_total/cache_bypass_misses", "stats_total/cache_hit_ratio")


def bcache_set(name: str, value: str) -> list[str]:
    if name not in BCACHE_SETTINGS:
        raise UsageError(f"bcache has no setting {name!r} here", hint=f"settings: {', '.join(BCACHE_SETTINGS)}")
    return ["sh", "-c", f"echo {shlex.quote(str(value))} > {BCACHE_SYSFS}/{name}"]


def bcache_stop() -> list[str]:
    """Stop the backing device, then every cache set, and wait until the kernel has let go of
    both (a stop is asynchronous: the sysfs directories go when it is done)."""
    return ["sh", "-c", f"[ -e {BCACHE_SYSFS}/stop ] && echo 1 > {BCACHE_SYSFS}/stop; "
                        "for s in /sys/fs/bcache/*-*-*-*-*; do [ -e \"$s/stop\" ] && echo 1 > \"$s/stop\"; done; "
                        "i=0; while [ $i -lt 300 ]; do "
                        "[ ! -e /sys/block/bcache0 ] && ! ls -d /sys/fs/bcache/*-*-*-*-* >/dev/null 2>&1 && exit 0; "
                        "i=$((i + 1)); sleep 0.1; done; echo 'bcache did not stop in 30 s' >&2; exit 1"]


def bcache_read_script() -> str:
    """One shell line that prints `NAME=VALUE` for each of BCACHE_FILES the device has."""
    return sysfs.read_script(BCACHE_SYSFS, BCACHE_FILES)


def parse_bcache(text: str) -> dict:
    """BCACHE_FILES as bcache_read_script printed them, the totals without their directory."""
    return {name.replace("stats_total/", ""): value for name, value in sysfs.parse(text, BCACHE_FILES).items()}


def wait_for(path: str, seconds: float = 30.0) -> list[str]:
    """A shell line that waits for `path` to exist (a device node the kernel makes)."""
    tries = int(seconds * 10)
    return ["sh", "-c", f"i=0; while [ ! -e {shlex.quote(path)} ]; do i=$((i + 1)); "
                        f"[ $i -gt {tries} ] && echo '{path} did not appear' >&2 && exit 1; sleep 0.1; done"]
