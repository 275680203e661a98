"""Where labs live (raidlab.lab.private): a home of the user's own whatever the working
directory, and directories that someone else could change refused before anything is made
in them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raidlab.errors import UsageError
from raidlab.lab import Lab, private_dir, raidlab_home, write_private
from raidlab.lab.private import default_home
from raidlab.outputs import trusted_uids


def test_the_default_home_is_the_users_own_not_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("RAIDLAB_HOME", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    monkeypatch.chdir(tmp_path)
    assert raidlab_home() == tmp_path / "me" / ".local" / "state" / "raidlab"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_home() == tmp_path / "state" / "raidlab"
    monkeypatch.setenv("XDG_STATE_HOME", "relative")  # not absolute: ignored, as XDG says
    assert default_home() == tmp_path / "me" / ".local" / "state" / "raidlab"


def test_a_new_lab_is_made_private(tmp_path):
    lab = Lab("p1", home=tmp_path / "home", create=True)
    for directory in (tmp_path / "home" / "labs", lab.path):
        assert directory.stat().st_mode & 0o777 == 0o700
    write_private(lab.path / "x.json", "{}")
    assert (lab.path / "x.json").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in lab.path.iterdir()] == ["x.json"]  # no partial file left


def test_an_opened_up_lab_directory_is_closed_again(tmp_path):
    lab = Lab("p2", home=tmp_path / "home", create=True)
    os.chmod(lab.path, 0o755)
    Lab("p2", home=tmp_path / "home")
    assert lab.path.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode", [0o775, 0o777])
def test_a_home_others_may_write_is_refused(tmp_path, mode):
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, mode)
    with pytest.raises(UsageError, match="writable by others"):
        Lab("p3", home=home, create=True)
    assert not (home / "labs").exists()


def test_a_link_in_place_of_a_lab_directory_is_refused(tmp_path):
    (tmp_path / "home" / "labs").mkdir(parents=True, mode=0o700)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "home" / "labs" / "p4").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="not a directory"):
        Lab("p4", home=tmp_path / "home", create=True)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_parent_others_may_write_without_the_sticky_bit_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UsageError, match=r"writable by others \(mode 0777, no sticky bit\)"):
        private_dir(shared / "home")
    assert not (shared / "home").exists()
    os.chmod(shared, 0o1777)  # sticky, as /tmp: others cannot rename what is ours
    assert private_dir(shared / "home") == shared / "home"


@pytest.mark.root
def test_directories_of_another_user_are_refused_but_the_sudo_callers_are_trusted(tmp_path, monkeypatch):
    monkeypatch.delenv("SUDO_UID", raising=False)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UsageError, match=r"belongs to nobody \(uid 65534\)"):
        private_dir(theirs / "home")
    assert not (theirs / "home").exists()
    with pytest.raises(UsageError, match="not to you"):
        private_dir(theirs, create=False)
    # `sudo raidlab ...` typed by that user, in their own directory
    monkeypatch.setenv("SUDO_UID", "65534")
    assert 65534 in trusted_uids()
    assert private_dir(theirs / "home") == theirs / "home"
    assert Path(theirs / "home").stat().st_uid == 0
