"""`raidlab status` (any request) on an array whose daemon is gone: one LabError saying it
is not running, and, when the daemon stopped on an error, which error (its log's last line)."""

from __future__ import annotations

import pytest

from raidlab.service.control import request
from raidlab.errors import LabError
from raidlab.lab import Lab


def test_a_request_to_a_stopped_daemon_names_its_error(tmp_path):
    lab = Lab("gone", home=tmp_path, create=True)
    (lab.path / "daemon.log").write_text(
        'raidlab-daemon: {"status": "released FUSE mount"}\n'
        'raidlab-daemon: {"error": "internal error: RuntimeError(\'log 0: boom\')"}\n')
    with pytest.raises(LabError) as info:
        request(lab, "status")
    assert "not running" in str(info.value)
    assert "boom" in info.value.hint and "raidlab assemble gone" in info.value.hint


def test_a_request_to_a_cleanly_stopped_daemon_only_says_how_to_start_it(tmp_path):
    lab = Lab("idle", home=tmp_path, create=True)
    (lab.path / "daemon.log").write_text('raidlab-daemon: {"status": "released FUSE mount"}\n')
    with pytest.raises(LabError) as info:
        request(lab, "status")
    assert info.value.hint == "start it with `raidlab assemble idle`"
