"""nbdkit(1), nbdinfo(1) and nbdfuse(1): serving files over NBD, asking a server what it
serves, and reaching an export as a file.

A cluster node serves its emulated disks with nbdkit's file plugin in directory mode
(`dir=`): every regular file of the directory is an export named after the file, so a node
whose disks are the files d0, d1 of its directory is reached as nbd://ADDRESS/d0 and
nbd://ADDRESS/d1 (nbdkit-file-plugin(1); a client asking for the default export "" is
refused, and export names may not contain "/").

Choices in `nbdkit_argv`:
* --foreground: the caller keeps the process as its child and records its pid;
* --exit-with-parent: nbdkit exits when the process that started it dies, however it dies,
  so a killed cluster daemon does not leave servers behind (its stale cleanup still looks);
* --pidfile: nbdkit writes it once it accepts connections, which is how the caller knows the
  server is ready;
* --ipaddr: the node's own address only, never every address of the namespace.

The plugin opens the files without O_DIRECT; whether the page cache sits between it and the
files is the file system's choice (raidlab.cluster serves them with FUSE direct I/O, so
every NBD request reaches the emulated disk).

Choices in `nbdfuse_argv` (libnbd's client; nbdfuse(1)):
* the mount point is a regular file ("naked" mount): the export is that one file, with
  nothing else around it to name;
* --connections 1: one NBD connection per export. nbdfuse exits when any of its connections
  fails, so more connections only add sockets that can fail, and one TCP stream fills a
  link of the cluster's rates;
* --pidfile: written once the export is mounted, which is how the caller knows it is ready.
nbdfuse runs in the foreground and unmounts its file when it gets SIGTERM; when its
connection fails it exits and leaves the mount in place, dead (ENOTCONN), for the caller to
unmount.
"""

from __future__ import annotations

import json

NBD_PORT = 10809  # IANA's port for NBD, nbdkit's default


def nbdkit_argv(directory: str, *, address: str, port: int = NBD_PORT, pidfile: str,
                executable: str = "nbdkit") -> list[str]:
    """nbdkit serving every file of `directory` as an export named after it."""
    return [executable, "--foreground", "--exit-with-parent", "--ipaddr", address,
            "--port", str(port), "--pidfile", pidfile, "file", f"dir={directory}"]


def nbdfuse_argv(mount_file: str, uri: str, *, pidfile: str, executable: str = "nbdfuse") -> list[str]:
    """nbdfuse serving the export `uri` as the file `mount_file` (which must exist)."""
    return [executable, "--connections", "1", "--pidfile", pidfile, mount_file, uri]


def nbd_uri(address: str, export: str, port: int = NBD_PORT) -> str:
    """The NBD URI of an export (the port left out when it is NBD's own; an IPv6 address in
    brackets, as URIs write it)."""
    host = f"[{address}]" if ":" in address else address
    where = host if port == NBD_PORT else f"{host}:{port}"
    return f"nbd://{where}/{export}"


def list_exports_argv(uri: str, executable: str = "nbdinfo") -> list[str]:
    """nbdinfo listing a server's exports as JSON (connects, lists, disconnects)."""
    return [executable, "--list", "--json", uri]


def parse_list_json(text: str) -> list[dict]:
    """The exports of `nbdinfo --list --json`: [{"name", "size"}], in the server's order."""
    doc = json.loads(text)
    return [{"name": e.get("export-name", ""), "size": int(e.get("export-size", 0))}
            for e in doc.get("exports", [])]
