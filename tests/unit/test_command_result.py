"""raidlab.tools.base.CommandResult: the one result of a command, on the host or in the lab VM."""

from __future__ import annotations

import pytest

from raidlab.errors import ToolFailedError, VMError
from raidlab.tools.base import CommandResult


def test_record_and_text():
    result = CommandResult(["mkfs.ext4", "-q", "/dev/x"], 0, b"ok\n", b"\xff\n", 1.23456789)
    assert result.as_record() == {"argv": ["mkfs.ext4", "-q", "/dev/x"], "rc": 0, "seconds": 1.234568}
    assert result.stdout_text == "ok\n" and result.stderr_text == "\ufffd\n"
    assert result.check() is result


def test_check_raises_tool_failed_with_the_last_line():
    result = CommandResult(["sh", "-c", "exit 3"], 3, b"", b"first\nlast\n", 0.1)
    with pytest.raises(ToolFailedError) as info:
        result.check()
    assert str(info.value) == "command failed (exit 3): sh -c exit 3: last"
    assert info.value.fields["returncode"] == 3


def test_where_the_command_ran_decides_its_error():
    def failure(result: CommandResult) -> VMError:
        return VMError(f"guest exit {result.rc}")

    result = CommandResult(["sh", "-c", "false"], 1, b"", b"", 0.0, failure=failure)
    with pytest.raises(VMError, match="guest exit 1"):
        result.check()
    assert result == CommandResult(["sh", "-c", "false"], 1, b"", b"", 0.0)  # failure is not data
