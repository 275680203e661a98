"""Engine arrays over the cluster, through the CLI as a user runs them: `raidlab create NAME
--arch A --cluster C` on node 0 of a four-node cluster (one local member, three over NBD),
fio --verify on the raw device, a node's cable cut, then fio writes and reads (the array
serves degraded and the member fails within the bound), the cable healed and the member
rebuilt in place, `raidlab check`; and what is left after destroy + cluster down, and after
a SIGKILLed array daemon and `raidlab lab cleanup`.

What is left is checked independently of raidlab's bookkeeping (lab_leftovers: losetup -a,
/proc/mounts, the process table, ip netns and ip link). Every test has its own RAIDLAB_HOME
and a cluster name of its own.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from raidlab.disks.nodedisk import DEADLINE
from raidlab.tools import fio

import test_dcd_vcraid_live
from lab_leftovers import leftovers, network_leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

REDUNDANT = ["raidx", "raid10", "chained", "raid5"]
CUT_NODE = 2


class Raidlab(test_dcd_vcraid_live.Raidlab):
    def refused(self, *args: str) -> str:
        """A refusal: exit 2, one line on stderr, no traceback."""
        proc = self(*args, check=False)
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
        return proc.stderr


@pytest.fixture
def rl(raidlab_cmd, tmp_path):
    r = Raidlab(raidlab_cmd, tmp_path / "home")
    yield r
    labs = tmp_path / "home" / "labs"
    for entry in labs.glob("*"):
        log = entry / "daemon.log"
        if log.exists():  # destroy and down remove the lab; keep its log for a post-mortem
            (tmp_path / f"{entry.name}-daemon.log").write_bytes(log.read_bytes())
    # instances joined to another array first: the array they join refuses to go before them
    arrays = sorted((e.name for e in labs.glob("*") if (e / "array.json").exists()),
                    key=lambda n: json.loads((labs / n / "array.json").read_text()).get("joins") is None)
    clusters = [e.name for e in labs.glob("*") if (e / "cluster.json").exists()]
    for name in arrays:
        r("destroy", name, check=False)
    for name in clusters:
        r("cluster", "heal", name, "--node", str(CUT_NODE), check=False)
        if r("cluster", "down", name, check=False).returncode != 0:
            r("lab", "cleanup", name, check=False)


@pytest.fixture
def cluster(rl) -> str:
    """Four nodes of one untimed 32 MiB disk each."""
    name = "t" + secrets.token_hex(3)
    rl("cluster", "up", name, "--nodes", "4", "--disk-model", "none", "--disk-size", "32M")
    return name


def fio_job(device: str, seed: int, **extra: str) -> fio.FioJob:
    return fio.FioJob(name="verify", filename=device, rw="randwrite", bs="4k", size="8m", iodepth=8,
                      verify="crc32c", seed=seed, extra=extra)


def fio_verify(device: str, seed: int, **extra: str) -> fio.FioRun:
    run = fio.run_job(fio_job(device, seed, **extra))
    assert run.ok and all(job.error == 0 for job in run.jobs), run.stderr
    assert run.jobs[0].read.ios > 0
    return run


def everything_left(rl: Raidlab, cluster: str, array: str) -> dict[str, list[str]]:
    return {**network_leftovers(cluster), **leftovers(rl.home / "labs" / cluster, cluster),
            **leftovers(rl.home / "labs" / array, array)}


# The default suite runs RAID-x (the paper's) and raid5 over the cluster; the other layouts
# take the same member path (only the layout differs, which the unit tests cover) and run with
# `-m slow`, which keeps the suite's time in bounds.
SLOW = pytest.mark.slow


@pytest.mark.parametrize("arch", ["raidx", "raid5", pytest.param("raid10", marks=SLOW),
                                  pytest.param("chained", marks=SLOW), pytest.param("raid0", marks=SLOW)])
def test_an_array_over_the_cluster_serves_verified_data(rl, cluster, arch):
    device = rl("create", "x", "--arch", arch, "--cluster", cluster, "--chunk", "32K").stdout.strip()
    assert device.startswith("/dev/loop")
    fio_verify(device, seed=7)
    status = rl.status("x")
    assert status["cluster"] == {"name": cluster, "node": 0, "joins": None}
    members = status["statistics"]["members"]
    assert [(m["node"], m["where"]) for m in members] == [(0, "local"), (1, "remote"), (2, "remote"), (3, "remote")]
    assert [m["uri"] for m in members[1:]] == ["nbds://10.77.0.2/d0", "nbds://10.77.0.3/d0", "nbds://10.77.0.4/d0"]
    assert members[0]["path"].endswith(f"/labs/{cluster}/mnt/node0/d0")
    assert all(m["writes"] > 0 and m["errors"] == 0 for m in members)
    # Every remote member is an nbdfuse in node 0's namespace, connected to the node that serves it.
    for m in members[1:]:
        client_net = os.stat(f"/proc/{m['client_pid']}/ns/net").st_ino
        assert client_net == os.stat(f"/run/netns/rlx-{cluster}-0").st_ino
    # The writes to the three remote members crossed node 0's cable.
    sent = rl("cluster", "status", cluster, "--json").stdout
    assert json.loads(sent)["nodes"][0]["links"]["sent"]["bytes"] > sum(m["bytes_written"] for m in members[1:])
    text = rl("status", "x").stdout
    assert f"over cluster {cluster} from node 0 (1 local, 3 remote members" in text
    assert "nbds://10.77.0.3/d0" in text and "own d0, reached without the network" in text
    if arch != "raid0":
        assert '"mismatches": []' in rl("check", "x", "--json").stdout


@pytest.mark.long
@pytest.mark.parametrize("arch", [arch if arch == "raidx" else pytest.param(arch, marks=SLOW) for arch in REDUNDANT])
def test_a_cut_node_fails_its_member_in_bounded_time_and_is_rebuilt_after_heal(rl, cluster, arch):
    device = rl("create", "x", "--arch", arch, "--cluster", cluster, "--chunk", "32K").stdout.strip()
    fio_verify(device, seed=1)  # data written while every node is up

    # Cut node 2, then fio writes and reads back: its member's requests go unanswered until
    # node 0's TCP gives up (about 14 s), and fail with EIO; the rest is served degraded. (Cut
    # first: a cut ordered while fio runs can land after a short job has ended on a loaded
    # host, and then no request ever meets the dead node.)
    rl("cluster", "cut", cluster, "--node", str(CUT_NODE))
    cut_at = time.monotonic()
    outcome: dict = {}
    writer = threading.Thread(target=lambda: outcome.setdefault("run", fio.run_job(fio_job(device, seed=2))))
    writer.start()
    failed_after = None
    while writer.is_alive() or failed_after is None:
        members = rl.status("x")["statistics"]["members"]
        if failed_after is None and members[CUT_NODE]["failed"]:
            failed_after = time.monotonic() - cut_at
        assert time.monotonic() - cut_at < 120, "node 2's member did not fail within 120 s of the cut"
        time.sleep(0.5)
    writer.join()
    run = outcome["run"]
    assert run.ok and run.jobs[0].read.ios > 0, run.stderr  # every block fio wrote read back verified
    assert failed_after < DEADLINE + 10, f"the member failed {failed_after:.1f} s after the cut"
    status = rl.status("x")
    stats = status["statistics"]
    assert stats["state"] == "degraded" and stats["failed_members"] == [CUT_NODE]
    assert stats["member_errors"] >= 1 and stats["degraded_reads"] + stats["degraded_writes"] > 0
    dead = stats["members"][CUT_NODE]
    assert dead["failed"] and dead["errors"] >= 1 and dead["max_service_ms"] < (DEADLINE + 5) * 1000
    fio_verify(device, seed=1, verify_only="1")  # the data of the healthy run, read degraded
    assert "cut" in rl("cluster", "status", cluster).stdout

    rl("cluster", "heal", cluster, "--node", str(CUT_NODE))
    replaced = rl("replace", "x", "--disk", str(CUT_NODE))
    assert "rebuilt" in replaced.stderr and "state optimal" in replaced.stderr
    status = rl.status("x")
    assert status["statistics"]["state"] == "optimal"
    back = status["statistics"]["members"][CUT_NODE]
    assert back["where"] == "remote" and not back["failed"] and back["bytes_written"] > 0
    fio_verify(device, seed=2, verify_only="1")  # written degraded, read from the rebuilt array
    fio_verify(device, seed=3)
    check = json.loads(rl("check", "x", "--json").stdout)
    assert check["mismatches"] == []
    # One nbdfuse per remote member: the dead connection was released with the replacement.
    assert len([p for p in _nbdfuse_of(rl.home / "labs" / "x")]) == 3


@pytest.mark.long
def test_a_member_failed_by_hand_waits_for_its_node_before_it_is_rebuilt(rl, cluster):
    device = rl("create", "x", "--arch", "raid10", "--cluster", cluster, "--chunk", "32K").stdout.strip()
    fio_verify(device, seed=4)
    rl("cluster", "cut", cluster, "--node", str(CUT_NODE))
    rl("fail", "x", "--disk", str(CUT_NODE))
    refused = rl.refused("replace", "x", "--disk", str(CUT_NODE))
    assert f"cannot reach node {CUT_NODE}'s d0 (nbds://10.77.0.3/d0)" in refused
    assert len(_nbdfuse_of(rl.home / "labs" / "x")) == 3  # the attempt left no client behind
    rl("cluster", "heal", cluster, "--node", str(CUT_NODE))
    rl("replace", "x", "--disk", str(CUT_NODE))
    fio_verify(device, seed=4, verify_only="1")
    assert json.loads(rl("check", "x", "--json").stdout)["mismatches"] == []


def test_destroy_and_down_leave_nothing(rl, cluster):
    rl("create", "x", "--arch", "raidx", "--cluster", cluster, "--chunk", "32K")
    assert len(_nbdfuse_of(rl.home / "labs" / "x")) == 3
    assert len(_nbd_mounts(rl.home / "labs" / "x")) == 3
    refused = rl.refused("cluster", "down", cluster)  # not under a running array
    assert "array 'x' runs over" in refused
    rl("destroy", "x")
    rl("cluster", "down", cluster)
    assert everything_left(rl, cluster, "x") == {}
    assert _nbdfuse_of(rl.home / "labs" / "x") == [] and not (rl.home / "labs" / "x").exists()


def test_lab_cleanup_releases_what_a_killed_array_daemon_left(rl, cluster):
    rl("create", "x", "--arch", "raid5", "--cluster", cluster, "--chunk", "32K")
    pid = rl.status("x")["pid"]
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    lab_dir = rl.home / "labs" / "x"
    assert len(_nbdfuse_of(lab_dir)) == 3 and len(_nbd_mounts(lab_dir)) == 3  # a SIGKILL leaves them
    cleaned = rl("lab", "cleanup", "x").stdout
    assert f"FUSE mount {lab_dir}/nbd/m1.0" in cleaned
    assert _nbdfuse_of(lab_dir) == [] and _nbd_mounts(lab_dir) == []
    assert leftovers(lab_dir, "x") == {}
    rl("destroy", "x")
    rl("cluster", "down", cluster)
    assert everything_left(rl, cluster, "x") == {}


def test_bad_input_is_one_line_and_exit_2(rl, cluster):
    assert "--node 4: cluster" in rl.refused("create", "x", "--arch", "raidx", "--cluster", cluster, "--node", "4")
    assert "no cluster named 'nosuch'" in rl.refused("create", "x", "--arch", "raidx", "--cluster", "nosuch")
    assert "engine's layouts" in rl.refused("create", "x", "--arch", "md-raid5", "--cluster", cluster)
    assert "--disk-size does not go with --cluster" in rl.refused(
        "create", "x", "--arch", "raidx", "--cluster", cluster, "--disk-size", "64M")
    assert "is the name of a cluster" in rl.refused("create", cluster, "--arch", "raidx", "--cluster", cluster)
    assert "has nodes 0..3" in rl.refused("cluster", "cut", cluster, "--node", "9")
    assert not (rl.home / "labs" / "x").exists()

    small = "t" + secrets.token_hex(3)
    rl("cluster", "up", small, "--nodes", "2", "--disk-size", "16M")
    assert "raid5 needs at least 3 disks" in rl.refused("create", "x", "--arch", "raid5", "--cluster", small)
    rl("create", "x", "--arch", "raid1", "--cluster", small, "--chunk", "32K")
    assert "hold array 'x' already" in rl.refused("create", "y", "--arch", "raidx", "--cluster", small)
    rl("destroy", "x")
    rl("cluster", "down", small)

    # A cluster whose daemon was killed is not up: refused before anything is built.
    pid = json.loads(rl("cluster", "status", cluster, "--json").stdout)["pid"]
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    assert f"cluster {cluster!r} is not up" in rl.refused("create", "x", "--arch", "raidx", "--cluster", cluster)
    rl("lab", "cleanup", cluster)
    assert not (rl.home / "labs" / "x").exists()


def _nbdfuse_of(lab_dir: Path) -> list[str]:
    return [p for p in leftovers(lab_dir).get("processes", []) if "nbdfuse" in p]


def _nbd_mounts(lab_dir: Path) -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith(f"{lab_dir}/nbd/")]


def _wait_gone(pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still runs after {timeout} s")


def test_clients_on_other_nodes_join_the_array_and_share_its_data(rl, cluster):
    """`raidlab create NAME --cluster C --node K --join X`: another instance of X on node K,
    as the paper's clients on every node use one array. Each instance writes its own region
    with fio --verify at the same time; the owner reads back what the clients wrote; the
    superblocks are the owner's alone; repairs and the owner's destroy wait for the clients."""
    devices = {"x": rl("create", "x", "--arch", "raidx", "--cluster", cluster, "--chunk", "32K").stdout.strip()}
    generation = rl.status("x")["generation"]
    for node in (1, 2):
        devices[f"x{node}"] = rl("create", f"x{node}", "--arch", "raidx", "--cluster", cluster, "--node", str(node),
                                  "--join", "x").stdout.strip()
    assert len(set(devices.values())) == 3 and all(d.startswith("/dev/loop") for d in devices.values())
    status = rl.status("x1")
    assert status["cluster"] == {"name": cluster, "node": 1, "joins": "x"}
    members = status["statistics"]["members"]
    assert [m["where"] for m in members] == ["remote", "local", "remote", "remote"]
    assert "another instance of x" in rl("status", "x1").stdout
    assert status["statistics"]["image_buffer"]["write_through"]     # x's logs are x's to write

    # Three writers at once, each in its own 8 MiB region, each verifying what it wrote.
    regions = {"x": 0, "x1": 16 << 20, "x2": 32 << 20}
    errors: list[str] = []

    def writer(name: str) -> None:
        run = fio.run_job(fio_job(devices[name], seed=11, offset=str(regions[name])), check=False)
        if not (run.ok and all(job.error == 0 for job in run.jobs)):
            errors.append(f"{name}: {run.stderr[-500:]}")

    threads = [threading.Thread(target=writer, args=(name,)) for name in regions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # The owner reads and verifies what the clients wrote, and a client what the owner wrote.
    for name, reader in (("x1", "x"), ("x2", "x"), ("x", "x2")):
        run = fio.run_job(fio_job(devices[reader], seed=11, offset=str(regions[name]), verify_only="1"), check=False)
        assert run.ok and all(job.error == 0 for job in run.jobs), (name, reader, run.stderr[-500:])
    assert rl.status("x")["generation"] == generation                 # nobody else wrote metadata

    assert "node 1 runs an instance" in rl.refused("create", "y", "--arch", "raidx", "--cluster", cluster,
                                                   "--node", "1", "--join", "x")
    assert "raid5" in rl.refused("create", "y", "--arch", "raid5", "--cluster", cluster, "--node", "3",
                                 "--join", "x")
    assert "another instance of x" in rl.refused("check", "x1")
    assert "x1" in rl.refused("destroy", "x")                          # its clients go first
    for name in ("x1", "x2", "x"):
        rl("destroy", name)
    rl("cluster", "down", cluster)
    assert not everything_left(rl, cluster, "x")


def test_parallel_clients_run_on_instances_joined_for_the_run(rl, cluster):
    """`raidlab cluster clients`: N clients on nodes 0..N-1, each on its own instance of the
    array, at once; the instances it joined are gone afterwards, and a read of what the
    clients wrote verifies through the owner."""
    device = rl("create", "x", "--arch", "chained", "--cluster", cluster, "--chunk", "32K").stdout.strip()
    wrote = json.loads(rl("cluster", "clients", cluster, "x", "--clients", "3", "--op", "write", "--file", "4M",
                          "--json").stdout)
    assert wrote["nodes"] == [0, 1, 2] and len(wrote["client_mb_s"]) == 3 and wrote["aggregate_mb_s"] > 0
    assert all(sent > 4 << 20 for sent in wrote["bytes_sent_per_node"][:3])   # each client's copies left its node
    read = json.loads(rl("cluster", "clients", cluster, "x", "--clients", "2", "--op", "read", "--file", "4M",
                         "--json").stdout)
    assert read["fio"][1]["jobs"][0]["read"]["io_bytes"] == 4 << 20
    assert [a["name"] for a in json.loads(rl("list", "--json").stdout)] == ["x"]
    assert "5 clients need 5 nodes" in rl.refused("cluster", "clients", cluster, "x", "--clients", "5",
                                                  "--op", "read", "--file", "4M")
    assert device.startswith("/dev/loop")
