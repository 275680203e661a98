"""The mkfs command line of a benchmark's file system (raidlab.tools.mkfs.mkfs_argv): ext4
without lazy initialisation, ext2 as it is, and a case's own -E values merged into one -E.

A scenario's mkfs and mount options pass allow-lists (check_mkfs_options,
raidlab.scenarios.check_mount_options): an option that names a path, a device, a program or
an owner is refused at load time in one line naming file, key and option."""

from __future__ import annotations

import subprocess

import pytest

from raidlab import scenarios
from raidlab.errors import UsageError
from raidlab.scenarios import ScenarioError, check_mount_options
from raidlab.tools.mkfs import check_mkfs_options, mkfs_argv


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


# -- the allow-list of a scenario's mkfs and mount options --------------------------------

ACCEPTED = [
    ["-b", "1024", "-I", "128"],                    # the VC-RAID scenarios' ext2
    ["-b4096"],                                     # getopt's attached form
    ["-i", "4096", "-N", "5000", "-m", "0.5"],
    ["-O", "^has_journal,metadata_csum,sparse_super2"],
    ["-E", "stride=16,stripe-width=32,stripe_width=32,packed_meta_blocks=1,num_backup_sb=1,resize=100000"],
    ["-Elazy_itable_init=1,lazy_journal_init=0,discard", "-E", "nodiscard"],
]


@pytest.mark.parametrize("fstype", ["ext4", "ext2"])
@pytest.mark.parametrize("extra", ACCEPTED)
def test_options_that_shape_the_file_system_are_accepted(fstype, extra):
    check_mkfs_options(fstype, extra)
    assert mkfs_argv(fstype, "/dev/loop0", extra)[-1] == "/dev/loop0"


def test_ext4_takes_a_journal_size_and_ext2_no_journal():
    check_mkfs_options("ext4", ["-J", "size=64"])
    with pytest.raises(UsageError, match="'-J'"):
        check_mkfs_options("ext2", ["-J", "size=64"])


REFUSED = [
    (["-d", "/root/secret"], "'-d'"),              # copies a directory into the image
    (["-z", "/tmp/new-undo-file"], "'-z'"),         # writes an undo file at a new path
    (["-l", "/etc/badblocks"], "'-l'"),             # reads a bad-blocks list
    (["-c"], "'-c'"),                               # runs badblocks
    (["-J", "device=/dev/sda"], "-J 'device=/dev/sda'"),
    (["-J", "size=64,location=0"], "-J 'size=64,location=0'"),
    (["-O", "journal_dev"], "-O 'journal_dev'"),
    (["-O", "has_journal,"], "-O ''"),
    (["-E", "root_owner=1000:1000"], "-E 'root_owner=1000:1000'"),
    (["-E", "offset=4096"], "-E 'offset=4096'"),
    (["-Eandroid_sparse"], "-E 'android_sparse'"),
    (["-E", "stride"], "-E 'stride'"),              # a value it needs
    (["-E", "discard=1"], "-E 'discard=1'"),        # a value it does not take
    (["-b", "1000"], "-b '1000'"),
    (["-b", "1k"], "-b '1k'"),
    (["-b", "-d"], "-b '-d'"),
    (["-I", "100"], "-I '100'"),
    (["-m", "51"], "-m '51'"),
    (["-m", "1e1"], "-m '1e1'"),
    (["-N", "0"], "-N '0'"),
    (["-t", "ext3"], "'-t'"),
    (["-L", "label"], "'-L'"),
    (["-F"], "'-F'"),
    (["--", "-d"], "'--'"),
    (["100"], "'100'"),                             # mke2fs would read a positional as device or size
    ([""], "''"),
]


@pytest.mark.parametrize("extra, named", REFUSED, ids=[" ".join(e) or "empty" for e, _ in REFUSED])
def test_anything_else_is_refused_in_one_line_naming_it(extra, named):
    with pytest.raises(UsageError) as info:
        mkfs_argv("ext4", "/dev/loop0", extra)
    message = str(info.value)
    assert named in message and "is not allowed" in message and "allowed: " in message, message
    assert "\n" not in message


def test_the_refusal_lists_what_is_allowed():
    with pytest.raises(UsageError) as info:
        check_mkfs_options("ext4", ["-d", "/root"])
    for option in ("-b 1024|", "-I 128|", "-i 1024..", "-N 1..", "-m 0..50", "-O FEATURE", "-J size=", "-E stride="):
        assert option in info.value.hint
    with pytest.raises(UsageError) as info:
        check_mkfs_options("ext4", ["-O", "journal_dev"])
    assert "metadata_csum" in info.value.hint and "journal_dev" not in info.value.hint


def test_a_file_system_without_an_allow_list_takes_no_options():
    check_mkfs_options("xfs", [])
    with pytest.raises(UsageError, match="takes no options"):
        check_mkfs_options("xfs", ["-b", "1024"])


@pytest.mark.parametrize("fstype, options", [
    ("ext4", ["sync"]), ("ext4", ["noatime,data=journal", "commit=5", "barrier", "barrier=0"]),
    ("ext2", ["noatime", "errors=remount-ro", "nodev,nosuid,noexec"]),
])
def test_mount_options_that_tune_the_file_system_are_accepted(fstype, options):
    check_mount_options(fstype, options)


@pytest.mark.parametrize("fstype, options, named", [
    ("ext4", ["loop"], "'loop'"),
    ("ext4", ["noatime,loop"], "'loop'"),           # the runner joins with commas: each part counts
    ("ext4", ["offset=4096"], "'offset=4096'"),
    ("ext4", ["journal_path=/dev/sda"], "'journal_path=/dev/sda'"),
    ("ext4", ["usrjquota=/root/q"], "'usrjquota=/root/q'"),
    ("ext4", ["uid=1000"], "'uid=1000'"),
    ("ext4", ["resuid=1000"], "'resuid=1000'"),
    ("ext4", ["user"], "'user'"),
    ("ext4", ["x-mount.mkdir=/etc/x"], "'x-mount.mkdir=/etc/x'"),
    ("ext4", ["errors=panic"], "'errors=panic'"),
    ("ext4", ["commit=soon"], "'commit=soon'"),
    ("ext4", ["data"], "'data'"),
    ("ext4", ["sync="], "'sync='"),
    ("ext2", ["data=journal"], "'data=journal'"),   # ext2 has no journal
])
def test_mount_options_naming_paths_devices_owners_are_refused(fstype, options, named):
    with pytest.raises(UsageError) as info:
        check_mount_options(fstype, options)
    assert named in str(info.value) and "allowed: " in str(info.value) and "\n" not in str(info.value)


SCENARIO = """
[scenario]
id = "unit-mkfs"
title = "mkfs options"

[[arch]]
label = "r0"
arch = "raid0"
disks = 2
disk_size = "16M"

[workload]
name = "postmark"
filesystem = "ext4"
{workload}

[[case]]
name = "small"
{case}
"""


@pytest.mark.parametrize("workload, case, key, named", [
    ('mkfs_options = ["-d", "/root"]', "", "workload.mkfs_options", "'-d'"),
    ("", 'mkfs_options = ["-b", "1024", "-z", "/tmp/undo"]', "case[0].mkfs_options", "'-z'"),
    ("", 'mount_options = ["loop"]', "case[0].mount_options", "'loop'"),
    # a case inherits the workload's options, checked for its own file system
    ('mkfs_options = ["-J", "size=8"]', 'filesystem = "ext2"', "workload.mkfs_options (inherited by case[0])",
     "'-J'"),
    # a raw-device case runs no mkfs, and still carries no option the allow-list refuses
    ("", 'filesystem = "none"\nmkfs_options = ["-d", "/root"]', "case[0].mkfs_options", "'-d'"),
])
def test_a_scenario_is_refused_at_load_naming_file_key_and_option(tmp_path, workload, case, key, named):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.format(workload=workload, case=case))
    for check_references in (True, False):  # also a results directory's copy, read by the report
        with pytest.raises(ScenarioError) as info:
            scenarios.load(path, check_references=check_references)
        message = str(info.value)
        assert message.startswith(f"{path}: {key}: ") and named in message and "\n" not in message, message


def test_a_scenario_within_the_allow_lists_loads(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.format(workload='mkfs_options = ["-b", "1024", "-E", "stride=16"]',
                                    case='filesystem = "ext2"\nmkfs_options = ["-b", "1024", "-I", "128"]\n'
                                         'mount_options = ["noatime"]'))
    case = scenarios.load(path, check_references=False).case("small")
    assert case.mkfs_options == ("-b", "1024", "-I", "128") and case.mount_options == ("noatime",)


def test_cli_refuses_the_scenario_with_exit_2_before_anything_is_made(tmp_path, raidlab_cmd):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.format(workload="", case='mkfs_options = ["-d", "/root"]'))
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.run(raidlab_cmd + ["run", str(path), "--home", str(home), "--results", str(results)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "case[0].mkfs_options" in lines[0] and "'-d'" in lines[0], proc.stderr
    assert not home.exists() and not results.exists()
