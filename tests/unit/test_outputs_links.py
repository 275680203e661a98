"""raidlab writes into an output directory only through raidlab.outputs.write_whole, and that
never writes through a link: a link planted at the final name is replaced by the rename, and
links planted at every partial name a writer could have guessed (the fixed `.tmp` names and
the pid-numbered partial names of before) are never opened. Directories are checked before
anything is written: a link, another user's directory, or one that others may change is
refused; files raidlab wrote are read back without following links."""

from __future__ import annotations

import os
import stat

import pytest

from raidlab.errors import UsageError
from raidlab.outputs import (PARTIAL, make_dirs, output_dir, owned_dir, read_regular, remove_partials,
                             write_whole)

VICTIM_TEXT = "a file that belongs to someone else\n"


@pytest.fixture
def victim(tmp_path):
    away = tmp_path / "elsewhere"
    away.mkdir()
    path = away / "victim"
    path.write_text(VICTIM_TEXT)
    return path


def _guessable_partials(directory, stem, suffix):
    """Every name a writer with a fixed or pid-numbered partial name could use for
    directory/stem+suffix, around this process's pid."""
    pid = os.getpid()
    names = [f"{stem}{suffix}.tmp", f"{stem}.partial"]
    names += [f".{stem}{PARTIAL}{p}{suffix}" for p in range(max(1, pid - 50), pid + 200)]
    return [directory / n for n in names]


def test_a_link_at_the_final_name_is_replaced_not_written_through(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").symlink_to(victim)
    write_whole(out / "manifest.json", lambda p: p.write_text('{"ok": true}\n'))
    assert victim.read_text() == VICTIM_TEXT
    st = os.lstat(out / "manifest.json")
    assert stat.S_ISREG(st.st_mode) and (out / "manifest.json").read_text() == '{"ok": true}\n'


def test_links_at_every_guessable_partial_name_are_left_alone(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    planted = _guessable_partials(out, "report", ".md") + _guessable_partials(out, "fig", ".png")
    for link in planted:
        link.symlink_to(victim)
    write_whole(out / "report.md", lambda p: p.write_text("# report\n"))
    write_whole(out / "fig.png", lambda p: p.write_bytes(b"\x89PNG"))
    assert victim.read_text() == VICTIM_TEXT
    assert (out / "report.md").read_text() == "# report\n" and (out / "fig.png").read_bytes() == b"\x89PNG"
    assert all(link.is_symlink() and os.readlink(link) == str(victim) for link in planted)
    # the links are not raidlab's partial files: the clean-up after a killed writer keeps them
    assert remove_partials(out) == []
    assert all(link.is_symlink() for link in planted)


def test_the_partial_file_is_new_random_and_gets_a_new_file_s_mode(tmp_path):
    names = []
    for _ in range(2):
        write_whole(tmp_path / "fig.png", lambda p: (names.append(p.name), p.write_bytes(b"png")))
    assert names[0] != names[1]
    assert all(n.startswith(".fig" + PARTIAL) and n.endswith(".png") for n in names)
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "fig.png").st_mode) == 0o666 & ~umask
    assert sorted(os.listdir(tmp_path)) == ["fig.png"]


def test_a_partial_file_swapped_for_a_link_while_written_is_not_renamed_over_the_file(tmp_path, victim):
    (tmp_path / "report.md").write_text("earlier\n")

    def swapped(partial):
        partial.unlink()
        partial.symlink_to(victim)  # as another user who can change the directory would

    with pytest.raises(UsageError, match="replaced while raidlab wrote it"):
        write_whole(tmp_path / "report.md", swapped)
    assert (tmp_path / "report.md").read_text() == "earlier\n" and victim.read_text() == VICTIM_TEXT


def test_a_link_given_as_the_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    for check in (owned_dir, output_dir, make_dirs):
        with pytest.raises(UsageError, match="symbolic link"):
            check(tmp_path / "link", "--out")


def test_another_user_s_directory_is_refused_whoever_the_caller_is(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    owner = os.lstat(theirs).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 4242)
    with pytest.raises(UsageError) as refused:
        owned_dir(theirs, "--resume")
    assert f"uid {owner})" in str(refused.value) and "copy it first" in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(UsageError, match="belongs to"):
        output_dir(theirs, "--out")


def test_a_directory_others_may_change_is_refused_unless_sticky(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UsageError, match="writable by others"):
        output_dir(shared, "--out")
    with pytest.raises(UsageError, match="writable by others"):
        make_dirs(shared / "report", "--out")
    assert not (shared / "report").exists()
    os.chmod(shared, 0o1777)  # as /tmp: no one renames what another user made there
    assert make_dirs(shared / "report" / "figures", "--out").is_dir()


@pytest.mark.root
def test_no_directory_is_made_through_another_user_s_link(tmp_path):
    nobody = 65534
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    os.lchown(link, nobody, nobody)
    with pytest.raises(UsageError, match="belongs to"):
        make_dirs(link / "report" / "figures", "--out")
    assert os.listdir(target) == []
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, nobody, nobody)
    with pytest.raises(UsageError, match="belongs to"):
        make_dirs(theirs / "report", "--out")
    assert os.listdir(theirs) == []


def test_files_raidlab_wrote_are_read_without_following_links(tmp_path, victim):
    (tmp_path / "manifest.json").write_text("{}")
    assert read_regular(tmp_path / "manifest.json") == b"{}"
    (tmp_path / "linked.json").symlink_to(victim)
    with pytest.raises(UsageError, match="symbolic link"):
        read_regular(tmp_path / "linked.json")
    os.mkfifo(tmp_path / "fifo.json")  # would block a plain open() for ever
    with pytest.raises(UsageError, match="a FIFO"):
        read_regular(tmp_path / "fifo.json")
    (tmp_path / "big.json").write_bytes(b" " * 100)
    with pytest.raises(UsageError, match="larger"):
        read_regular(tmp_path / "big.json", limit=10)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing.json")
