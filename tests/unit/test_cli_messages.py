"""Messages a newcomer meets: a bad size names the option it came from, a member too small says
how large it must be (never a negative size), a mistyped architecture gets "did you mean",
`create` lists only what it builds, an array that does not exist is called an array, and an
architecture's unknown option lists the valid ones."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from raidlab import archs
from raidlab.errors import UsageError


def _run(raidlab_cmd, tmp_path, *args):
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    return subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("args,words", [
    (("create", "x", "--arch", "raid5", "--disks", "3", "--disk-size", "12Q"), "--disk-size: cannot read size '12Q'"),
    (("create", "x", "--arch", "raid5", "--disks", "3", "--chunk", "1000"), "--chunk: size '1000' is not"),
    (("create", "x", "--arch", "raid5", "--disks", "3", "-o", "foo=1"), "its options: algorithm (default"),
    (("status", "nosuch"), "no array named 'nosuch'"),
    (("destroy", "nosuch"), "no array named 'nosuch'"),
    (("sim", "--arch", "raid5", "--disk-model", "hp-c2200a", "--trace", "t", "--format", "raidlab",
      "--chunk", "7X"), "--chunk: cannot read size"),
    (("create", "x", "--arch", "raid5", "--disks", "3", "--chunk", "64K", "--disk-size", "64K"),
     "raid5: members of 64 KiB are too small: each needs at least 1.1 MiB; use --disk-size 1088K or more"),
    (("create", "x", "--arch", "vcraid", "--disks", "4", "--chunk", "64K", "--disk-size", "64K"),
     "vcraid: members of 64 KiB are too small: each needs at least"),
    (("create", "x", "--arch", "tss", "--disks", "4", "--disk-size", "1M"),
     "tss: members of 1 MiB are too small: each needs at least"),
    (("create", "x", "--arch", "raid55", "--disks", "3"), "unknown architecture 'raid55'; did you mean raid5? ("),
    (("create", "x", "--arch", "RAIDX", "--disks", "3"), "did you mean raidx? ("),
    (("create", "x", "--arch", "disk", "--disks", "1"), "disk does not run on the native runner; it runs on: sim"),
])
def test_a_bad_input_is_one_line_naming_what_was_wrong(raidlab_cmd, tmp_path, args, words):
    proc = _run(raidlab_cmd, tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not re.search(r"(?<![\w-])-\d", lines[0]), lines[0]  # no negative size


def test_the_smallest_member_named_is_the_smallest_that_is_taken():
    """The size the message names is taken, and one chunk less is not (64 KiB steps where no
    chunk is given): the real minimum, for every family."""
    for arch, disks, chunk, options in (("raid5", 3, 64 << 10, {}), ("raid1", 2, 64 << 10, {}),
                                        ("raidx", 4, 64 << 10, {}), ("chained", 3, 512 << 10, {}),
                                        ("vcraid", 4, 64 << 10, {}), ("tss", 4, 512 << 10, {}),
                                        ("sa3", 4, 4 << 10, {})):
        config = archs.Config(arch, disks, 64 << 10, chunk, options)
        smallest = archs.get(arch).smallest_disk_size(config, "native")
        assert smallest and smallest % (chunk or 64 << 10) == 0, arch
        archs.validate(arch, disks, smallest, chunk, options)
        with pytest.raises(UsageError, match=r"too small: each needs at least") as refused:
            archs.validate(arch, disks, smallest - (chunk or 64 << 10), chunk, options)
        assert refused.value.fields["smallest"] == smallest, arch


def test_an_unknown_architecture_lists_what_create_builds(raidlab_cmd, tmp_path):
    """`create` lists the ids it builds, never `disk` (virtual time only), in its error and
    its --help."""
    proc = _run(raidlab_cmd, tmp_path, "create", "x", "--arch", "bogus", "--disks", "3")
    assert proc.returncode == 2 and "did you mean" not in proc.stderr
    listed = proc.stderr.strip().split("the native runner runs: ", 1)[1].split(", ")
    assert "raid5" in listed and "md-raid5" in listed and "disk" not in listed
    assert set(listed) == set(archs.names("native"))
    help_text = _run(raidlab_cmd, tmp_path, "create", "--help").stdout
    ids = re.findall(r"^  (\S+) +\S", help_text.split("Architectures (options of one", 1)[1], re.M)
    assert "vcraid" in ids and "disk" not in ids


def test_traces_say_their_format_and_a_replay_says_how_to_fit_and_how_far_it_is(raidlab_cmd, tmp_path):
    """`trace stats` and `sim` read the format from a raidlab trace's own header; a trace past
    the end of the volume gets the --device-size that fits; a logical DCD is one drive with
    two members; a long replay reports its progress (a line each 10,000 requests off a terminal)."""
    trace = tmp_path / "h.trace"
    assert _run(raidlab_cmd, tmp_path, "trace", "synth", "--profile", "oltp", "--duration", "7m",
                "-o", str(trace)).returncode == 0
    stats = _run(raidlab_cmd, tmp_path, "trace", "stats", str(trace))
    assert stats.returncode == 0 and "requests" in stats.stdout
    other = tmp_path / "x.trace"
    other.write_text("1 2 3\n")
    proc = _run(raidlab_cmd, tmp_path, "trace", "stats", str(other))
    assert proc.returncode == 2 and "give --format" in proc.stderr
    proc = _run(raidlab_cmd, tmp_path, "sim", "--arch", "dcd", "--disk-model", "hp-c2200a", "-o", "cache=logical",
                "--trace", str(trace))
    assert proc.returncode == 2 and "--device-size 314853376" in proc.stderr, proc.stderr
    fits = tmp_path / "fits.trace"
    assert _run(raidlab_cmd, tmp_path, "trace", "synth", "--profile", "oltp", "--duration", "7m", "--device-size",
                "314853376", "-o", str(fits)).returncode == 0
    proc = _run(raidlab_cmd, tmp_path, "sim", "--arch", "dcd", "--disk-model", "hp-c2200a", "-o", "cache=logical",
                "--trace", str(fits))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("dcd on 1 x hp-c2200a") and "2 members: cache, data" in proc.stdout
    assert "replayed 20,000 requests:" in proc.stderr and "virtual s in" in proc.stderr
