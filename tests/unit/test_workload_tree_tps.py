"""The untar source-tree generator (shape, determinism, a tar that real `tar` extracts) and the
TPS program (built with gcc, run on a temporary directory, its read check shown to fail on
tampered data). Real programs, no root, no device.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from raidlab.errors import MissingToolError
from raidlab.runners.session import NativeSession
from raidlab.workloads import tps, untar
from raidlab.workloads.base import Commands


def test_full_size_tree_has_the_papers_shape():
    spec = untar.tree_spec(seed=1, scale=1.0)
    assert len(spec.directories) == 952
    assert len(spec.files) == 12_322
    assert spec.total_bytes == 12_322 * 9_900          # 122.0 MB, 9.9 KB mean
    depths = spec.depth_histogram()
    assert len(depths) >= 6 and max(depths) <= 12      # "different depths"
    sizes = sorted(size for _p, size in spec.files)
    assert sizes[len(sizes) // 2] < 9_900 < sizes[-1]  # skewed: median below the mean
    # every file's directory exists in the tree; no duplicate paths
    dirs = set(spec.directories)
    assert all("/" not in p or p.rsplit("/", 1)[0] in dirs for p, _s in spec.files)
    assert len({p for p, _s in spec.files}) == len(spec.files)


def test_tree_is_deterministic_and_scaled():
    assert untar.tree_spec(7, 0.1) == untar.tree_spec(7, 0.1)
    assert untar.tree_spec(7, 0.1) != untar.tree_spec(8, 0.1)
    small = untar.tree_spec(7, 0.01)
    assert (len(small.directories), len(small.files)) == (10, 123)
    assert small.total_bytes == 123 * 9_900


def test_tar_is_reproducible_and_extracts(tmp_path):
    spec = untar.tree_spec(3, 0.01)
    first = untar.build_tar(spec, tmp_path / "a.tar")
    second = untar.build_tar(spec, tmp_path / "b.tar")
    assert first == second                               # byte-identical
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "xf", str(tmp_path / "a.tar"), "-C", str(out)], check=True)
    root = out / untar.TREE_ROOT
    files = [p for p in root.rglob("*") if p.is_file()]
    dirs = [p for p in root.rglob("*") if p.is_dir()]
    assert len(files) == len(spec.files) and len(dirs) == len(spec.directories)
    assert sum(p.stat().st_size for p in files) == spec.total_bytes
    sizes = {str(p.relative_to(root)): p.stat().st_size for p in files}
    assert sizes == dict(spec.files)


def test_cached_tar_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, spec, digest = untar.cached_tar(5, 0.005)
    mtime = path.stat().st_mtime_ns
    again, _spec, digest2 = untar.cached_tar(5, 0.005)
    assert again == path and digest2 == digest and path.stat().st_mtime_ns == mtime


def test_missing_program_is_one_line_naming_the_package(tmp_path):
    with NativeSession("/dev/null", scratch=tmp_path) as session:
        commands = Commands(session)
        with pytest.raises(MissingToolError) as info:
            commands.require({"sh": "dash", "raidlab-no-such-program": "raidlab-pkg"})
    message = str(info.value)
    assert "raidlab-no-such-program" in message and "apt-get install raidlab-pkg" in message
    assert "\n" not in message


# ------------------------------------------------------------------------- TPS program

@pytest.fixture(scope="module")
def tps_program() -> Path:
    return tps.tps_binary()


def test_tps_binary_is_static_and_cached(tps_program):
    assert tps_program.exists() and tps_program.name.startswith("tps-")
    assert tps.tps_binary() == tps_program                       # cached by source hash
    assert PT_INTERP not in _elf_segment_types(tps_program.read_bytes())   # no dynamic loader


PT_INTERP = 3


def _elf_segment_types(elf: bytes) -> list[int]:
    """Program-header types of a 64-bit little-endian ELF file."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and elf[5] == 1
    phoff = int.from_bytes(elf[32:40], "little")
    phentsize = int.from_bytes(elf[54:56], "little")
    phnum = int.from_bytes(elf[56:58], "little")
    return [int.from_bytes(elf[phoff + i * phentsize:phoff + i * phentsize + 4], "little")
            for i in range(phnum)]


def _run_tps(binary: Path, *args: str) -> tuple[int, list[dict], str]:
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, tps.parse_output(proc.stdout), proc.stderr


def test_tps_serves_every_transaction(tps_program, tmp_path):
    rc, events, err = _run_tps(tps_program, "--prepare", "--run", "--dir", str(tmp_path),
                               "--dataset-mb", "8", "--clients", "1,3", "--mixes", "3",
                               "--mix-tx", "10", "--write-ratio", "0.5", "--io", "buffered",
                               "--request-size", "512", "--seed", "9")
    assert rc == 0, err
    prepare, set1, set3, done = events
    assert prepare["bytes"] == 8 << 20
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"seg{i}.dat" for i in range(4)]
    assert all(p.stat().st_size == 2 << 20 for p in tmp_path.iterdir())
    for s, clients in ((set1, 1), (set3, 3)):
        assert s["clients"] == clients
        assert s["transactions"] == clients * 3 * 10
        assert s["reads"] + s["writes"] == s["transactions"]
        assert (s["server_reads"], s["server_writes"]) == (s["reads"], s["writes"])
        assert s["server_bytes_written"] == 512 * s["writes"]
        assert s["verify_errors"] == 0 and s["error"] == "" and s["tps"] > 0
    assert done == {"event": "done", "failed": False}
    # the same seed draws the same reads and writes
    _rc, again, _err = _run_tps(tps_program, "--run", "--dir", str(tmp_path), "--dataset-mb", "8",
                                "--clients", "1", "--mixes", "3", "--mix-tx", "10",
                                "--write-ratio", "0.5", "--io", "buffered",
                                "--request-size", "512", "--seed", "9")
    assert (again[0]["reads"], again[0]["writes"]) == (set1["reads"], set1["writes"])


def test_tps_write_ratio_is_followed(tps_program, tmp_path):
    rc, events, err = _run_tps(tps_program, "--prepare", "--run", "--dir", str(tmp_path),
                               "--dataset-mb", "4", "--clients", "2", "--mixes", "16",
                               "--mix-tx", "32", "--write-ratio", "0.9", "--io", "buffered")
    assert rc == 0, err
    s = events[1]
    assert s["transactions"] == 1024
    assert 0.85 < s["writes"] / s["transactions"] < 0.95


def test_tps_detects_reads_from_the_wrong_place(tps_program, tmp_path):
    """Planted fault: zero one segment after prepare; reads of it must fail the run."""
    args = ["--dir", str(tmp_path), "--dataset-mb", "4", "--clients", "1", "--mixes", "4",
            "--mix-tx", "32", "--write-ratio", "0", "--io", "buffered"]
    rc, _events, err = _run_tps(tps_program, "--prepare", *args)
    assert rc == 0, err
    (tmp_path / "seg0.dat").write_bytes(bytes(1 << 20))
    rc, events, _err = _run_tps(tps_program, "--run", *args)
    assert rc == 1
    assert events[0]["verify_errors"] > 0
    assert events[-1] == {"event": "done", "failed": True}


def test_tps_refuses_bad_arguments(tps_program, tmp_path):
    rc, _events, err = _run_tps(tps_program, "--run", "--dir", str(tmp_path),
                                "--request-size", "1000")
    assert rc == 2 and "multiple of 512" in err
    rc, _events, err = _run_tps(tps_program, "--run", "--dir", str(tmp_path), "--clients", "0")
    assert rc == 2


def test_tps_output_is_json_lines(tps_program, tmp_path):
    proc = subprocess.run([str(tps_program), "--prepare", "--dir", str(tmp_path),
                           "--dataset-mb", "1"], capture_output=True, text=True, check=True)
    assert [json.loads(line)["event"] for line in proc.stdout.splitlines()] == ["prepare"]


def _processes_mentioning(fragment: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if fragment in cmdline:
            pids.append(int(entry.name))
    return pids


def test_tps_timeout_leaves_no_process_behind(tmp_path):
    """The session kills tps at its timeout; its server, handlers and clients die with it
    (PR_SET_PDEATHSIG) and the driver still removes its data set and binary."""
    import time

    from raidlab.runners.session import ExecTimeout
    from raidlab.workloads import get

    data = tmp_path / "fs"
    data.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    params = {"clients": [4], "dataset_mb": 4, "mixes": 64, "mix_tx": 10_000_000,
              "io": "buffered", "timeout": 1.5}
    with NativeSession("/dev/null", scratch=scratch) as session:
        with pytest.raises(ExecTimeout):
            get("tps").run(session, str(data), params)
    deadline = time.monotonic() + 10
    while _processes_mentioning(str(scratch)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_mentioning(str(scratch)) == []
    assert list(data.iterdir()) == [] and list(scratch.iterdir()) == []
