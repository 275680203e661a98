"""The modules raidlab also runs compiled, and the switch back to their Python source.

A few modules on the innermost path of a virtual-time replay are plain arithmetic; `make
setup` compiles each of them with Cython from its own .py file, typed by an augmenting .pxd
beside it (setup.py). The .py file stays the reference: Python imports an extension module
ahead of the source of the same name, so the compiled module runs by default, and with
RAIDLAB_PURE_PYTHON=1 in the environment a finder installed by raidlab/__init__.py loads
these modules from their source instead. Both give identical numbers
(tests/unit/test_compiled.py replays the same traces through both); `raidlab bench sim
--against-python` measures the two in one run.

What is compiled and why only this: the drive model's media arithmetic is a loop of
integer and float operations, which typed C does many times faster than the interpreter.
The rest of the replay path is coroutines (the scheduler kernel, the disk's queue, the
engine's request paths), and compiled coroutines resume more slowly than CPython's own:
results/bench/compiled-cython/NOTES.md measures both.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

ENV = "RAIDLAB_PURE_PYTHON"
MODULES = ("raidlab.disks.mechanisms.hddcore",)


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of MODULES as their .py files, ahead of the extension modules."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for folder in path:
            source = Path(folder) / leaf
            if source.is_file():
                loader = importlib.machinery.SourceFileLoader(fullname, str(source))
                return importlib.util.spec_from_file_location(fullname, source, loader=loader)
        return None


def install_source_finder() -> None:
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def status() -> dict[str, str]:
    """Each module of MODULES and how this process runs it: "compiled" or "python"."""
    import importlib

    out = {}
    for name in MODULES:
        module = importlib.import_module(name)
        compiled = (module.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
        out[name] = "compiled" if compiled else "python"
    return out
