"""The Andrew benchmark's generated source tree: deterministic, the original's shape, and a
program whose printed sum the generator knows (compiled here with the host's cc)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from raidlab.workloads.andrew import ROOT, tree, write_tree


def test_the_tree_is_a_pure_function_of_its_arguments():
    assert tree(1).files == tree(1).files and tree(1).expected == tree(1).expected
    assert tree(1).files != tree(2).files


@pytest.mark.parametrize("kb", [50, 200, 800])
def test_the_tree_has_the_originals_shape_and_about_the_asked_size(kb):
    t = tree(5, kb=kb)
    s = t.summary()
    assert s["directories"] == 5 and s["c_files"] == 66 and s["files"] == 72   # 65 + main.c, 5 headers, the Makefile
    assert 0.75 * kb * 1024 < t.total_bytes < 1.25 * kb * 1024


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None, reason="needs cc and make")
def test_the_program_compiles_cleanly_and_prints_the_generators_sum(tmp_path):
    t = tree(7, dirs=3, files_per_dir=4, kb=20)
    write_tree(t, tmp_path)
    built = subprocess.run(["make", "-C", str(tmp_path / ROOT), "CFLAGS=-O -Wall -Werror"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    printed = subprocess.run([str(tmp_path / ROOT / "andrew")], capture_output=True, text=True, check=True)
    assert int(printed.stdout) == t.expected
