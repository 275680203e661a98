"""A scenario file written by another user cannot make root's mkfs read or write a path.

`raidlab run` runs mkfs as root with the scenario's `mkfs_options`. Here the user `nobody`
writes the scenario, in a directory of its own, with `-d DIR` (mke2fs would copy DIR, a
root-only directory holding a secret, into the array's image) or `-z FILE` (mke2fs would
create an undo file at a new path as root). Root runs it through the CLI: it must be refused
in one line, exit 2, before anything is made: no results directory, no lab, no loop device
over the lab's files, no file at the -z path. The same file without the attack passes a
`--dry-run`, so the refusal is the option's, not the file's owner or place.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from lab_leftovers import loops_of

pytestmark = [pytest.mark.root, pytest.mark.live]

SCENARIO = """
[scenario]
id = "attack"
title = "written by another user"

[[arch]]
label = "r0"
arch = "raid0"
disks = 2
disk_size = "16M"

[workload]
name = "postmark"
mkfs_options = {mkfs_options}
"""


@pytest.fixture
def nobody_dir():
    """A directory `nobody` owns and writes, where root can read what it leaves."""
    path = Path(tempfile.mkdtemp(prefix="raidlab-nobody-"))
    os.chown(path, 65534, 65534)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _written_by_nobody(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", f"cat > {shlex.quote(str(path))}"],
                   input=text, text=True, check=True, timeout=60)
    assert path.stat().st_uid == 65534
    return path


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


@pytest.mark.parametrize("attack", ["-d", "-z"])
def test_a_scenario_from_another_user_cannot_make_mkfs_read_or_write_a_path(tmp_path, nobody_dir, raidlab_cmd,
                                                                              attack):
    secret_dir = tmp_path / "root-only"
    secret_dir.mkdir(mode=0o700)
    (secret_dir / "secret").write_text("root's secret\n")
    undo_file = tmp_path / "made-by-mkfs.e2undo"
    mkfs_options = {"-d": ["-b", "1024", "-d", str(secret_dir)], "-z": ["-b", "1024", "-z", str(undo_file)]}[attack]
    scenario = _written_by_nobody(nobody_dir, "attack.toml", SCENARIO.format(mkfs_options=_toml_list(mkfs_options)))
    home, results = tmp_path / "home", tmp_path / "results"

    proc = subprocess.run(raidlab_cmd + ["run", str(scenario), "--home", str(home), "--results", str(results)],
                          capture_output=True, text=True, timeout=300)

    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(scenario) in lines[0] and "workload.mkfs_options" in lines[0] and f"'{attack}'" in lines[0]
    assert "allowed: -b " in lines[0]
    assert not results.exists() and not home.exists()  # no results directory, no lab
    assert loops_of(home) == [] and loops_of(tmp_path) == []
    assert not undo_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root-only"]

    # Control: the same file from the same user, without the attack, is accepted.
    harmless = _written_by_nobody(nobody_dir, "harmless.toml", SCENARIO.format(mkfs_options='["-b", "1024"]'))
    dry = subprocess.run(raidlab_cmd + ["run", str(harmless), "--dry-run", "--home", str(home),
                                        "--results", str(results)], capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-2000:]


SIM_TRACE = """
[scenario]
id = "attack-trace"
title = "written by another user"
kind = "sim"

[[arch]]
label = "disk"
arch = "disk"
disks = 1
disk_model = "hp-c2200a"
disk_size = 335333376

[workload]
name = "trace"

[[case]]
name = "stolen"
params = {{ trace = "{trace}", format = "raidlab" }}
"""


def test_a_trace_file_the_scenarios_author_cannot_read_is_refused(raidlab_cmd, nobody_dir, tmp_path):
    """A replay scenario of nobody's naming a root-only file as its trace: refused before
    root opens it; the same scenario naming a file nobody may read is accepted."""
    secret = tmp_path / "secret.trace"
    secret.write_text("raidlab-trace v1\n# secret-line\ntime,op,offset,length,device\n")
    os.chmod(secret, 0o600)
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "300"}
    path = _written_by_nobody(nobody_dir, "attack-trace.toml", SIM_TRACE.format(trace=secret))
    proc = subprocess.run([*raidlab_cmd, "run", str(path), "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "case[0].params.trace" in proc.stderr
    assert "secret-line" not in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()
    # nobody's own trace is theirs to replay
    own = nobody_dir / "own.trace"
    shutil.copyfile(secret, own)
    os.chown(own, 65534, 65534)
    path = _written_by_nobody(nobody_dir, "own-trace.toml", SIM_TRACE.format(trace=own))
    proc = subprocess.run([*raidlab_cmd, "run", str(path), "--dry-run"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
