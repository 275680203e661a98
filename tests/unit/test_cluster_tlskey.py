"""A cluster's TLS key (raidlab.cluster.tlskey) and the PSK file format (raidlab.tools.nbd):
made random and private, never written through a link, refused when it is not a key or
others may read it. No root, no network; the live refusal of clients without the key is
tests/live/test_security_cluster.py.
"""

from __future__ import annotations

import os
import re
import stat

import pytest

from raidlab.cli import main
from raidlab.cluster import tlskey
from raidlab.errors import UsageError
from raidlab.tools import nbd


def test_a_new_key_is_256_random_bits_for_user_raidlab_readable_by_its_owner_only(tmp_path):
    psk = tlskey.install_key(tmp_path)
    path = tmp_path / "tls-psk"
    assert psk == nbd.TlsPsk(str(path), "raidlab")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == os.geteuid()
    assert re.fullmatch(r"raidlab:[0-9a-f]{64}\n", path.read_text())
    first = path.read_text()
    assert tlskey.install_key(tmp_path) == psk and path.read_text() != first  # a new key each time
    assert tlskey.load_key(tmp_path, "c") == psk


def test_a_key_is_never_written_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "tls-psk").symlink_to(victim)
    tlskey.install_key(lab)
    assert victim.read_text() == "keep me\n"
    assert not (lab / "tls-psk").is_symlink() and (lab / "tls-psk").read_text().startswith("raidlab:")


def test_a_lab_key_that_is_a_link_or_open_to_others_is_refused(tmp_path):
    with pytest.raises(UsageError, match="has no TLS key"):
        tlskey.load_key(tmp_path, "c")
    tlskey.install_key(tmp_path)
    path = tmp_path / "tls-psk"
    path.chmod(0o640)
    with pytest.raises(UsageError, match="not private to its owner"):
        tlskey.load_key(tmp_path, "c")
    path.chmod(0o600)
    target = tmp_path / "elsewhere"
    path.rename(target)
    path.symlink_to(target)
    with pytest.raises(UsageError, match="cannot be used"):
        tlskey.load_key(tmp_path, "c")


def test_a_given_key_file_is_checked_before_it_is_copied(tmp_path):
    given = tmp_path / "pc.psk"
    given.write_text(tlskey.new_key_text())
    given.chmod(0o644)
    with pytest.raises(UsageError, match="others may read or write it") as refused:
        tlskey.read_key_file(given)
    assert refused.value.hint == f"a key is secret: chmod 600 {given}"
    given.chmod(0o600)
    text = tlskey.read_key_file(given)
    lab = tmp_path / "lab"
    lab.mkdir()
    assert tlskey.install_key(lab, text).username == "raidlab"
    assert (lab / "tls-psk").read_text() == given.read_text()
    for bad, words in (("raidlab:abcd\n", "at least 32 hex digits"), ("no colon here\n", "not USERNAME:HEXKEY"),
                       (tlskey.new_key_text() * 2, "holds 2 lines"), ("", "holds 0 lines")):
        given.write_text(bad)
        with pytest.raises(UsageError, match=words):
            tlskey.read_key_file(given)
    with pytest.raises(UsageError, match="no such file"):
        tlskey.read_key_file(tmp_path / "none")


def test_psk_lines_and_nbdkit_tls_support():
    key = "0f" * 32
    assert nbd.parse_psk(nbd.psk_line("alice", key)) == ("alice", key)
    with pytest.raises(ValueError):
        nbd.psk_line("a:b", key)
    assert nbd.has_tls("name=nbdkit\ntls=yes\nversion=1.32.5\n")
    assert not nbd.has_tls("name=nbdkit\ntls=no\n")


@pytest.mark.parametrize("args, words", [
    (["up", "c", "--node-list", "nodes.toml"], "--node-list needs --psk-file"),
    (["up", "c", "--nodes", "2", "--psk-file", "k"], "--psk-file goes with --node-list"),
])
def test_the_key_options_are_refused_where_they_do_not_fit(args, words, tmp_path, capsys):
    assert main(["cluster", *args, "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "labs" / "c").exists()
