"""nbdkit(1), nbdinfo(1) and nbdfuse(1): serving files over NBD with TLS, asking a server what
it serves, and reaching an export as a file.

A cluster node serves its emulated disks with nbdkit's file plugin in directory mode
(`dir=`): every regular file of the directory is an export named after the file, so a node
whose disks are the files d0, d1 of its directory is reached as nbds://ADDRESS/d0 and
nbds://ADDRESS/d1 (nbdkit-file-plugin(1); a client asking for the default export "" is
refused, and export names may not contain "/").

TLS with a pre-shared key (nbdkit-tls(1), "TLS with Pre-Shared Keys"). NBD itself has no
authentication: a plain nbdkit lets anyone who reaches its port list, read and write every
export. So every server here requires TLS (--tls=require) and accepts only clients that hold
its key (--tls-psk=FILE), and every client connects with that key. A key file holds lines
USERNAME:HEXKEY (gnutls psktool's format); a cluster's holds one (`TlsPsk`, `psk_line`,
`parse_psk`). A client without the key fails the TLS handshake before any NBD option, so it
cannot list the exports either. The URIs raidlab shows and records say nbds:// (NBD over
TLS, nbd_connect_uri(3)) and carry neither the username nor the key file: a client adds
them (`client_uri`).

Choices in `nbdkit_argv`:
* --foreground: the caller keeps the process as its child and records its pid;
* --exit-with-parent: nbdkit exits when the process that started it dies, however it dies,
  so a killed cluster daemon does not leave servers behind (its stale cleanup still looks);
* --pidfile: nbdkit writes it once it accepts connections, which is how the caller knows the
  server is ready;
* --ipaddr: the node's own address only, never every address of the namespace;
* --tls=require --tls-psk=FILE: no connection without the key (above).

The plugin opens the files without O_DIRECT; whether the page cache sits between it and the
files is the file system's choice (raidlab.cluster serves them with FUSE direct I/O, so
every NBD request reaches the emulated disk).

Clients. nbdinfo and nbdcopy take the key in the URI (`client_uri`: the username as the
URI's user, the file as the query parameter tls-psk-file; nbd_connect_uri(3)). nbdfuse does
not: libnbd refuses a local file named in a URI unless the program allows it
(nbd_set_uri_allow_local_file(3)), and nbdfuse (libnbd 1.14) does not. So nbdfuse reaches a
TLS export through a TLS client of its own, nbdkit's nbd plugin (nbdkit-nbd-plugin(1):
tls=require, tls-psk, tls-username), which it starts as its subprocess and speaks to over a
socket pair (nbdfuse's `[ CMD ]` mode, systemd socket activation). The plugin opens the
remote connection when nbdfuse connects, so nbdfuse's pidfile still means "connected".

Choices in `nbdfuse_argv` (libnbd's client; nbdfuse(1)):
* the mount point is a regular file ("naked" mount): the export is that one file, with
  nothing else around it to name;
* --connections 1: one NBD connection per export. More connections only add sockets that
  can fail, and one TCP stream fills a link of the cluster's rates;
* --pidfile: written once the export is mounted, which is how the caller knows it is ready;
* the nbd plugin with --exit-with-parent: it ends with nbdfuse, however nbdfuse ends.
nbdfuse runs in the foreground and unmounts its file when it gets SIGTERM. When the remote
connection fails, the plugin fails every request in flight and every later one at once
(ESHUTDOWN) while nbdfuse stays; when nbdfuse itself dies it leaves the mount in place, dead
(ENOTCONN), for the caller to unmount.
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse

NBD_PORT = 10809  # IANA's port for NBD, nbdkit's default
NBD_TLS_SCHEME = "nbds"  # NBD over TLS, TCP (nbd_connect_uri(3))

PSK_USERNAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
PSK_KEY_RE = re.compile(r"^[0-9a-fA-F]{32,512}$")  # at least 128 bits, in hex


@dataclasses.dataclass(frozen=True)
class TlsPsk:
    """A pre-shared key as a client names it: the key file's path and the username (the
    identity) it holds."""

    path: str
    username: str


def psk_line(username: str, key_hex: str) -> str:
    """One identity of a PSK file: USERNAME:HEXKEY and a newline."""
    if not PSK_USERNAME_RE.match(username) or not PSK_KEY_RE.match(key_hex) or len(key_hex) % 2:
        raise ValueError("a PSK identity is a username of letters, digits, '.', '_' or '-' "
                         "and a key of at least 32 hex digits")
    return f"{username}:{key_hex}\n"


def parse_psk(text: str) -> tuple[str, str]:
    """(username, hex key) of a PSK file that holds exactly one identity; ValueError saying
    what is wrong otherwise."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ValueError(f"it holds {len(lines)} lines; a key file holds one, USERNAME:HEXKEY")
    username, sep, key_hex = lines[0].partition(":")
    if not sep:
        raise ValueError("its line is not USERNAME:HEXKEY")
    psk_line(username, key_hex)  # raises for a bad username or key
    return username, key_hex


def nbdkit_argv(directory: str, *, address: str, port: int = NBD_PORT, pidfile: str, psk_file: str,
                executable: str = "nbdkit") -> list[str]:
    """nbdkit serving every file of `directory` as an export named after it, only over TLS,
    only to clients that hold the key in `psk_file`."""
    return [executable, "--foreground", "--exit-with-parent", "--ipaddr", address,
            "--port", str(port), "--pidfile", pidfile, "--tls=require", f"--tls-psk={psk_file}",
            "file", f"dir={directory}"]


def nbd_uri(address: str, export: str, port: int = NBD_PORT) -> str:
    """The NBD URI of an export over TLS (the port left out when it is NBD's own; an IPv6
    address in brackets, as URIs write it)."""
    host = f"[{address}]" if ":" in address else address
    where = host if port == NBD_PORT else f"{host}:{port}"
    return f"{NBD_TLS_SCHEME}://{where}/{export}"


def split_uri(uri: str) -> tuple[str, int, str]:
    """(address, port, export) of an nbds:// URI made by `nbd_uri`."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme != NBD_TLS_SCHEME or not parts.hostname:
        raise ValueError(f"{uri!r} is not an {NBD_TLS_SCHEME}:// URI of a host")
    return parts.hostname, parts.port or NBD_PORT, urllib.parse.unquote(parts.path.lstrip("/"))


def client_uri(uri: str, psk: TlsPsk) -> str:
    """`uri` as a libnbd client connects to it with the key: the key's username as the
    URI's user, its file as tls-psk-file (nbd_connect_uri(3)). For nbdinfo and nbdcopy,
    which allow a URI to name a local file."""
    split_uri(uri)
    parts = urllib.parse.urlsplit(uri)
    netloc = f"{urllib.parse.quote(psk.username, safe='')}@{parts.netloc}"
    query = urllib.parse.urlencode({"tls-psk-file": psk.path}, quote_via=urllib.parse.quote, safe="/")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path or "/", query, ""))


def nbdfuse_argv(mount_file: str, uri: str, *, psk: TlsPsk, pidfile: str, executable: str = "nbdfuse",
                 nbdkit: str = "nbdkit") -> list[str]:
    """nbdfuse serving the TLS export `uri` as the file `mount_file` (which must exist),
    reached through nbdkit's nbd plugin with the key `psk` (module doc)."""
    address, port, export = split_uri(uri)
    proxy = [nbdkit, "--exit-with-parent", "nbd", f"hostname={address}", f"port={port}", f"export={export}",
             "tls=require", f"tls-psk={psk.path}", f"tls-username={psk.username}"]
    return [executable, "--connections", "1", "--pidfile", pidfile, mount_file, "[", *proxy, "]"]


def list_exports_argv(uri: str, *, psk: TlsPsk, executable: str = "nbdinfo") -> list[str]:
    """nbdinfo listing the exports of the server of `uri` as JSON (connects with the key,
    lists, disconnects)."""
    return [executable, "--list", "--json", client_uri(uri, psk)]


def parse_list_json(text: str) -> list[dict]:
    """The exports of `nbdinfo --list --json`: [{"name", "size"}], in the server's order."""
    doc = json.loads(text)
    return [{"name": e.get("export-name", ""), "size": int(e.get("export-size", 0))}
            for e in doc.get("exports", [])]


def has_tls(dump_config: str) -> bool:
    """Whether `nbdkit --dump-config` says this nbdkit was built with TLS (tls=yes)."""
    return any(line.strip() == "tls=yes" for line in dump_config.splitlines())
