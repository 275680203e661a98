"""The lab runtime without kernel objects: state file, lock, cleanup stack, signals, hooks.

Releases here are plain Python callbacks, so these tests need no root; the live tests in
tests/live/ check the same machinery with real FUSE mounts, loop devices and processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import trio

from raidlab.errors import LabError, LabInterrupted, UsageError
from raidlab.lab import (FAIL_AT_ENV, Lab, check_lab_name, cleanup_stale, list_labs,
                         open_lab, process_start_time)
from raidlab.lab.cleanup import recorded_backing_names


def test_state_file_records_and_forgets(tmp_path):
    lab = Lab("a", home=tmp_path, create=True)
    lab.begin_run()
    r1 = lab.record("loop", device="/dev/loop7", backing_file="/x/d0")
    r2 = lab.record("process", pid=1, argv=["sleep"])
    assert [r.id for r in lab.resources()] == [r1.id, r2.id]
    lab.update(r1, note="x")
    assert lab.resources()[0].fields["note"] == "x"
    lab.forget(r1)
    assert [r.kind for r in lab.resources()] == ["process"]
    state = lab.read_state()
    assert state["owner"]["pid"] == os.getpid() and state["owner"]["run_id"] == lab.run_id
    assert not (lab.path / "state.tmp").exists()  # replaced atomically


def test_unknown_lab_and_bad_names(tmp_path):
    with pytest.raises(LabError):
        Lab("nope", home=tmp_path)
    for bad in ("", "../x", "a b", "-x", "x" * 65):
        with pytest.raises(UsageError):
            check_lab_name(bad)


def test_lock_is_exclusive_between_holders(tmp_path):
    first = Lab("l", home=tmp_path, create=True)
    second = Lab("l", home=tmp_path)
    with first.owned():
        assert second.in_use()
        with pytest.raises(LabError, match="in use"):
            with second.owned():
                pass
    assert not second.in_use()


def test_lock_of_a_killed_owner_is_free(tmp_path):
    lab = Lab("k", home=tmp_path, create=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lab.path / 'lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert lab.in_use()
        holder.kill()
        holder.wait()
        assert not lab.in_use()
    finally:
        holder.kill()


def test_a_lock_handed_to_a_child_stays_held_while_either_holds_it(tmp_path):
    starter = Lab("h", home=tmp_path, create=True)
    other = Lab("h", home=tmp_path)
    assert starter.try_lock()
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom raidlab.lab import Lab\n"
        f"lab = Lab('h', home={str(tmp_path)!r})\nlab.adopt_lock(int(sys.argv[1]))\n"
        "print('adopted', flush=True)\ntime.sleep(60)\n"), str(starter.lock_fd)],
        stdout=subprocess.PIPE, text=True, pass_fds=(starter.lock_fd,))
    try:
        assert child.stdout.readline().strip() == "adopted"
        starter.unlock()  # the starter goes (or is killed): the child still holds the lab
        assert other.in_use()
        child.kill()
        child.wait()
        assert not other.in_use()
    finally:
        child.kill()


def test_only_the_lab_s_own_lock_file_can_be_adopted(tmp_path):
    lab = Lab("a", home=tmp_path, create=True)
    (lab.path / "lock").touch()
    fd = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(LabError, match="not its lock file"):
            lab.adopt_lock(fd)
    finally:
        os.close(fd)
    holder = Lab("a", home=tmp_path)
    assert holder.try_lock()
    fd = os.open(lab.path / "lock", os.O_RDWR)  # the lock file, but not the open file locked
    try:
        with pytest.raises(LabError, match="not held by its starter"):
            lab.adopt_lock(fd)
    finally:
        os.close(fd)
        holder.unlock()


def test_stale_cleanup_kills_a_recorded_process_and_removes_images(tmp_path):
    lab = Lab("s", home=tmp_path, create=True)
    lab.begin_run()
    lab.images_dir.mkdir(parents=True, exist_ok=True)
    image = lab.images_dir / "d0.img"
    image.write_bytes(b"x")
    kept = lab.images_dir / "d1.img"
    kept.write_bytes(b"y")
    lab.record("image", path=str(image), keep=False)
    lab.record("image", path=str(kept), keep=True)
    child = subprocess.Popen(["sleep", "60"], start_new_session=True,
                             env={**os.environ, "RAIDLAB_LAB_DIR": str(lab.path)})
    lab.record("process", pid=child.pid, pgid=child.pid, argv=["sleep", "60"],
               start_time=process_start_time(child.pid))
    # a recorded pid that is now some other process must be left alone
    lab.record("process", pid=os.getpid(), pgid=None, argv=["me"], start_time=1)
    assert list_labs(tmp_path)[0]["status"] == "stale"
    with lab.owned():
        report = cleanup_stale(lab)
    assert child.wait(timeout=10) == -signal.SIGTERM
    assert not image.exists() and kept.exists()
    assert report.failed == []
    assert lab.resources() == []
    assert list_labs(tmp_path)[0]["status"] == "idle"


def test_stale_cleanup_leaves_alone_what_a_forged_state_file_names(tmp_path):
    """A state file is only a file: records naming a process not started for the lab, a file
    or loop backing file outside it, a foreign link or another process group are refused,
    said as failures, and their records dropped; the things they name are untouched."""
    lab = Lab("f", home=tmp_path, create=True)
    lab.begin_run()
    outside = tmp_path / "precious.img"
    outside.write_bytes(b"keep me")
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # no lab in its environment
    try:
        lab.record("image", path=str(outside), keep=False)
        lab.record("image", path=str(lab.path / ".." / ".." / "precious.img"), keep=False)
        lab.record("loop", device="/dev/loop99", backing_file=str(outside))
        lab.record("fuse_mount", path="/")
        lab.record("link", name="eth0", link_kind="veth")
        lab.record("netns", name="somebody-else")
        lab.record("process", pid=stranger.pid, pgid=stranger.pid, argv=["sleep", "60"],
                   start_time=process_start_time(stranger.pid))
        lab.record("process", pid=stranger.pid, pgid=1, argv=["sleep"], start_time=process_start_time(stranger.pid))
        with lab.owned():
            report = cleanup_stale(lab)
        assert stranger.poll() is None and outside.read_bytes() == b"keep me"
        assert len(report.failed) == 8, report.failed
        assert all("not this lab's" in line for line in report.failed), report.failed
        assert any("does not name the lab" in line for line in report.failed), report.failed
        assert lab.resources() == []
    finally:
        stranger.kill()
        stranger.wait()


def _run(async_fn):
    return trio.run(async_fn)


def test_cleanup_stack_unwinds_in_reverse_on_success(tmp_path):
    order = []

    async def main():
        async with open_lab("ok", home=tmp_path, status=lambda m: None,
                            handle_signals=False) as session:
            for name in ("images", "fuse", "loop0", "loop1"):
                res = session.lab.record("image", path=name)

                async def release(name=name):
                    order.append(name)

                session.push(name, release, res)
            assert len(session.lab.resources()) == 4
        return session.lab

    lab = _run(main)
    assert order == ["loop1", "loop0", "fuse", "images"]
    assert lab.resources() == [] and "owner" not in lab.read_state()


def test_cleanup_runs_when_setup_fails_and_the_error_comes_through_unwrapped(tmp_path,
                                                                              monkeypatch):
    released = []
    monkeypatch.setenv(FAIL_AT_ENV, "fuse-mounted")

    async def main():
        async with open_lab("fail", home=tmp_path, status=lambda m: None,
                            handle_signals=False) as session:
            session.push_sync("first", lambda: released.append("first"))
            await session.checkpoint("images-created")
            await session.checkpoint("fuse-mounted")
            session.push_sync("never", lambda: released.append("never"))

    with pytest.raises(LabError, match="injected failure at fuse-mounted"):
        _run(main)
    assert released == ["first"]


def test_a_failing_release_is_reported_and_stays_recorded(tmp_path):
    async def main():
        async with open_lab("bad", home=tmp_path, status=lambda m: None,
                            handle_signals=False) as session:
            res = session.lab.record("loop", device="/dev/loop99", backing_file="/x")

            def release():
                raise RuntimeError("device busy")

            session.push_sync("loop device /dev/loop99", release, res)

    with pytest.raises(LabError, match="not fully released.*device busy"):
        _run(main)
    lab = Lab("bad", home=tmp_path)
    assert [r.fields["device"] for r in lab.resources()] == ["/dev/loop99"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_cancels_the_work_releases_and_raises_lab_interrupted(tmp_path, signum):
    released = []

    async def main():
        async with open_lab("sig", home=tmp_path, status=lambda m: None) as session:
            session.push_sync("resource", lambda: released.append("resource"))
            os.kill(os.getpid(), signum)
            await trio.sleep(30)  # cancelled by the signal
            released.append("not reached")

    with pytest.raises(LabInterrupted) as info:
        _run(main)
    assert released == ["resource"]
    assert info.value.exit_code == 128 + signum


def test_command_in_its_own_group_is_terminated_with_its_children(tmp_path):
    """A COMMAND that left a background child: both are gone after the release."""
    marker = tmp_path / "grandchild.pid"

    async def main():
        async with open_lab("cmd", home=tmp_path, status=lambda m: None,
                            handle_signals=False) as session:
            rc = await session.run_command(
                ["sh", "-c", f"sleep 60 & echo $! > {marker}; exit 5"], {})
            assert rc == 5
            grandchild = int(marker.read_text())
            assert process_start_time(grandchild) is not None  # still running here
            return grandchild

    grandchild = _run(main)
    for _ in range(100):
        if process_start_time(grandchild) is None or \
                open(f"/proc/{grandchild}/stat").read().split(") ")[1][0] == "Z":
            break
        trio.run(trio.sleep, 0.05)
    state = None if process_start_time(grandchild) is None else \
        open(f"/proc/{grandchild}/stat").read().split(") ")[1][0]
    assert state in (None, "Z")


def test_a_loop_of_a_detached_fuse_mount_is_still_recognised():
    fields = {"device": "/dev/loop3", "backing_file": "/run/labs/x/mnt/disks/d0",
              "mountpoint": "/run/labs/x/mnt"}
    assert recorded_backing_names(fields) == {"/run/labs/x/mnt/disks/d0", "/disks/d0"}
    assert recorded_backing_names({"backing_file": "/a/b"}) == {"/a/b"}


def test_release_now_releases_one_entry_early_and_only_once(tmp_path):
    """A replaced member's connection goes when the replacement is in place, not at the end."""
    order = []

    async def main():
        async with open_lab("early", home=tmp_path, status=lambda m: None,
                            handle_signals=False) as session:
            entries = {}
            for name in ("first", "old connection", "last"):
                res = session.lab.record("process", pid=0, name=name)
                entries[name] = session.push_sync(name, lambda name=name: order.append(name), res)
            await session.release_now(entries["old connection"])
            await session.release_now(entries["old connection"])  # gone already: nothing
            assert order == ["old connection"]
            assert [r.fields["name"] for r in session.lab.resources()] == ["first", "last"]

    _run(main)
    assert order == ["old connection", "last", "first"]


def test_a_server_child_is_waited_for_and_its_status_kept(tmp_path):
    async def main():
        async with open_lab("srv", home=tmp_path, status=lambda m: None,
                            handle_signals=False) as session:
            proc = await session.start_server(["sh", "-c", "exit 3"], label="short server")
            assert await proc.wait() == 3 and proc.returncode == 3 and proc.poll() == 3
            assert proc.cleanup is not None
            long_lived = await session.start_server(["sleep", "60"], label="long server")
            assert long_lived.poll() is None
            return long_lived

    long_lived = _run(main)
    assert long_lived.returncode is not None  # terminated by the release
