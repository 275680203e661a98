"""`raidlab doctor`: its answers match the host, and its exit code follows the runners."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from raidlab import doctor
from raidlab.cli import main


def test_doctor_json_matches_host(raidlab_cmd):
    proc = subprocess.run([*raidlab_cmd, "doctor", "--json"], capture_output=True, text=True)
    report = json.loads(proc.stdout)
    assert report["root"] == (os.geteuid() == 0)
    caps = report["capabilities"]
    assert caps["loop"]["ok"] == os.path.exists("/dev/loop-control")
    assert caps["md"]["ok"] == os.path.exists("/proc/mdstat")
    assert caps["fuse"]["ok"] == os.path.exists("/dev/fuse")
    for name, tool in report["tools"].items():
        if tool["found"]:
            assert tool["path"] and tool["version"], name
            assert tool["install_hint"] is None
        else:
            assert tool["install_hint"] == f"apt-get install {tool['package']}"
    assert set(report["runners"]) == {"native-engine", "native-md", "vm", "cluster"}
    # the cluster's kernel parts were probed, and the probe left no interface behind
    assert caps["cluster"]["ok"] == (os.geteuid() == 0 and report["tools"]["ip"]["found"]
                                     and report["tools"]["tc"]["found"]), caps["cluster"]
    assert not any(name.startswith("rlxp") for name in os.listdir("/sys/class/net"))
    assert proc.returncode == (0 if report["ok"] else 1)
    assert report["ok"] == any(r["usable"] for r in report["runners"].values())


def test_cluster_runner_follows_its_probe_and_tools(monkeypatch):
    monkeypatch.setattr(doctor, "check_cluster", lambda: doctor.Capability("cluster", False, "no veth here"))
    runner = {r.name: r for r in doctor.collect().runners}["cluster"]
    assert not runner.usable and runner.reason == "no veth here"
    monkeypatch.setattr(doctor, "check_cluster", lambda: doctor.Capability("cluster", True, "probed"))
    real_which = doctor.which
    monkeypatch.setattr(doctor, "which", lambda name: None if name == "nbdfuse" else real_which(name))
    runner = {r.name: r for r in doctor.collect().runners}["cluster"]
    assert not runner.usable and runner.reason == "missing: nbdfuse"


def test_missing_tool_gives_install_hint(monkeypatch):
    real_which = doctor.which
    monkeypatch.setattr(doctor, "which", lambda name: None if name == "postmark" else real_which(name))
    report = doctor.collect()
    status = {t.name: t for t in report.tools}["postmark"]
    assert not status.found
    assert status.hint == "apt-get install postmark"


def test_no_runner_exits_one(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "which", lambda name: None)
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 1000)
    report = doctor.collect()
    assert not report.any_runner
    assert main(["doctor"]) == 1
    assert "no runner can work" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["doctor", "--bogus"], ["no-such-command"]])
def test_bad_cli_usage_exits_two_without_traceback(raidlab_cmd, argv):
    proc = subprocess.run([*raidlab_cmd, *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_doctor_shows_the_lab_home_in_use(monkeypatch, tmp_path):
    """The home raidlab would use, where it comes from, and whether labs may live there; the
    JSON names it too. Nothing is created."""
    home = tmp_path / "labs-home"
    monkeypatch.setenv("RAIDLAB_HOME", str(home))
    cap = doctor.check_home()
    assert cap.ok and cap.detail == f"{home} (from $RAIDLAB_HOME, made by the first `raidlab create`)"
    assert not home.exists()
    home.mkdir(mode=0o700)
    assert doctor.check_home().detail == f"{home} (from $RAIDLAB_HOME)"
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by others, not sticky: another user could swap the home
    monkeypatch.setenv("RAIDLAB_HOME", str(shared / "home"))
    refused = doctor.check_home()
    assert not refused.ok and "writable by others" in refused.detail
    monkeypatch.delenv("RAIDLAB_HOME")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert doctor.check_home().detail.startswith(f"{Path.home() / '.local' / 'state' / 'raidlab'} (the default")
    assert doctor.collect().as_json()["home"] == str(Path.home() / ".local" / "state" / "raidlab")
