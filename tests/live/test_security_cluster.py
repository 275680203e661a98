"""A cluster's NBD exports refuse everyone without the cluster's TLS key.

The attacker is a second user of the host, `nobody` (runuser), with the NBD tools anyone can
run: nbdinfo to list the exports, nbdcopy to read one and to write into it, over plain NBD,
over TLS without a key, and with a key of its own. Each attempt must fail, and the disk's
image must be byte for byte what it was (its SHA-256 before and after). Root's own client,
with the cluster's key, still lists, writes and reads. The same user given a copy of the
key lists the exports: what refuses the others is the key, not the user or the port.

Both kinds of server a user starts are attacked: a host serving its disks on an address
(`raidlab cluster serve`, here on 127.0.0.1, which every user of the host reaches) and the
smallest cluster of namespaces (`raidlab cluster up --nodes 1`, reached from inside the
node's namespace, where any process that enters it could try).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from raidlab.cluster import tlskey
from raidlab.tools import nbd

import test_cluster

pytestmark = [pytest.mark.root, pytest.mark.live]

MiB = 1 << 20
ATTACKER = "nobody"


@pytest.fixture
def rl(raidlab_cmd, tmp_path):
    r = test_cluster.Raidlab(raidlab_cmd, tmp_path / "home")
    yield r
    for entry in (tmp_path / "home" / "labs").glob("*"):
        log = entry / "daemon.log"
        if log.exists():
            (tmp_path / f"{entry.name}-daemon.log").write_bytes(log.read_bytes())
        if r("cluster", "down", entry.name, check=False).returncode != 0:
            r("lab", "cleanup", entry.name, check=False)


@pytest.fixture
def attacker_dir():
    """A directory the attacker can read its own files in (root's tmp_path is not one)."""
    path = Path(tempfile.mkdtemp(prefix="raidlab-attacker-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def as_attacker(argv: list[str], *, netns: str | None, data: bytes | None = None) -> subprocess.CompletedProcess:
    """argv run as the attacker (in the node's network namespace when there is one)."""
    cmd = ["runuser", "-u", ATTACKER, "--", *argv]
    if netns is not None:
        cmd = ["nsenter", f"--net=/run/netns/{netns}", "--", *cmd]
    return subprocess.run(cmd, input=data, capture_output=True, timeout=60, cwd="/")


def as_root(argv: list[str], *, netns: str | None, data: bytes | None = None) -> subprocess.CompletedProcess:
    cmd = argv if netns is None else ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]
    return subprocess.run(cmd, input=data, capture_output=True, timeout=60, cwd="/")


def own_key_file(directory: Path, name: str, text: str) -> Path:
    """A key file of the attacker's: its owner, mode 0600."""
    path = directory / name
    path.write_text(text)
    attacker = pwd.getpwnam(ATTACKER)
    os.chown(path, attacker.pw_uid, attacker.pw_gid)
    path.chmod(0o600)
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as image:
        for block in iter(lambda: image.read(MiB), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.mark.parametrize("kind", ["serve", "netns"])
def test_without_the_key_no_one_lists_reads_or_writes_an_export(rl, kind, tmp_path, attacker_dir):
    name = "s" + os.urandom(3).hex()
    if kind == "serve":
        ready = json.loads(rl("cluster", "serve", name, "--address", "127.0.0.1", "--port", str(free_port()),
                              "--disk-size", "16M", "--json").stdout)
    else:
        ready = rl.up(name, "--nodes", "1", "--disk-size", "16M")
    node = ready["nodes"][0]
    netns = node["namespace"]
    uri = node["disks"][0]["uri"]  # nbds://ADDRESS[:PORT]/d0
    server = nbd.nbd_uri(node["address"], "", node["nbd_port"])
    plain_uri, plain_server = uri.replace("nbds://", "nbd://", 1), server.replace("nbds://", "nbd://", 1)
    key = nbd.TlsPsk(ready["tls_psk_file"], ready["tls_username"])
    image = next((rl.home / "labs" / name).rglob("node0-d0.img"))

    # The server requires TLS with the lab's key, a file only root may read.
    argv = Path(f"/proc/{node['nbdkit_pid']}/cmdline").read_bytes().split(b"\0")
    assert b"--tls=require" in argv and f"--tls-psk={key.path}".encode() in argv
    assert key.path == str(rl.home / "labs" / name / tlskey.KEY_FILE)
    assert (Path(key.path).stat().st_mode & 0o777) == 0o600 and Path(key.path).stat().st_uid == 0
    assert rl("cluster", "key", name).stdout.strip() == key.path
    assert as_attacker(["cat", key.path], netns=None).returncode != 0

    # Root's client with the key writes a pattern and reads it back.
    pattern = os.urandom(MiB)
    wrote = as_root(["nbdcopy", "-", nbd.client_uri(uri, key)], netns=netns, data=pattern)
    assert wrote.returncode == 0, wrote.stderr
    read = as_root(["nbdcopy", nbd.client_uri(uri, key), "-"], netns=netns)
    assert read.returncode == 0 and read.stdout[:MiB] == pattern, read.stderr
    before = sha256(image)

    # The attacker: plain NBD, TLS without a key, TLS with a key of its own.
    guess = own_key_file(attacker_dir, "guess.psk", tlskey.new_key_text())
    guessed = nbd.TlsPsk(str(guess), "raidlab")
    for target in (plain_server, server, nbd.client_uri(server, guessed)):
        listing = as_attacker(["nbdinfo", "--list", "--json", target], netns=netns)
        assert listing.returncode != 0, (target, listing.stdout)
        assert b"d0" not in listing.stdout and b"export-name" not in listing.stdout, target
    for source in (plain_uri, uri, nbd.client_uri(uri, guessed)):
        stolen = as_attacker(["nbdcopy", source, "-"], netns=netns)
        assert stolen.returncode != 0 and pattern[:4096] not in stolen.stdout, source
    for target in (plain_uri, uri, nbd.client_uri(uri, guessed)):
        junk = as_attacker(["nbdcopy", "-", target], netns=netns, data=bytes(MiB))
        assert junk.returncode != 0, (target, junk.stderr)

    # Nothing changed on the disk, and root's client still reads its pattern.
    assert sha256(image) == before
    again = as_root(["nbdcopy", nbd.client_uri(uri, key), "-"], netns=netns)
    assert again.returncode == 0 and again.stdout[:MiB] == pattern, again.stderr

    # The same user holding a copy of the key gets in: the key alone is what refused it.
    copy = own_key_file(attacker_dir, "copy.psk", Path(key.path).read_text())
    allowed = as_attacker(["nbdinfo", "--list", "--json", nbd.client_uri(server, nbd.TlsPsk(str(copy), "raidlab"))],
                          netns=netns)
    assert allowed.returncode == 0, allowed.stderr
    assert [e["export-name"] for e in json.loads(allowed.stdout)["exports"]] == ["d0"]

    rl("cluster", "down", name)
    assert not (rl.home / "labs" / name).exists()
