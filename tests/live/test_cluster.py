"""The cluster on this host, through the CLI as a user runs it: `raidlab cluster up` builds
network namespaces on a bridge with tbf-shaped cables, each node serving its emulated disks
over NBD with TLS; other nodes reach them with nbdinfo and nbdcopy from their own namespaces,
with the cluster's key (tests/live/test_security_cluster.py: without it, nothing); `cut`
takes a node off until `heal`; `down`, SIGTERM, SIGINT and (after a SIGKILL) `raidlab lab
cleanup` leave nothing behind.

What is left is checked independently of raidlab's own bookkeeping: `ip netns list`,
`ip -o link`, /proc/mounts, the process table (lab_leftovers) and `losetup -a`. Every test
has its own RAIDLAB_HOME and a cluster name of its own, so the checks see only its objects.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from raidlab.cluster import plan
from raidlab.tools import ip as ip_tool
from raidlab.tools import nbd

from lab_leftovers import leftovers, network_leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

MiB = 1 << 20


class Raidlab:
    def __init__(self, cmd: list[str], home: Path):
        self.cmd, self.home = cmd, home
        self.env = {**os.environ, "RAIDLAB_HOME": str(home), "COLUMNS": "400"}

    def __call__(self, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.cmd, *args], capture_output=True, text=True, env=self.env,
                              timeout=300, **kwargs)
        if check and proc.returncode != 0:
            raise AssertionError(f"raidlab {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
        return proc

    def up(self, name: str, *args: str) -> dict:
        return json.loads(self("cluster", "up", name, *args, "--json").stdout)

    def status(self, name: str) -> dict:
        return json.loads(self("cluster", "status", name, "--json").stdout)


@pytest.fixture
def rl(raidlab_cmd, tmp_path):
    r = Raidlab(raidlab_cmd, tmp_path / "home")
    yield r
    for entry in (tmp_path / "home" / "labs").glob("*"):
        log = entry / "daemon.log"
        if log.exists():  # down removes the lab; keep its log for a failure's post-mortem
            (tmp_path / f"{entry.name}-daemon.log").write_bytes(log.read_bytes())
        if r("cluster", "down", entry.name, check=False).returncode != 0:
            r("lab", "cleanup", entry.name, check=False)


@pytest.fixture
def name() -> str:
    return "t" + secrets.token_hex(3)  # 7 characters: interface names leave room for 8


def in_node(namespace: str, *argv: str, **kwargs) -> subprocess.CompletedProcess:
    """argv run in a node's network namespace (its mount namespace is the host's)."""
    return subprocess.run(["nsenter", f"--net=/run/netns/{namespace}", "--", *argv],
                          capture_output=True, timeout=120, **kwargs)


def keyed(ready: dict, address_or_uri: str) -> str:
    """A client's URI with the cluster's key: of an export's URI, or of a server's address
    (for a listing)."""
    uri = address_or_uri if "://" in address_or_uri else nbd.nbd_uri(address_or_uri, "")
    return nbd.client_uri(uri, nbd.TlsPsk(ready["tls_psk_file"], ready["tls_username"]))


def everything_left(rl: Raidlab, name: str) -> dict[str, list[str]]:
    return {**network_leftovers(name), **leftovers(rl.home / "labs" / name, name)}


def wait_gone(pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still runs after {timeout} s")


@pytest.mark.parametrize("model", ["none", "hdd-7200"])
def test_nodes_list_write_and_read_each_others_disks(rl, name, model, tmp_path):
    ready = rl.up(name, "--nodes", "3", "--disk-model", model, "--disk-size", "16M")
    nodes = ready["nodes"]
    assert [n["namespace"] for n in nodes] == [f"rlx-{name}-{k}" for k in range(3)]
    assert [n["address"] for n in nodes] == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
    assert nodes[1]["disks"][0]["uri"] == "nbds://10.77.0.2/d0" and nodes[1]["disks"][0]["model"] == model
    assert ready["link"]["rate"] == "100mbit"

    listing = in_node(nodes[0]["namespace"], "nbdinfo", "--list", "--json", keyed(ready, "10.77.0.2"))
    assert listing.returncode == 0, listing.stderr
    exports = json.loads(listing.stdout)["exports"]
    assert [(e["export-name"], e["export-size"]) for e in exports] == [("d0", 16 * MiB)]

    data = os.urandom(MiB)
    source = tmp_path / "one-mib"
    source.write_bytes(data)
    wrote = in_node(nodes[0]["namespace"], "nbdcopy", str(source), keyed(ready, nodes[2]["disks"][0]["uri"]))
    assert wrote.returncode == 0, wrote.stderr
    back = in_node(nodes[1]["namespace"], "nbdcopy", keyed(ready, nodes[2]["disks"][0]["uri"]), "-")
    assert back.returncode == 0, back.stderr
    assert len(back.stdout) == 16 * MiB
    assert back.stdout[:MiB] == data and back.stdout[MiB:] == bytes(15 * MiB)

    status = rl.status(name)
    disk2 = status["nodes"][2]["disks"][0]["statistics"]
    assert disk2["model"] == model and disk2["bytes_written"] >= MiB and disk2["bytes_read"] >= 16 * MiB
    # The megabyte left node 0 through its shaped eth0 and reached node 2 through its port.
    assert status["nodes"][0]["links"]["sent"]["bytes"] >= MiB
    assert status["nodes"][2]["links"]["received"]["bytes"] >= MiB
    assert status["nodes"][1]["links"]["received"]["bytes"] >= 16 * MiB

    rl("cluster", "down", name)
    assert everything_left(rl, name) == {}
    assert not (rl.home / "labs" / name).exists()


def test_links_are_shaped_to_the_rate_asked_for(rl, name):
    """4 MiB at 20 Mbit/s (2.5 MB/s) need at least 1.68 s on the wire; the bound leaves slack
    only on the fast side: it proves the shaping exists, not how exact it is."""
    ready = rl.up(name, "--nodes", "2", "--disk-size", "4M", "--link", "20mbit")
    assert ready["link"]["rate_bits"] == 20_000_000
    uri = keyed(ready, ready["nodes"][1]["disks"][0]["uri"])
    started = time.monotonic()
    read = in_node(ready["nodes"][0]["namespace"], "nbdcopy", "--no-extents", uri, "null:")
    seconds = time.monotonic() - started
    assert read.returncode == 0, read.stderr
    assert seconds >= 1.3, f"4 MiB crossed a 20mbit link in {seconds:.2f} s"
    sent = rl.status(name)["nodes"][1]["links"]["sent"]
    assert sent["kind"] == "tbf" and sent["bytes"] >= 4 * MiB
    assert sent["overlimits"] > 0  # packets waited for tokens: the bucket, not the host, set the pace
    # The same read inside node 1 (its own address: loopback, no cable) is not shaped.
    local = in_node(ready["nodes"][1]["namespace"], "nbdcopy", "--no-extents", uri, "null:")
    assert local.returncode == 0, local.stderr
    assert rl.status(name)["nodes"][1]["links"]["sent"]["bytes"] < sent["bytes"] + 256 * 1024


def test_servers_outlive_the_threads_that_started_them(rl, name):
    """trio starts each nbdkit from a worker thread that ends after ten idle seconds; a
    server tied to that thread (a parent-death signal) would be gone by then."""
    ready = rl.up(name, "--nodes", "2", "--disk-size", "16M")
    time.sleep(13)
    for node in ready["nodes"]:
        stat = Path(f"/proc/{node['nbdkit_pid']}/stat").read_text()
        assert stat.rsplit(") ", 1)[1][0] != "Z", f"nbdkit of node {node['index']} exited"
    listing = in_node(ready["nodes"][0]["namespace"], "nbdinfo", "--list", "--json", keyed(ready, "10.77.0.2"))
    assert listing.returncode == 0, listing.stderr


def test_a_cut_cable_takes_a_node_off_until_it_is_healed(rl, name):
    ready = rl.up(name, "--nodes", "2", "--disk-size", "16M")
    node0 = ready["nodes"][0]["namespace"]
    # Every node gives up on a dead peer after about 14 s, not the host's fifteen minutes.
    assert ip_tool.netns_sysctl(node0, "net.ipv4.tcp_retries2") == str(plan.PEER_RETRIES)
    assert [n["cable"] for n in rl.status(name)["nodes"]] == ["up", "up"]
    cut = rl("cluster", "cut", name, "--node", "1")
    assert f"switch port rlv-{name}-1 down" in cut.stderr
    assert [n["cable"] for n in rl.status(name)["nodes"]] == ["up", "cut"]
    unreachable = in_node(node0, "timeout", "5", "nbdinfo", "--list", keyed(ready, "10.77.0.2"))
    assert unreachable.returncode != 0
    rl("cluster", "heal", name, "--node", "1")
    assert [n["cable"] for n in rl.status(name)["nodes"]] == ["up", "up"]
    listing = in_node(node0, "nbdinfo", "--list", "--json", keyed(ready, "10.77.0.2"))
    assert listing.returncode == 0, listing.stderr
    assert rl("cluster", "cut", name, "--node", "2", check=False).returncode == 2


def test_down_leaves_nothing(rl, name):
    ready = rl.up(name, "--nodes", "2", "--disks-per-node", "2", "--disk-size", "16M")
    assert network_leftovers(name)  # the check sees a cluster while it is up
    assert leftovers(rl.home / "labs" / name, name)
    listing = in_node(ready["nodes"][1]["namespace"], "nbdinfo", "--list", "--json", keyed(ready, "10.77.0.1"))
    assert [e["export-name"] for e in json.loads(listing.stdout)["exports"]] == ["d0", "d1"]
    down = rl("cluster", "down", name)
    assert "down" in down.stderr
    assert everything_left(rl, name) == {}
    assert not (rl.home / "labs" / name).exists()
    assert rl("cluster", "down", name, check=False).returncode == 2  # gone: one line, exit 2


def test_lab_cleanup_releases_a_killed_daemon(rl, name):
    ready = rl.up(name, "--nodes", "2", "--disk-size", "16M")
    os.kill(ready["pid"], signal.SIGKILL)
    wait_gone(ready["pid"])
    left = network_leftovers(name)
    assert left.get("namespaces") and left.get("links")  # a SIGKILL leaves the network behind
    not_up = rl("cluster", "status", name, check=False)
    assert not_up.returncode == 2 and "lab cleanup" in not_up.stderr
    cleaned = rl("lab", "cleanup", name)
    assert "network namespace" in cleaned.stdout and "bridge" in cleaned.stdout
    assert everything_left(rl, name) == {}
    rl("cluster", "down", name)  # removes the lab directory
    assert not (rl.home / "labs" / name).exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_daemon_releases_everything(rl, name, signum):
    ready = rl.up(name, "--nodes", "2", "--disk-size", "16M")
    os.kill(ready["pid"], signum)
    wait_gone(ready["pid"])
    assert everything_left(rl, name) == {}
    state = json.loads((rl.home / "labs" / name / "state.json").read_text())
    assert state["resources"] == []
    log = (rl.home / "labs" / name / "daemon.log").read_text()
    assert f"{signal.Signals(signum).name} received" in log and "released bridge" in log


def test_bad_input_is_one_line_and_exit_2(rl, name):
    for args, words in ((["--nodes", "0"], "--nodes"), (["--nodes", "2", "--link", "fast"], "link rate"),
                        (["--nodes", "2", "--subnet", "10.77.0.0/31"], "room for")):
        proc = rl("cluster", "up", name, *args, check=False)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (rl.home / "labs" / name).exists()

    rl.up(name, "--nodes", "1", "--disk-size", "16M")
    again = rl("cluster", "up", name, "--nodes", "1", check=False)
    assert again.returncode == 2 and "up already" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    rl("cluster", "status", name)  # still up, untouched

    # A name whose network objects someone else holds is refused before anything is built.
    other = "t" + secrets.token_hex(3)
    subprocess.run(["ip", "link", "add", f"rlx-{other}", "type", "bridge"], check=True)
    try:
        taken = rl("cluster", "up", other, "--nodes", "2", check=False)
        assert taken.returncode == 2 and f"bridge rlx-{other}" in taken.stderr, taken.stderr
        assert len(taken.stderr.strip().splitlines()) == 1
        assert not (rl.home / "labs" / other).exists()
        assert Path(f"/sys/class/net/rlx-{other}").exists()  # the stranger's bridge is left alone
        assert not network_leftovers(other).get("namespaces")
    finally:
        subprocess.run(["ip", "link", "delete", f"rlx-{other}"], check=False)
