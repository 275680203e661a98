"""The mkfs command line of a benchmark's file system (raidlab.tools.mkfs.mkfs_argv): ext4
without lazy initialisation, ext2 as it is, and a case's own -E values merged into one -E."""

from __future__ import annotations

import pytest

from raidlab.errors import UsageError
from raidlab.tools.mkfs import mkfs_argv


def test_ext4_is_made_without_lazy_inode_table_or_journal_initialisation():
    assert mkfs_argv("ext4", "/dev/loop0", ["-b", "1024"]) == [
        "mkfs.ext4", "-F", "-q", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", "-b", "1024", "/dev/loop0"]


def test_ext2_has_no_lazy_initialisation_to_turn_off():
    assert mkfs_argv("ext2", "/dev/vda") == ["mkfs.ext2", "-F", "-q", "-E", "nodiscard", "/dev/vda"]


@pytest.mark.parametrize("extra, options, rest", [
    (["-E", "stride=16,stripe_width=32", "-b", "1024"],
     "nodiscard,lazy_itable_init=0,lazy_journal_init=0,stride=16,stripe_width=32", ["-b", "1024"]),
    (["-Estride=16", "-E", "stripe_width=32"],
     "nodiscard,lazy_itable_init=0,lazy_journal_init=0,stride=16,stripe_width=32", []),
    # the case's own value of one of ours wins, once
    (["-E", "lazy_itable_init=1,discard"], "lazy_journal_init=0,lazy_itable_init=1,discard", []),
])
def test_a_case_s_extended_options_are_merged_into_one_e(extra, options, rest):
    argv = mkfs_argv("ext4", "/dev/loop0", extra)
    assert argv.count("-E") == 1 and not any(a.startswith("-E") and a != "-E" for a in argv)
    assert argv == ["mkfs.ext4", "-F", "-q", "-E", options, *rest, "/dev/loop0"]


def test_an_e_without_a_value_is_one_line():
    with pytest.raises(UsageError) as info:
        mkfs_argv("ext4", "/dev/loop0", ["-b", "1024", "-E"])
    assert "-E" in str(info.value) and "\n" not in str(info.value)
