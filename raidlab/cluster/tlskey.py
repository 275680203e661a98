"""A cluster's TLS key: the pre-shared key its NBD servers require and its clients present.

NBD has no authentication of its own, and a cluster's nbdkit listens on an address that
others reach: a node of the bridge, or a real host's address on the class's network
(`raidlab cluster serve`). Without a key anyone who reaches the port could list, read and
write every emulated disk. So every cluster has one TLS pre-shared key (nbdkit-tls(1)), in
its lab directory as the file `tls-psk`, one identity `raidlab:<256 random bits in hex>`
(`secrets`); every nbdkit of the cluster requires it and every client raidlab starts
presents it (raidlab.tools.nbd).

Where the key comes from:
* a cluster of namespaces, or a host serving its disks, makes a new key each time it comes
  up (`create_key`);
* hosts that serve one cluster of real machines share one key: the first host makes it,
  the others are given a copy (`raidlab cluster serve --psk-file FILE`), and so is the
  machine that lists them (`raidlab cluster up --node-list ... --psk-file FILE`). A given
  file is checked (`read_key_file`: one identity, a key of at least 128 bits, readable by
  its owner only) and copied into the lab (`install_key`), so the lab does not depend on
  the copy staying where it was.

The key file is created 0600 with O_CREAT|O_EXCL|O_NOFOLLOW, after any old one is removed:
never written through a link someone else planted, never a file someone else made. It is
read back (`load_key`) only if it is still a regular file of this user with no permission
for anyone else.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from raidlab.errors import UsageError
from raidlab.lab import create_private
from raidlab.tools.nbd import TlsPsk, parse_psk, psk_line

KEY_FILE = "tls-psk"      # in the cluster's lab directory
USERNAME = "raidlab"      # the one identity of a key raidlab makes
KEY_BYTES = 32            # 256 bits
MAX_KEY_FILE = 4096       # bytes: a key file is one short line


def key_path(lab_path: Path) -> Path:
    """Where the key of the cluster in `lab_path` is (absolute: servers and clients in
    other directories name it)."""
    return Path(os.path.abspath(lab_path)) / KEY_FILE


def new_key_text() -> str:
    """A fresh key file's text: USERNAME:HEXKEY with KEY_BYTES random bytes."""
    return psk_line(USERNAME, secrets.token_hex(KEY_BYTES))


def _read_private(path: Path, *, follow: bool) -> tuple[str, os.stat_result]:
    """The text of a small regular file, and its status, opened without following a link
    unless `follow`; OSError or ValueError when it is not one."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("it is not a regular file")
        data = os.read(fd, MAX_KEY_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE:
        raise ValueError(f"it is larger than {MAX_KEY_FILE} bytes; a key file is one line")
    return data.decode("ascii", errors="replace"), st


def read_key_file(path: Path, option: str = "--psk-file") -> str:
    """The text of a key file a user names (to copy into a lab), checked: a regular file that
    no one but its owner may read or write, holding one identity USERNAME:HEXKEY. UsageError,
    one line, otherwise."""
    try:
        text, st = _read_private(path, follow=True)
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: no such file",
                         hint="copy the key from the host that made it (`raidlab cluster key NAME` there)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{option} {path}: cannot use it: {exc}") from None
    if st.st_mode & 0o077:
        raise UsageError(f"{option} {path}: others may read or write it (mode {stat.S_IMODE(st.st_mode):04o})",
                         hint=f"a key is secret: chmod 600 {path}")
    try:
        parse_psk(text)
    except ValueError as exc:
        raise UsageError(f"{option} {path}: not a TLS key file: {exc}",
                         hint="copy the file `raidlab cluster key NAME` names on the host that made it") from None
    return text


def install_key(lab_path: Path, text: str | None = None) -> TlsPsk:
    """Write the cluster's key into `lab_path`: `text` (a checked key file's, from
    `read_key_file`), or a new random key. An old key file there is removed first; the new
    one is created 0600, O_EXCL|O_NOFOLLOW."""
    path = key_path(lab_path)
    text = new_key_text() if text is None else text
    username, _key = parse_psk(text)
    path.unlink(missing_ok=True)
    fd = create_private(path)  # O_CREAT|O_EXCL|O_NOFOLLOW, 0600
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return TlsPsk(str(path), username)


def load_key(lab_path: Path, cluster: str) -> TlsPsk:
    """The key of cluster `cluster` (in `lab_path`): its file and username. UsageError, one
    line, when it is missing, is not this user's own regular file, lets others in, or does not
    parse."""
    path = key_path(lab_path)
    hint = f"bring the cluster up again (`raidlab cluster down {cluster}`, then up or serve)"
    try:
        text, st = _read_private(path, follow=False)
    except FileNotFoundError:
        raise UsageError(f"cluster {cluster!r} has no TLS key ({path} is missing)", hint=hint) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cluster {cluster!r}'s TLS key {path} cannot be used: {exc}", hint=hint) from None
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise UsageError(f"cluster {cluster!r}'s TLS key {path} is not private to its owner "
                         f"(uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})", hint=hint)
    try:
        username, _key = parse_psk(text)
    except ValueError as exc:
        raise UsageError(f"cluster {cluster!r}'s TLS key {path} is damaged: {exc}", hint=hint) from None
    return TlsPsk(str(path), username)


__all__ = ["KEY_FILE", "USERNAME", "install_key", "key_path", "load_key", "new_key_text", "read_key_file"]
