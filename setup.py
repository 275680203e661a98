"""Builds raidlab's compiled modules (raidlab.compiled.MODULES); the rest is pyproject.toml.

Each module is compiled by Cython from its own .py file, typed by the .pxd beside it, and
the .py file stays the reference (raidlab.compiled). `make setup` builds them (pip's
editable install runs this), so a fresh machine needs Cython (fetched by pip as a build
requirement) and a C compiler with Python's headers (scripts/system-packages.txt).
"""

from Cython.Build import cythonize
from setuptools import setup

COMPILED = ["raidlab/disks/mechanisms/hddcore.py"]

setup(
    ext_modules=cythonize(
        COMPILED,
        language_level=3,
        # the annotations are Python's (int is Python's unbounded int); the C types are
        # those of the .pxd files
        compiler_directives={"annotation_typing": False},
        quiet=True,
    ),
)
