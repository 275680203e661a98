"""`raidlab disk serve` interrupted everywhere: nothing may be left attached, mounted or running.

Each case runs the real command as a subprocess, stops it at an exact point (the
RAIDLAB_PAUSE_AT hook of raidlab.lab prints "raidlab: paused at <point>" and waits there),
interrupts it, and then checks `losetup -a`, /proc/mounts and the process table for anything
of the lab (tests/live/lab_leftovers.py, which does not use raidlab's own scanning).

Stale cleanup: after SIGKILL the leftovers are really there (the test sees them), and both
`raidlab lab cleanup NAME` and the next `raidlab disk serve --name NAME` release them.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

DEADLINE = 30.0


class Serve:
    """A `raidlab disk serve` subprocess whose stderr lines are collected by a thread."""

    def __init__(self, raidlab_cmd, home: Path, name: str, *, command=None, env=None,
                 disks: int = 2):
        argv = [*raidlab_cmd, "disk", "serve", "--json", "--disks", str(disks),
                "--disk-model", "none", "--disk-size", "16M", "--name", name]
        if command:
            argv += ["--", *command]
        full_env = dict(os.environ, RAIDLAB_HOME=str(home), **(env or {}))
        self.lab_dir = home / "labs" / name
        self.name = name
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=full_env)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, text: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"serve exited before {text!r}: {self.lines}")
            self.lines.append(line)
            if text in line:
                return
        raise AssertionError(f"no {text!r} within {DEADLINE} s: {self.lines}")

    def finish(self) -> tuple[int, str]:
        try:
            self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        # After a SIGKILL the orphaned command still holds our stderr pipe: do not wait
        # for its end-of-file.
        self._reader.join(timeout=0.2 if self.proc.returncode == -signal.SIGKILL else 5)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return self.proc.returncode, "\n".join(self.lines)


def _wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


POINTS = ["images-created", "fuse-mounted", "loop-attached", "loops-attached"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
@pytest.mark.parametrize("point", POINTS + ["command-running", "idle"])
def test_signal_at_every_point_releases_everything(raidlab_cmd, tmp_path, point, signum):
    name = f"sig-{point}"
    marker = tmp_path / "command-started"
    if point == "command-running":
        serve = Serve(raidlab_cmd, tmp_path, name,
                      command=["sh", "-c", f"touch {marker}; sleep 300"])
        _wait_until(marker.exists, "the command to start")
    elif point == "idle":
        serve = Serve(raidlab_cmd, tmp_path, name)
        serve.wait_for_line("serving;")
    else:
        serve = Serve(raidlab_cmd, tmp_path, name, env={"RAIDLAB_PAUSE_AT": point})
        serve.wait_for_line(f"paused at {point}")
    if point in ("loops-attached", "command-running", "idle"):
        held = leftovers(serve.lab_dir, name)
        assert len(held["loops"]) == 2 and held["mounts"], held  # the checks see resources
    serve.proc.send_signal(signum)
    rc, err = serve.finish()
    assert rc == 128 + signum, err
    assert f"interrupted by {signal.Signals(signum).name}" in err
    assert "Traceback" not in err
    assert leftovers(serve.lab_dir, name) == {}
    assert not list((serve.lab_dir / "images").glob("*.img"))


@pytest.mark.parametrize("point", POINTS + ["command-started"])
def test_failure_injected_during_setup_releases_everything(raidlab_cmd, tmp_path, point):
    name = f"fail-{point}"
    serve = Serve(raidlab_cmd, tmp_path, name, env={"RAIDLAB_FAIL_AT": point},
                  command=["sleep", "300"])
    rc, err = serve.finish()
    assert rc == 2, err
    assert f"raidlab: error: injected failure at {point}" in err
    assert "Traceback" not in err
    assert leftovers(serve.lab_dir, name) == {}


def test_failing_command_status_is_returned_and_everything_released(raidlab_cmd, tmp_path):
    serve = Serve(raidlab_cmd, tmp_path, "cmdfail",
                  command=["sh", "-c", 'test -b "$RAIDLAB_DISK1" && sleep 100 & exit 7'])
    rc, err = serve.finish()
    assert rc == 7, err
    assert leftovers(serve.lab_dir, "cmdfail") == {}  # incl. the backgrounded sleep


def test_command_that_cannot_run_is_one_line(raidlab_cmd, tmp_path):
    serve = Serve(raidlab_cmd, tmp_path, "nocmd", command=["/nonexistent/program"])
    rc, err = serve.finish()
    assert rc == 2
    assert [line for line in err.splitlines() if "error" in line] == [
        "raidlab: error: cannot run '/nonexistent/program': No such file or directory"]
    assert leftovers(serve.lab_dir, "nocmd") == {}


def test_command_sees_the_disks(raidlab_cmd, tmp_path):
    out = tmp_path / "env.txt"
    serve = Serve(raidlab_cmd, tmp_path, "env", disks=3, command=[
        "sh", "-c", f'for d in $RAIDLAB_DISKS; do test -b $d || exit 9; done; '
                    f'echo "$RAIDLAB_DISKS|$RAIDLAB_DISK0|$RAIDLAB_DISK2" > {out}'])
    rc, err = serve.finish()
    assert rc == 0, err
    disks, first, last = out.read_text().strip().split("|")
    assert disks.split() == [disks.split()[0], disks.split()[1], disks.split()[2]]
    assert disks.split()[0] == first and disks.split()[2] == last
    assert all(d.startswith("/dev/loop") for d in disks.split())


def _kill_with_leftovers(raidlab_cmd, home, name):
    marker = home / f"{name}-running"
    serve = Serve(raidlab_cmd, home, name, command=["sh", "-c", f"touch {marker}; sleep 300"])
    _wait_until(marker.exists, "the command to start")
    serve.proc.kill()
    serve.finish()
    held = leftovers(serve.lab_dir, name)
    # SIGKILL leaves everything behind: both loops, the (dead) FUSE mount, the command
    assert len(held.get("loops", [])) == 2, held
    assert held.get("mounts") and held.get("processes"), held
    return serve


def test_sigkill_then_lab_cleanup(raidlab_cmd, tmp_path):
    serve = _kill_with_leftovers(raidlab_cmd, tmp_path, "killed")
    env = dict(os.environ, RAIDLAB_HOME=str(tmp_path))
    listing = subprocess.run([*raidlab_cmd, "lab", "list", "--json"], env=env,
                             capture_output=True, text=True, check=True)
    assert '"status": "stale"' in listing.stdout
    proc = subprocess.run([*raidlab_cmd, "lab", "cleanup", "killed"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "detached" in proc.stdout and "unmounted" in proc.stdout
    assert leftovers(serve.lab_dir, "killed") == {}
    again = subprocess.run([*raidlab_cmd, "lab", "cleanup", "killed"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to release" in again.stdout


def test_sigkill_then_next_serve_releases_leftovers_first(raidlab_cmd, tmp_path):
    serve = _kill_with_leftovers(raidlab_cmd, tmp_path, "again")
    rerun = Serve(raidlab_cmd, tmp_path, "again", command=["true"])
    rc, err = rerun.finish()
    assert rc == 0, err
    assert "released leftover of a killed run" in err
    assert leftovers(serve.lab_dir, "again") == {}


MOUNT_AND_WAIT = ('mkfs.ext4 -q -F -E nodiscard "$RAIDLAB_DISK0" && mkdir -p "$RAIDLAB_LAB_DIR/fs" '
                  '&& mount "$RAIDLAB_DISK0" "$RAIDLAB_LAB_DIR/fs" && echo data > "$RAIDLAB_LAB_DIR/fs/f" '
                  '&& touch {marker} && sleep 300')


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_file_system_the_command_left_mounted_is_released(raidlab_cmd, tmp_path, how):
    """The command mounted ext4 from a lab disk and never unmounts it: SIGTERM releases it
    live; after SIGKILL, `raidlab lab cleanup` does."""
    marker = tmp_path / "mounted"
    serve = Serve(raidlab_cmd, tmp_path, "fs", command=["sh", "-c",
                                                        MOUNT_AND_WAIT.format(marker=marker)])
    _wait_until(marker.exists, "the command to mount")
    assert any("/fs " in line for line in leftovers(serve.lab_dir, "fs")["mounts"])
    if how == "SIGTERM":
        serve.proc.send_signal(signal.SIGTERM)
        rc, err = serve.finish()
        assert rc == 128 + signal.SIGTERM, err
    else:
        serve.proc.kill()
        serve.finish()
        env = dict(os.environ, RAIDLAB_HOME=str(tmp_path))
        proc = subprocess.run([*raidlab_cmd, "lab", "cleanup", "fs"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert leftovers(serve.lab_dir, "fs") == {}


def test_loops_the_command_attached_itself_are_released(raidlab_cmd, tmp_path):
    serve = Serve(raidlab_cmd, tmp_path, "ownloop", command=[
        "sh", "-c", 'losetup --find --show "$RAIDLAB_MOUNT/disks/d1" > "$RAIDLAB_LAB_DIR/own"'])
    rc, err = serve.finish()
    assert rc == 0, err
    own = (serve.lab_dir / "own").read_text().strip()
    assert own.startswith("/dev/loop") and own in err  # reported as released
    assert leftovers(serve.lab_dir, "ownloop") == {}
    assert not Path(f"/sys/block/{Path(own).name}/loop").exists()


def test_stale_loops_of_an_already_detached_fuse_mount(raidlab_cmd, tmp_path):
    """SIGKILL, then someone lazily unmounts the dead FUSE mount: the kernel now names the
    loops' files "/disks/dK", no longer under the lab -- the state file still finds them."""
    marker = tmp_path / "up"
    serve = Serve(raidlab_cmd, tmp_path, "orphan",
                  command=["sh", "-c", f"touch {marker}; sleep 300"])
    _wait_until(marker.exists, "the command to start")
    devices = [d["device"] for d in json.loads(serve.proc.stdout.readline())["disks"]]
    serve.proc.kill()
    serve.finish()
    subprocess.run(["umount", "--lazy", str(serve.lab_dir / "mnt")], check=True)
    for dev in devices:
        name = Path(f"/sys/block/{Path(dev).name}/loop/backing_file").read_text().strip()
        assert name.startswith("/disks/d")
    env = dict(os.environ, RAIDLAB_HOME=str(tmp_path))
    proc = subprocess.run([*raidlab_cmd, "lab", "cleanup", "orphan"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for dev in devices:  # gone (or, if another user grabbed the number since, not ours)
        backing = Path(f"/sys/block/{Path(dev).name}/loop/backing_file")
        assert not backing.exists() or not backing.read_text().startswith("/disks/d"), \
            proc.stdout
    assert leftovers(serve.lab_dir, "orphan") == {}


def test_cleanup_of_a_running_lab_is_refused(raidlab_cmd, tmp_path):
    serve = Serve(raidlab_cmd, tmp_path, "busy")
    serve.wait_for_line("serving;")
    env = dict(os.environ, RAIDLAB_HOME=str(tmp_path))
    proc = subprocess.run([*raidlab_cmd, "lab", "cleanup", "busy"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "in use" in proc.stderr
    second = Serve(raidlab_cmd, tmp_path, "busy", command=["true"])
    rc, err = second.finish()
    assert rc == 2 and "in use" in err
    assert len(leftovers(serve.lab_dir, "busy")["loops"]) == 2  # the first run is untouched
    serve.proc.send_signal(signal.SIGTERM)
    rc, _ = serve.finish()
    assert rc == 128 + signal.SIGTERM
    assert leftovers(serve.lab_dir, "busy") == {}


def test_not_root_is_one_line_and_creates_nothing(tmp_path, monkeypatch, capsys):
    from raidlab.cli import main

    monkeypatch.setenv("RAIDLAB_HOME", str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    rc = main(["disk", "serve", "--disks", "2", "--disk-model", "none", "--disk-size", "16M"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "needs root" in err
    assert not (tmp_path / "labs").exists()
