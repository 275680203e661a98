"""A cluster of real hosts, with network namespaces standing in for the hosts: each "host"
serves its disks with `raidlab cluster serve` on its own address, the machine that runs the
array lists them in a node list (`raidlab cluster up NAME --node-list FILE`), and
`raidlab create --cluster` builds over them as over a cluster of namespaces. Every host serves
with one TLS key: the first host makes it, the test copies it (as a user would, privately) and
the other hosts and the node list are given the copy (--psk-file).

The stand-ins are built by the test itself, not by raidlab (raidlab must not need them): a
bridge with an address in the root namespace (this machine's NIC, node 0, which serves its own
disk too) and three namespaces on it, each with a veth cable and an address (nodes 1-3). A
host's cable is "unplugged" by setting its switch port down, as a student would pull it.

What is left is checked independently of raidlab's bookkeeping (lab_leftovers).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from raidlab.cluster import tlskey
from raidlab.disks.nodedisk import DEADLINE
from raidlab.tools import fio

import test_cluster_arrays
from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

HOSTS = 4
CUT = 2


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Network:
    """The stand-in hosts: a bridge (this machine's NIC, node 0) and namespaces 1..HOSTS-1."""

    def __init__(self):
        token = secrets.token_hex(3)
        self.bridge = f"rlh-{token}"
        self.octet = int(token[:2], 16)
        self.namespaces = {k: f"rlh-{token}-{k}" for k in range(1, HOSTS)}
        self.ports = {k: f"rlp-{token}-{k}" for k in range(1, HOSTS)}

    def address(self, node: int) -> str:
        return f"10.79.{self.octet}.{node + 1}"

    def build(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.address(0)}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for k, ns in self.namespaces.items():
            ip("netns", "add", ns)
            ip("link", "add", self.ports[k], "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", self.ports[k], "master", self.bridge, "up")
            ip("-n", ns, "addr", "add", f"{self.address(k)}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def tear_down(self) -> None:
        for k, ns in self.namespaces.items():
            subprocess.run(["ip", "link", "del", self.ports[k]], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def on_host(self, node: int, argv: list[str]) -> list[str]:
        """argv run on stand-in host `node` (node 0 is this machine)."""
        return argv if node == 0 else ["nsenter", f"--net=/run/netns/{self.namespaces[node]}", "--", *argv]


class Raidlab(test_cluster_arrays.Raidlab):
    key: Path  # the class's copy of the hosts' TLS key

    def host_home(self, node: int) -> Path:
        """Each stand-in host has a RAIDLAB_HOME of its own, as a real host would; node 0 is
        this machine, whose home is the test's."""
        return self.home if node == 0 else self.home.with_name(f"host{node}")

    def on(self, net: Network, node: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(net.on_host(node, [*self.cmd, *args]), capture_output=True, text=True,
                              env={**self.env, "RAIDLAB_HOME": str(self.host_home(node))}, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(f"raidlab {' '.join(args)} on host {node} -> {proc.returncode}\n{proc.stderr}")
        return proc


@pytest.fixture
def net():
    network = Network()
    try:
        network.build()
        yield network
    finally:
        network.tear_down()


@pytest.fixture
def rl(raidlab_cmd, tmp_path, net):
    r = Raidlab(raidlab_cmd, tmp_path / "home")
    r.key = tmp_path / "class.psk"
    yield r
    labs = tmp_path / "home" / "labs"
    for entry in labs.glob("*"):
        log = entry / "daemon.log"
        if log.exists():
            (tmp_path / f"{entry.name}-daemon.log").write_bytes(log.read_bytes())
    for entry in labs.glob("*"):
        if (entry / "array.json").exists():
            r("destroy", entry.name, check=False)
    subprocess.run(["ip", "link", "set", net.ports[CUT], "up"], capture_output=True)
    for entry in labs.glob("*"):
        if r("cluster", "down", entry.name, check=False).returncode != 0:
            r("lab", "cleanup", entry.name, check=False)
    for k in range(1, HOSTS):
        for entry in (r.host_home(k) / "labs").glob("*"):
            if r.on(net, k, "cluster", "down", entry.name, check=False).returncode != 0:
                r.on(net, k, "lab", "cleanup", entry.name, check=False)


def serve_all(rl: Raidlab, net: Network, *, size: str = "32M", disks: int = 1) -> list[str]:
    """`raidlab cluster serve hK` on every stand-in host, all with one key; the lab names.
    Without a class key yet, host 0 makes it and the others are given a copy of it."""
    names = []
    for k in range(HOSTS):
        key = ["--psk-file", str(rl.key)] if rl.key.exists() else []
        ready = json.loads(rl.on(net, k, "cluster", "serve", f"h{k}", "--address", net.address(k),
                                 "--disk-size", size, "--disks-per-node", str(disks), *key, "--json").stdout)
        assert ready["kind"] == "serve" and ready["nodes"][0]["address"] == net.address(k)
        names.append(f"h{k}")
        if not key:
            made = Path(rl.on(net, k, "cluster", "key", f"h{k}").stdout.strip())
            assert made == Path(ready["tls_psk_file"]) and (made.stat().st_mode & 0o777) == 0o600
            shutil.copyfile(made, rl.key)
            rl.key.chmod(0o600)
    return names


def make_class_key(rl: Raidlab) -> None:
    """A key for the class's hosts made before any serves (serve_all then gives it to all)."""
    fd = os.open(rl.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, tlskey.new_key_text().encode())
    os.close(fd)


def node_list(tmp_path: Path, net: Network, extra: str = "") -> Path:
    path = tmp_path / "nodes.toml"
    path.write_text("".join(f'[[node]]\naddress = "{net.address(k)}"\n{extra}\n' for k in range(HOSTS)))
    return path


@pytest.mark.long
def test_an_array_over_listed_hosts_survives_a_pulled_cable_and_is_rebuilt(rl, net, tmp_path):
    hosts = serve_all(rl, net)
    listed = json.loads(rl("cluster", "up", "c", "--node-list", str(node_list(tmp_path, net)),
                           "--psk-file", str(rl.key), "--json").stdout)
    assert listed["kind"] == "list"
    assert [n["disks"][0]["uri"] for n in listed["nodes"]] == [f"nbds://{net.address(k)}/d0" for k in range(HOSTS)]
    # the node list keeps a copy of the key in its own lab
    assert listed["tls_psk_file"] == str(rl.home / "labs" / "c" / "tls-psk")
    assert Path(listed["tls_psk_file"]).read_text() == rl.key.read_text()
    assert all(n["disks"][0]["size"] == 32 << 20 for n in listed["nodes"])

    device = rl("create", "x", "--arch", "raidx", "--cluster", "c", "--chunk", "32K").stdout.strip()
    assert device.startswith("/dev/loop")
    test_cluster_arrays.fio_verify(device, seed=11)
    status = rl.status("x")
    members = status["statistics"]["members"]
    # node 0 is this machine, which serves its own disk: reached without the network
    assert [(m["node"], m["where"]) for m in members] == [(0, "local"), (1, "remote"), (2, "remote"), (3, "remote")]
    assert members[0]["path"].endswith("/labs/h0/mnt/node0/d0")
    assert all(m["writes"] > 0 and m["errors"] == 0 for m in members)
    # the NBD clients run in this machine's own network namespace, not in a node's
    for m in members[1:]:
        assert Path(f"/proc/{m['client_pid']}/ns/net").stat().st_ino == Path("/proc/self/ns/net").stat().st_ino
    # each host's disk received its member's writes (the host's own status, asked on the host)
    for k in range(1, HOSTS):
        served = json.loads(rl.on(net, k, "cluster", "status", hosts[k], "--json").stdout)
        assert served["nodes"][0]["disks"][0]["statistics"]["writes"] > 0
    text = rl("cluster", "status", "c").stdout
    assert "hosts of a node list" in text and net.address(3) in text

    # Pull host 2's cable while fio writes and reads back; its member fails within the
    # deadline and the array serves degraded.
    outcome: dict = {}
    writer = threading.Thread(target=lambda: outcome.setdefault(
        "run", fio.run_job(test_cluster_arrays.fio_job(device, seed=12))))
    writer.start()
    time.sleep(1.0)
    ip("link", "set", net.ports[CUT], "down")
    cut_at, failed_after = time.monotonic(), None
    while writer.is_alive() or failed_after is None:
        if failed_after is None and rl.status("x")["statistics"]["members"][CUT]["failed"]:
            failed_after = time.monotonic() - cut_at
        assert time.monotonic() - cut_at < 120, "the pulled host's member did not fail within 120 s"
        time.sleep(0.5)
    writer.join()
    assert outcome["run"].ok and outcome["run"].jobs[0].read.ios > 0, outcome["run"].stderr
    assert failed_after < DEADLINE + 10
    stats = rl.status("x")["statistics"]
    assert stats["state"] == "degraded" and stats["failed_members"] == [CUT]
    probed = json.loads(rl("cluster", "status", "c", "--json").stdout)
    assert [n["reachable"] for n in probed["nodes"]] == [k != CUT for k in range(HOSTS)]
    test_cluster_arrays.fio_verify(device, seed=11, verify_only="1")

    ip("link", "set", net.ports[CUT], "up")
    replaced = rl("replace", "x", "--disk", str(CUT))
    assert "rebuilt" in replaced.stderr and "state optimal" in replaced.stderr
    test_cluster_arrays.fio_verify(device, seed=12, verify_only="1")
    assert json.loads(rl("check", "x", "--json").stdout)["mismatches"] == []

    # Down in order: the array, the list (refused while the array runs), the hosts.
    assert "array 'x' runs over" in rl.refused("cluster", "down", "c")
    rl("destroy", "x")
    assert "forgotten" in rl("cluster", "down", "c").stderr
    for k in range(HOSTS):
        rl.on(net, k, "cluster", "down", hosts[k])
    for k, name in [(0, "x"), (0, "c"), *enumerate(hosts)]:
        lab = rl.host_home(k) / "labs" / name
        assert leftovers(lab, name) == {} and not lab.exists()


def test_an_array_on_a_machine_that_serves_no_disk_reaches_every_host_over_nbd(rl, net, tmp_path):
    serve_all(rl, net)
    path = tmp_path / "three.toml"
    path.write_text("".join(f'[[node]]\naddress = "{net.address(k)}"\n' for k in range(1, HOSTS)))
    rl("cluster", "up", "c", "--node-list", str(path), "--psk-file", str(rl.key))
    device = rl("create", "x", "--arch", "raid5", "--cluster", "c", "--chunk", "32K").stdout.strip()
    test_cluster_arrays.fio_verify(device, seed=5)
    members = rl.status("x")["statistics"]["members"]
    assert [m["where"] for m in members] == ["remote"] * 3
    rl("destroy", "x")
    rl("cluster", "down", "c")


def test_node_lists_and_serving_refuse_bad_input_in_one_line(rl, net, tmp_path):
    def refused(*args: str) -> str:
        if args[:2] == ("cluster", "up") and "--nodes" not in args and "--psk-file" not in args:
            args = (*args, "--psk-file", str(rl.key))
        return rl.refused(*args)

    make_class_key(rl)
    assert "no such file" in refused("cluster", "up", "c", "--node-list", str(tmp_path / "none.toml"))
    bad = tmp_path / "bad.toml"
    cases = {
        "[[node]\n": "not TOML",
        "[[node]]\naddress = \"10.0.0.1\"\ncolour = 1\n": "unknown key 'colour'",
        "[[node]]\nport = 10809\n": "an address is needed",
        "[[node]]\naddress = \"not an address!\"\n": "neither an IP address nor a host name",
        "[[node]]\naddress = \"10.0.0.1\"\nport = 70000\n": "port 70000",
        "[[node]]\naddress = \"10.0.0.1\"\n[[node]]\naddress = \"10.0.0.1\"\n": "nodes 0 and 1 are the same server",
        "[[node]]\naddress = \"10.0.0.1\"\nmodel = \"floppy\"\n": "floppy",
        "title = \"x\"\n": "unknown table or key 'title'",
        "": "no [[node]] table",
    }
    for text, expected in cases.items():
        bad.write_text(text)
        assert expected in refused("cluster", "up", "c", "--node-list", str(bad)), text
    # A host that does not answer, and one without the export named.
    bad.write_text(f'[[node]]\naddress = "{net.address(1)}"\n')
    assert "cannot be listed" in refused("cluster", "up", "c", "--node-list", str(bad))
    serve_all(rl, net, size="16M")
    bad.write_text(f'[[node]]\naddress = "{net.address(1)}"\ndisks = ["d7"]\n')
    assert "not ['d7']" in refused("cluster", "up", "c", "--node-list", str(bad))
    # A key the hosts do not serve with is refused by them, and a key others may read by raidlab.
    bad.write_text(f'[[node]]\naddress = "{net.address(1)}"\n')
    other = tmp_path / "other.psk"
    other.write_text(tlskey.new_key_text())
    other.chmod(0o600)
    assert "cannot be listed" in refused("cluster", "up", "c", "--node-list", str(bad), "--psk-file", str(other))
    other.chmod(0o644)
    assert "chmod 600" in refused("cluster", "up", "c", "--node-list", str(bad), "--psk-file", str(other))
    assert "does not go with --node-list" in refused("cluster", "up", "c", "--node-list", str(bad),
                                                      "--disk-size", "1G")
    assert "one of them" in refused("cluster", "up", "c")
    # Hosts serving disks of different sizes cannot carry one array.
    rl.on(net, 3, "cluster", "down", "h3")
    rl.on(net, 3, "cluster", "serve", "h3", "--address", net.address(3), "--disk-size", "32M",
          "--psk-file", str(rl.key))
    assert "differ in size" in refused("cluster", "up", "c", "--node-list", str(node_list(tmp_path, net)))
    # Serving refuses a bad address before it starts anything, and a second serve of a name.
    assert "neither an IP address" in refused("cluster", "serve", "h9", "--address", "a b")
    assert "is up already" in refused("cluster", "serve", "h0", "--address", net.address(0))
    # A host's serving lab is no cluster to build on; a list's cables are real ones.
    assert "serving its disks" in refused("create", "x", "--arch", "raid5", "--cluster", "h0")
    path = tmp_path / "two.toml"
    path.write_text("".join(f'[[node]]\naddress = "{net.address(k)}"\n' for k in range(3)))
    rl("cluster", "up", "c", "--node-list", str(path), "--psk-file", str(rl.key))
    assert "real ones" in refused("cluster", "cut", "c", "--node", "1")
    assert "exists already" in refused("cluster", "up", "c", "--node-list", str(path))
    rl("create", "x", "--arch", "raid5", "--cluster", "c", "--chunk", "32K")
    assert "node list" in refused("cluster", "clients", "c", "x", "--clients", "2", "--op", "write")
