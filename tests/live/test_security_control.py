"""A second user on the machine (`nobody`, through runuser) against an array root made: it
cannot command the daemon, pose as it, read the member images or plant files in a home, and
cannot tie the daemon up; root's array is as it was after each attempt.

docs/security.md lists what each test guards.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from second_uid import as_nobody, available, python_as_nobody, shared_dir

pytestmark = [pytest.mark.root, pytest.mark.live,
              pytest.mark.skipif(available() is not None, reason=str(available()))]

NAME = "sec5"


def _raidlab(raidlab_cmd, env, *args, timeout=300, cwd="/"):
    return subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)


@pytest.fixture
def array(raidlab_cmd):
    """A raid5 of root's in a home under a directory every user may enter; yields
    (env, lab directory)."""
    base = shared_dir()
    home = base / "home"
    env = {**os.environ, "RAIDLAB_HOME": str(home), "COLUMNS": "200"}
    made = _raidlab(raidlab_cmd, env, "create", NAME, "--arch", "raid5", "--disks", "3", "--disk-size", "64M",
                    "--disk-model", "none")
    assert made.returncode == 0, made.stderr
    try:
        yield env, home / "labs" / NAME
    finally:
        _raidlab(raidlab_cmd, env, "destroy", NAME)
        shutil.rmtree(base, ignore_errors=True)


def _state(raidlab_cmd, env) -> str:
    proc = _raidlab(raidlab_cmd, env, "status", NAME, "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["statistics"]["state"]


def _send_as_nobody(address: str, request: dict, *, abstract: bool = False) -> str:
    """What nobody gets sending `request` to a Unix socket: the error's name, or the answer."""
    code = f"""
import json, socket
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
try:
    s.connect({address!r})
    s.sendall((json.dumps({request!r}) + "\\n").encode())
    print("answer:" + s.recv(65536).decode())
except OSError as exc:
    print(type(exc).__name__)
"""
    proc = python_as_nobody(code)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _old_abstract_name(lab: Path) -> str:
    """Where daemons listened before they had a socket file: an abstract name anyone could
    compute from the lab's path."""
    return "\0raidlab-" + hashlib.sha256(str(lab.resolve()).encode()).hexdigest()[:24]


def test_another_user_cannot_reach_the_control_socket(raidlab_cmd, array):
    env, lab = array
    victim = Path("/root") / f"written-by-nobody-{os.getpid()}"
    for request in ({"op": "fail", "disk": 1}, {"op": "capture", "action": "start", "path": str(victim)},
                    {"op": "put", "local": "/etc/shadow", "remote": "/tmp/s"}):
        assert _send_as_nobody(str(lab / "control.sock"), request) == "PermissionError"
        assert _send_as_nobody(_old_abstract_name(lab), request) == "ConnectionRefusedError"
    assert not victim.exists()
    assert _state(raidlab_cmd, env) == "optimal"


def test_a_peer_of_another_uid_is_hung_up_on_before_it_is_read(raidlab_cmd, array):
    """With the directories opened up by hand, the daemon's own check still refuses."""
    env, lab = array
    for directory in (lab.parent.parent, lab.parent, lab):
        os.chmod(directory, 0o711)
    os.chmod(lab / "control.sock", 0o666)
    answer = _send_as_nobody(str(lab / "control.sock"), {"op": "fail", "disk": 1})
    # connected, then closed without a byte of answer (unread data makes the close a reset)
    assert answer in ("answer:", "ConnectionResetError", "BrokenPipeError"), answer
    assert _state(raidlab_cmd, env) == "optimal"
    assert "refused a connection from uid 65534" in (lab / "daemon.log").read_text()


def test_the_fuse_files_and_the_loop_device_stay_root_s(raidlab_cmd, array):
    """What was already closed stays so: the FUSE mount has no allow_other (another uid is
    refused even with every directory above it opened), the loop device is root's."""
    env, lab = array
    for directory in (lab.parent.parent, lab.parent, lab):
        os.chmod(directory, 0o711)
    device = json.loads((lab / "runtime.json").read_text())["device"]
    for path in (lab / "mnt" / "volume", lab / "mnt" / "disks" / "d0", device):
        opened = python_as_nobody(f"""
try:
    open({str(path)!r}, "rb").read(512); print("read")
except OSError as exc:
    print(type(exc).__name__)
""")
        assert opened.stdout.strip() == "PermissionError", (path, opened)
    assert "allow_other" not in next(line for line in Path("/proc/mounts").read_text().splitlines()
                                     if str(lab / "mnt") in line)
    assert _state(raidlab_cmd, env) == "optimal"


def test_the_client_talks_only_to_the_lab_s_recorded_daemon(raidlab_cmd, array, tmp_path):
    env, lab = array
    stopped = _raidlab(raidlab_cmd, env, "destroy", NAME, "--keep-images")
    assert stopped.returncode == 0, stopped.stderr
    # Another user cannot put a socket where the daemon listens...
    bind = python_as_nobody(f"""
import socket
try:
    socket.socket(socket.AF_UNIX).bind({str(lab / 'control.sock')!r}); print("bound")
except OSError as exc:
    print(type(exc).__name__)
""")
    assert bind.stdout.strip() == "PermissionError"
    # ...and a process that is not the lab's daemon is not believed even there: its answer
    # names a file of root's as the array's device.
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me" * 100)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(lab / "control.sock"))
    server.listen(4)
    server.settimeout(0.2)
    reply = (json.dumps({"ok": True, "result": {"device": str(victim), "spec": {}}}) + "\n").encode()
    proc = subprocess.Popen([*raidlab_cmd, "trace", "capture", NAME, "-o", str(tmp_path / "cap.trace"), "--",
                             "dd", "if=/dev/zero", "of={device}", "bs=4k", "count=1", "conv=notrunc"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while proc.poll() is None:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(OSError):  # the client may have hung up already
                conn.sendall(reply)
        out, err = proc.communicate()
    finally:
        server.close()
    assert proc.returncode == 2, (out, err)
    assert "is not the lab's daemon" in err
    assert victim.read_bytes() == b"keep me" * 100
    assert not (tmp_path / "cap.trace").exists() or (tmp_path / "cap.trace").stat().st_size == 0
    # A name nobody holds in the abstract namespace does not stop the array from starting.
    squatter = subprocess.Popen(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", f"""
import socket, time
s = socket.socket(socket.AF_UNIX); s.bind({_old_abstract_name(lab)!r}); s.listen(1)
print("bound", flush=True); time.sleep(120)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "bound"
        started = _raidlab(raidlab_cmd, env, "assemble", NAME)
        assert started.returncode == 0, started.stderr
        assert _state(raidlab_cmd, env) == "optimal"
    finally:
        squatter.kill()
        squatter.wait()


def test_member_images_and_lab_files_are_closed_to_other_users(raidlab_cmd, array, tmp_path):
    env, lab = array
    device = json.loads((lab / "runtime.json").read_text())["device"]
    secret = f"secret-{os.urandom(8).hex()}"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True, capture_output=True)
    subprocess.run(["mount", device, str(mnt)], check=True)
    try:
        path = mnt / "private"
        path.write_text(secret * 50)
        os.chmod(path, 0o600)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    hits = subprocess.run(["grep", "-r", "-a", "-l", secret, str(lab / "images")], capture_output=True, text=True)
    assert hits.stdout.strip(), "the secret should be in root's member images"
    theirs = as_nobody(["grep", "-r", "-a", "-l", secret, str(lab.parent.parent)])
    assert theirs.returncode == 2 and not theirs.stdout.strip(), theirs
    assert "Permission denied" in theirs.stderr
    for name in ("images/d1.img", "state.json", "array.json", "runtime.json", "daemon.log"):
        assert as_nobody(["cat", str(lab / name)]).returncode != 0
    assert as_nobody(["ls", str(lab)]).returncode != 0
    # Root's own view: the directories 0700, every file of the lab (the FUSE mount aside) 0600.
    for directory in (lab.parent.parent, lab.parent, lab):
        assert (directory.stat().st_mode & 0o777) == 0o700, directory
    for path in [lab / n for n in ("images/d0.img", "images/d1.img", "images/d2.img", "state.json", "array.json",
                                   "runtime.json", "control.sock", "lock", "daemon.log")]:
        assert (path.lstat().st_mode & 0o077) == 0, (path, oct(path.lstat().st_mode))


def test_a_home_or_lab_that_another_user_prepared_is_refused(raidlab_cmd, tmp_path):
    base = shared_dir()
    try:
        os.chmod(base, 0o1777)
        victim = tmp_path / "victim"
        victim.write_text("root's file\n")
        victim_img = tmp_path / "victim.img"
        victim_img.write_bytes(b"root's image" * 1000)
        os.chmod(tmp_path, 0o755)
        planted = as_nobody(["sh", "-c", f"""set -e
mkdir -p {base}/run/labs/evil/images
ln -s {victim} {base}/run/labs/evil/array.json.tmp
ln -s {victim_img} {base}/run/labs/evil/images/d0.img
mkdir -p {base}/theirs"""])
        assert planted.returncode == 0, planted.stderr
        before = (victim.read_bytes(), victim_img.read_bytes())
        cases = [
            # a home another user made
            ({"RAIDLAB_HOME": str(base / "run")}, str(base)),
            # a home of root's under a directory another user owns (it could be swapped)
            ({"RAIDLAB_HOME": str(base / "theirs" / "home")}, str(base)),
        ]
        for extra, cwd in cases:
            env = {**os.environ, **extra, "COLUMNS": "200"}
            proc = _raidlab(raidlab_cmd, env, "create", "evil", "--arch", "raid0", "--disks", "2", "--disk-size", "16M",
                            "--disk-model", "none", cwd=cwd)
            assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
            assert "not to you" in proc.stderr or "belongs to nobody (uid 65534)" in proc.stderr, proc.stderr
        assert (victim.read_bytes(), victim_img.read_bytes()) == before
        assert not (base / "theirs" / "home").exists()
        # Without RAIDLAB_HOME the home is the user's own, wherever the command is typed: a
        # ./run that another user prepared in the working directory is never looked at.
        env = {k: v for k, v in os.environ.items() if k not in ("RAIDLAB_HOME", "XDG_STATE_HOME")}
        env.update(HOME=str(tmp_path / "roothome"), COLUMNS="200")
        proc = _raidlab(raidlab_cmd, env, "create", "evil", "--arch", "raid0", "--disks", "2", "--disk-size", "16M",
                        "--disk-model", "none", cwd=str(base))
        try:
            assert proc.returncode == 0, proc.stderr
            assert (tmp_path / "roothome" / ".local" / "state" / "raidlab" / "labs" / "evil" / "array.json").is_file()
        finally:
            _raidlab(raidlab_cmd, env, "destroy", "evil", cwd=str(base))
        assert (victim.read_bytes(), victim_img.read_bytes()) == before
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_the_socket_cannot_be_exhausted_or_stalled(raidlab_cmd, array):
    from raidlab.service.daemonbase import MAX_CONNECTIONS, MAX_REQUEST_BYTES, REQUEST_TIMEOUT

    env, lab = array
    pid = json.loads((lab / "runtime.json").read_text())["pid"]
    baseline = _fds(pid)
    # Another user: 2,000 connection attempts, every one refused by the file system.
    flood = python_as_nobody(f"""
import socket
held, refused = [], 0
for _ in range(2000):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect({str(lab / 'control.sock')!r}); held.append(s)
    except PermissionError:
        refused += 1; s.close()
print(refused, len(held))
""")
    assert flood.stdout.split() == ["2000", "0"], flood
    # The owner's own processes are bounded too: an endless line is cut off...
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(lab / "control.sock"))
        s.settimeout(30)
        try:
            s.sendall(b"x" * (MAX_REQUEST_BYTES + (1 << 20)))
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = s.recv(65536)
    assert b"at most" in answer, answer
    # ...more connections than the daemon serves at once are told it is busy, and silent ones
    # are closed after REQUEST_TIMEOUT, after which the daemon answers as before.
    idle = []
    for _ in range(MAX_CONNECTIONS + 8):
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(lab / "control.sock"))
        idle.append(s)
    try:
        time.sleep(1)
        busy = 0
        for s in idle:
            s.settimeout(REQUEST_TIMEOUT + 20)
        for s in idle[MAX_CONNECTIONS:]:
            busy += b"busy" in s.recv(65536)
        assert busy == 8
        started = time.monotonic()
        assert all(s.recv(65536).startswith(b'{"ok": false') for s in idle[:MAX_CONNECTIONS])
        assert time.monotonic() - started < REQUEST_TIMEOUT + 10
    finally:
        for s in idle:
            s.close()
    assert _state(raidlab_cmd, env) == "optimal"
    time.sleep(0.5)
    assert _fds(pid) <= baseline
