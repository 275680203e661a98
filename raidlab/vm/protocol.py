"""The lab VM's command channel: framed messages over one virtio-serial port.

Why this shape:
* virtio-serial, not the serial console: the port is a raw byte pipe (no tty line discipline,
  no echo, no CR/LF rewriting, binary-safe) and nothing else writes to it, while ttyS0 stays
  free for the kernel log. The guest side needs only the virtio_console module.
* The guest side is a busybox `sh` loop (GUEST_AGENT below), so the initramfs needs no
  compiler and no interpreter. That dictates the framing: requests are single ASCII lines
  (the shell's `read` takes one line; arguments are base64 so they can hold anything), and
  replies are a header line carrying the byte counts of the raw payloads that follow, so the
  host never has to guess where stdout ends.
* A command's stdout and stderr are spooled in the guest's tmpfs and sent whole after it
  exits: exit code, stdout and stderr come back separately and exactly, at the cost of RAM in
  the guest for a command with very large output (fetch big results with GET instead, which
  streams a file).

Requests (host -> guest), one line each:
    RUN <id> <base64 script>                 run the script with `sh` in /root, stdin /dev/null
    PUT <id> <size> <base64 path> <mode>     followed by exactly <size> raw bytes
    GET <id> <base64 path>                   send a file back
    OFF <id>                                 sync and power off
Replies (guest -> host), a header line then raw payloads:
    @@RAIDLAB READY key=value ...            once, when the agent starts
    @@RAIDLAB DONE <id> <rc> <n_out> <n_err> then n_out bytes of stdout, n_err of stderr
    @@RAIDLAB STORED <id> <rc>
    @@RAIDLAB FILE <id> <size>               then size bytes; size -1: no such readable file
    @@RAIDLAB BYE <id>
    @@RAIDLAB ERROR <id> <reason>
"""

from __future__ import annotations

import base64
import dataclasses
import shlex

# Exit status busybox `timeout -s KILL` reports for a command it killed (128 + SIGKILL).
GUEST_TIMEOUT_STATUS = 137
# The guest's scratch directory: an ext4 on the lab VM's scratch disk (a sparse file of the
# lab, raidlab.vm.hosted), never the array under test and not the guest's RAM.
GUEST_SCRATCH = "/root/scratch"
HEADER_PREFIX = b"@@RAIDLAB "
MAX_HEADER = 4096


class ProtocolError(ValueError):
    """The byte stream from the guest does not follow the framing."""


@dataclasses.dataclass(frozen=True)
class Frame:
    verb: str
    args: tuple[str, ...]
    payloads: tuple[bytes, ...] = ()

    @property
    def request_id(self) -> int | None:
        if self.verb == "READY" or not self.args:
            return None
        return int(self.args[0])

    def fields(self) -> dict[str, str]:
        """key=value arguments (the READY frame)."""
        out = {}
        for arg in self.args:
            key, _, value = arg.partition("=")
            out[key] = value
        return out


def _b64(data: bytes) -> bytes:
    return base64.b64encode(data)


def encode_run(request_id: int, script: str) -> bytes:
    return b"RUN %d %s\n" % (request_id, _b64(script.encode()))


def encode_put(request_id: int, guest_path: str, data: bytes, mode: int = 0o644) -> bytes:
    return b"PUT %d %d %s %o\n" % (request_id, len(data), _b64(guest_path.encode()), mode) + data


def encode_get(request_id: int, guest_path: str) -> bytes:
    return b"GET %d %s\n" % (request_id, _b64(guest_path.encode()))


def encode_off(request_id: int) -> bytes:
    return b"OFF %d\n" % request_id


def _payload_sizes(verb: str, args: tuple[str, ...]) -> tuple[int, ...]:
    try:
        if verb == "DONE":
            return (int(args[2]), int(args[3]))
        if verb == "FILE":
            size = int(args[1])
            return (size,) if size >= 0 else ()
        if verb in ("READY", "STORED", "BYE", "ERROR"):
            return ()
    except (IndexError, ValueError) as exc:
        raise ProtocolError(f"malformed {verb} header: {' '.join(args)!r}") from exc
    raise ProtocolError(f"unknown reply {verb!r}")


class FrameReader:
    """Turns the guest's byte stream, fed in arbitrary chunks, into complete Frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pending: tuple[str, tuple[str, ...], tuple[int, ...]] | None = None

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while True:
            if self._pending is None:
                end = self._buffer.find(b"\n")
                if end < 0:
                    if len(self._buffer) > MAX_HEADER:
                        raise ProtocolError(f"no header line in {len(self._buffer)} bytes")
                    return frames
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                if not line.startswith(HEADER_PREFIX):
                    raise ProtocolError(f"expected a header, got {line[:80]!r}")
                words = line[len(HEADER_PREFIX):].decode("ascii", "replace").split()
                if not words:
                    raise ProtocolError("empty header")
                verb, args = words[0], tuple(words[1:])
                self._pending = (verb, args, _payload_sizes(verb, args))
            verb, args, sizes = self._pending
            total = sum(sizes)
            if len(self._buffer) < total:
                return frames
            payloads = []
            pos = 0
            for size in sizes:
                payloads.append(bytes(self._buffer[pos:pos + size]))
                pos += size
            del self._buffer[:total]
            self._pending = None
            frames.append(Frame(verb, args, tuple(payloads)))


# The guest half. Sourced by the VM's /init after it has found the port; `$1` is the port's
# device node, `$2` the READY fields. fd 3 is the channel; commands get it closed (3>&-) so a
# command or a daemon it starts can never read or write the channel.
GUEST_AGENT = r"""
raidlab_agent() {
    exec 3<>"$1"
    set -f
    work=/run/raidlab
    mkdir -p "$work" /root
    printf '@@RAIDLAB READY %s\n' "$2" >&3
    while IFS= read -r line <&3; do
        set -- $line
        case "$1" in
        RUN)
            printf %s "$3" | base64 -d > "$work/cmd"
            ( cd /root && exec sh "$work/cmd" ) </dev/null >"$work/out" 2>"$work/err" 3>&-
            rc=$?
            printf '@@RAIDLAB DONE %s %s %s %s\n' "$2" "$rc" \
                "$(stat -c %s "$work/out")" "$(stat -c %s "$work/err")" >&3
            cat "$work/out" "$work/err" >&3
            rm -f "$work/out" "$work/err" ;;
        PUT)
            path=$(printf %s "$4" | base64 -d)
            # Straight to a file beside the target (not through /run, which is guest RAM: a
            # 122 MB source tarball must land on the scratch disk). If the directory cannot be
            # made, the bytes still have to leave the channel: they go to /dev/null.
            part="$path.raidlab-part"
            mkdir -p "$(dirname "$path")" && : > "$part" || part=/dev/null
            dd bs=65536 count="$3" iflag=count_bytes,fullblock of="$part" status=none <&3
            rc=$?
            if [ "$part" = /dev/null ]; then rc=1
            elif [ $rc -eq 0 ]; then mv -f "$part" "$path" && chmod "$5" "$path"; rc=$?
            else rm -f "$part"; fi
            printf '@@RAIDLAB STORED %s %s\n' "$2" "$rc" >&3 ;;
        GET)
            path=$(printf %s "$3" | base64 -d)
            if [ -f "$path" ] && [ -r "$path" ]; then
                size=$(stat -L -c %s "$path")
                printf '@@RAIDLAB FILE %s %s\n' "$2" "$size" >&3
                dd if="$path" bs=65536 count="$size" iflag=count_bytes status=none >&3
            else
                printf '@@RAIDLAB FILE %s -1\n' "$2" >&3
            fi ;;
        OFF)
            sync
            printf '@@RAIDLAB BYE %s\n' "$2" >&3
            poweroff -f ;;
        *)
            printf '@@RAIDLAB ERROR %s unknown-request\n' "${2:-0}" >&3 ;;
        esac
    done
}
"""


def guest_script(argv: list[str], timeout: float, stdin_path: str | None = None) -> str:
    """The shell line the lab VM runs for `argv`: killed by the guest's own `timeout` so a hung
    command does not take the VM with it. Pure (tested)."""
    seconds = max(1, int(timeout + 0.999))
    command = f"timeout -s KILL {seconds} {shlex.join([str(a) for a in argv])}"
    return command + (f" < {shlex.quote(stdin_path)}" if stdin_path else " < /dev/null")
