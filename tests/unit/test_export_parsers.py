"""Parsers of the export path: fio JSON, losetup JSON, mountinfo, /proc/<pid>/stat, sizes.

The samples are real outputs captured on the development machine (fio 3.33, util-linux
2.38.1, Linux 6.x); the two fio reports are in tests/unit/data/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raidlab.errors import UsageError
from raidlab.units import parse_size
from raidlab.lab.fuse_control import fuse_connection_id, is_fuse_fstype
from raidlab.lab.proc import (parse_environ, parse_proc_stat_start_time, process_start_time,
                              same_process)
from raidlab.tools import fio, losetup
from raidlab.tools.mount import mounts_of_source, mounts_under, parse_mountinfo

DATA = Path(__file__).parent / "data"


# --- fio -----------------------------------------------------------------------------

def test_fio_report_of_a_verified_randwrite():
    text = (DATA / "fio_randwrite_verify_ok.json").read_text()
    [job] = fio.parse_report(fio.extract_json(text))
    assert job.name == "v"
    assert job.error == 0
    # 2 MiB of 4 KiB random writes, then every block read back for verification
    assert job.write.ios == 512 and job.write.bytes == 2 << 20
    assert job.read.ios == 512
    assert job.write.iops > 0 and job.write.bw_bytes > 0
    assert job.write.lat_mean_ns > 0


def test_fio_report_of_a_verify_mismatch_has_a_note_before_the_json():
    text = (DATA / "fio_verify_mismatch.json").read_text()
    assert text.startswith("fio: pid=")  # fio's note precedes the JSON document
    [job] = fio.parse_report(fio.extract_json(text))
    assert job.error == 84  # EILSEQ: the verify found a block that does not match
    assert 0 < job.read.ios < 512  # verify_fatal stopped it early


def test_fio_extract_json_refuses_output_without_json():
    with pytest.raises(ValueError):
        fio.extract_json("fio: engine libaio not loadable\n")


def test_fio_job_args_carry_verify_and_time_options():
    job = fio.FioJob(name="j", filename="/dev/loop9", rw="randwrite", bs="4k", size="4m",
                     iodepth=8, verify="crc32c", runtime=2, seed=7,
                     extra={"numjobs": "2"})
    args = job.args()
    assert "--filename=/dev/loop9" in args and "--direct=1" in args
    assert "--verify=crc32c" in args and "--verify_fatal=1" in args
    assert "--runtime=2" in args and "--time_based=1" in args
    assert "--randseed=7" in args and "--numjobs=2" in args
    assert fio.FioJob(name="b", filename="f", direct=False).args().count("--direct=0") == 1


# --- losetup -------------------------------------------------------------------------

LOSETUP_JSON = """{
   "loopdevices": [
      {
         "name": "/dev/loop0",
         "back-file": "/tmp/sp ace/img one",
         "dio": true,
         "ro": false,
         "autoclear": false,
         "sizelimit": 0,
         "offset": 0,
         "log-sec": 512
      },
      {
         "name": "/dev/loop3",
         "back-file": "/run/labs/x/mnt/disks/d1 (deleted)",
         "dio": false,
         "ro": true,
         "autoclear": true,
         "sizelimit": 1048576,
         "offset": 4096,
         "log-sec": 4096
      }
   ]
}"""


def test_losetup_list_json():
    devs = losetup.parse_list_json(LOSETUP_JSON)
    assert [d.device for d in devs] == ["/dev/loop0", "/dev/loop3"]
    first, second = devs
    assert first.backing_file == "/tmp/sp ace/img one" and first.direct_io
    assert not first.read_only and not first.autoclear and first.sector_size == 512
    assert second.read_only and second.autoclear and not second.direct_io
    assert (second.size_limit, second.offset, second.sector_size) == (1048576, 4096, 4096)


def test_losetup_empty_output_means_no_devices():
    assert losetup.parse_list_json("") == []
    assert losetup.parse_list_json("\n") == []


def test_losetup_devices_backed_under_a_directory_ignore_deleted_suffix_and_siblings():
    devs = losetup.parse_list_json(LOSETUP_JSON)
    assert [d.device for d in losetup.devices_backed_under("/run/labs/x/mnt", devs)] == \
        ["/dev/loop3"]
    assert losetup.devices_backed_under("/run/labs/x/mn", devs) == []  # not a prefix match
    assert losetup.strip_deleted("/a/b (deleted)") == "/a/b"


def test_losetup_old_style_string_flags():
    text = json.dumps({"loopdevices": [{"name": "/dev/loop1", "back-file": "/f",
                                        "dio": "1", "ro": "0", "autoclear": "0"}]})
    [dev] = losetup.parse_list_json(text)
    assert dev.direct_io and not dev.read_only


# --- mountinfo -----------------------------------------------------------------------

MOUNTINFO = (
    "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "42 22 7:0 / /tmp/sp\\040ace/mnt\\040pt rw,relatime - ext4 /dev/loop0 rw\n"
    "57 22 0:39 / /run/labs/x/mnt rw,nosuid,nodev,relatime shared:40 - fuse.raidlab "
    "raidlab:x rw,user_id=0,group_id=0,default_permissions\n"
    "58 57 7:1 / /run/labs/x/mnt2/deep rw - ext4 /dev/loop1 rw\n"
    "59 22 7:1 / /mnt/other rw - ext4 /dev/loop1 rw\n"
    "60 22 0:45 / /sys/fs/fuse/connections rw - fusectl fusectl rw\n"
)


def test_mountinfo_fields_and_escapes():
    entries = parse_mountinfo(MOUNTINFO)
    assert len(entries) == 6
    spaced = entries[1]
    assert spaced.mount_point == "/tmp/sp ace/mnt pt"
    assert (spaced.major, spaced.minor, spaced.fstype, spaced.source) == (7, 0, "ext4",
                                                                         "/dev/loop0")
    fuse = entries[2]
    assert fuse.fstype == "fuse.raidlab" and fuse.source == "raidlab:x" and fuse.minor == 39


def test_mounts_under_a_lab_deepest_first_and_by_source():
    entries = parse_mountinfo(MOUNTINFO)
    under = [e.mount_point for e in mounts_under("/run/labs/x", entries)]
    assert under == ["/run/labs/x/mnt2/deep", "/run/labs/x/mnt"]
    assert [e.mount_point for e in mounts_of_source("/dev/loop1", entries)] == \
        ["/mnt/other", "/run/labs/x/mnt2/deep"]


def test_fuse_connection_id_is_read_from_mountinfo():
    assert fuse_connection_id("/run/labs/x/mnt", MOUNTINFO) == 39
    assert fuse_connection_id("/tmp/sp ace/mnt pt", MOUNTINFO) is None  # not FUSE
    assert fuse_connection_id("/sys/fs/fuse/connections", MOUNTINFO) is None  # fusectl


def test_fusectl_is_not_a_fuse_mount():
    assert is_fuse_fstype("fuse.raidlab") and is_fuse_fstype("fuse")
    assert not is_fuse_fstype("fusectl")


# --- /proc -----------------------------------------------------------------------------

def test_proc_stat_start_time_with_a_hostile_command_name():
    fields_after = " ".join(["S"] + [str(i) for i in range(4, 30)])
    # field 22 is the 20th after the command name: value 22 in this synthetic line
    text = f"1234 (evil) (name 1) {fields_after}\n"
    assert parse_proc_stat_start_time(text) == 22


def test_proc_stat_start_time_of_this_process():
    import os

    start = process_start_time(os.getpid())
    assert isinstance(start, int) and start > 0
    assert same_process(os.getpid(), start)
    assert not same_process(os.getpid(), start + 1)


def test_parse_environ():
    assert parse_environ(b"A=1\0RAIDLAB_LAB_RUN=abc\0EMPTY=\0junk\0") == {
        "A": "1", "RAIDLAB_LAB_RUN": "abc", "EMPTY": ""}


# --- sizes ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("64M", 64 << 20), ("1G", 1 << 30), ("1GiB", 1 << 30), ("512", 512),
    ("1.5G", 3 << 29), ("4k", 4096),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "100", "0", "-5M", "1.0001K"])
def test_parse_size_refuses(text):
    with pytest.raises(UsageError):
        parse_size(text)
