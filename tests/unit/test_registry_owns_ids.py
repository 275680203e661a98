"""Architecture ids belong to the registry: no module outside raidlab/archs/ branches on one or
keys a table by one, so what an architecture does is said once, in its declaration, and a
new architecture is not left out of a branch nobody knew of.

What counts, walked with `ast` over raidlab/: a string constant that is a registered
architecture id (raidlab.archs.names())

* as an operand of ==, !=, in or not in, or an element of a tuple, list or set literal there,
  or of a module-level tuple, list or set of constants whose name is an operand there;
* as the value of a `case` of a match statement;
* as a key of a dict literal, or an element of a set or list literal.

A string used as a value (an argument, a return value, text) is not a comparison: building
an architecture's raid5 or naming the array an experiment creates asks nothing of the id.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import raidlab
from raidlab import archs

ROOT = Path(raidlab.__file__).parent
REGISTRY_DIR = "raidlab/archs/"

# An architecture's own modules may name their own id: the mechanism writes it into its
# superblock and checks it at assembly, and SA-RAID's module builds each technique's virtual
# device array by name. A path ending in "/" is a package.
OWN_MODULES: dict[str, tuple[str, ...]] = {
    "dcd": ("raidlab/engine/caches/dcd.py",),
    "vcraid": ("raidlab/engine/caches/vcraid.py", "raidlab/engine/caches/perdisk.py"),  # perdisk: its 1c and 1d
    "tss": ("raidlab/engine/tss/",),
    "sa1": ("raidlab/engine/layouts/sa.py",),
    "sa2": ("raidlab/engine/layouts/sa.py",),
    "sa3": ("raidlab/engine/layouts/sa.py",),
    # md's levels as the md baseline drives mdadm with them
    "md-raid0": ("raidlab/baselines/mdadm.py",),
    "md-raid1": ("raidlab/baselines/mdadm.py",),
    "md-raid5": ("raidlab/baselines/mdadm.py",),
    "md-raid10": ("raidlab/baselines/mdadm.py",),
    "md-raid5-wb": ("raidlab/baselines/mdadm.py",),
    "md-raid5-ppl": ("raidlab/baselines/mdadm.py",),
}

# Words that are an id and also mean something else there. "disk" is the word for a drive:
# the key naming a partition's drive in statistics (disks/disk.py, engine/array.py,
# engine/caches/mirror.py) or the drive of a finding (engine/tss/, service/hosts/cache.py,
# campaigns/fault.py), RAID-x's image_buffer=disk (engine/layouts/raidx.py,
# engine/imagebuffer.py), the members' key
# and a column heading in `raidlab status` (cli/array.py). TSS's personalities are RAID1 and
# RAID5 stripes, which `raidlab tss` takes by the paper's names (cli/tss.py).
SAME_WORD: dict[str, tuple[str, ...]] = {
    "disk": ("raidlab/disks/disk.py", "raidlab/engine/array.py", "raidlab/engine/caches/mirror.py",
             "raidlab/engine/tss/", "raidlab/service/hosts/cache.py", "raidlab/campaigns/fault.py",
             "raidlab/engine/layouts/raidx.py", "raidlab/engine/imagebuffer.py", "raidlab/cli/array.py"),
    "raid1": ("raidlab/cli/tss.py",),
    "raid5": ("raidlab/cli/tss.py",),
}


def _strings(node: ast.AST, constants: dict[str, list[ast.Constant]]) -> Iterator[ast.Constant]:
    """The string constants `node` stands for: itself, a collection literal's elements, or a
    module-level collection constant it names."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _strings(element, constants)
    elif isinstance(node, ast.Name) and node.id in constants:
        yield from constants[node.id]


def _module_constants(tree: ast.Module) -> dict[str, list[ast.Constant]]:
    """NAME -> its string constants, for module-level NAME = (tuple, list or set of constants)."""
    out: dict[str, list[ast.Constant]] = {}
    for statement in tree.body:
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        targets = statement.targets if isinstance(statement, ast.Assign) else \
            [statement.target] if isinstance(statement, ast.AnnAssign) else []
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "frozenset" \
                and value.args:
            value = value.args[0]
        if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
            found = list(_strings(value, {}))
            for target in targets:
                if isinstance(target, ast.Name) and found:
                    out[target.id] = found
    return out


def id_uses(source: str, ids: set[str]) -> list[tuple[int, str, str]]:
    """(line, id, how) for every use of an id in `source` that the module doc counts."""
    tree = ast.parse(source)
    constants = _module_constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            hits = [(c, "compared") for operand in (node.left, *node.comparators) for c in _strings(operand, constants)]
        elif isinstance(node, ast.MatchValue):
            hits = [(c, "a case") for c in _strings(node.value, {})]
        elif isinstance(node, ast.Dict):
            hits = [(key, "a dict key") for key in node.keys if isinstance(key, ast.Constant)]
        elif isinstance(node, (ast.Set, ast.List)):
            hits = [(element, f"in a {type(node).__name__.lower()}") for element in node.elts
                    if isinstance(element, ast.Constant)]
        else:
            continue
        found += [(node.lineno, c.value, how) for c, how in hits if c.value in ids]
    return sorted(set(found))


def _allowed(path: str, arch: str) -> bool:
    return any(path == place or (place.endswith("/") and path.startswith(place))
               for place in OWN_MODULES.get(arch, ()) + SAME_WORD.get(arch, ()))


def _tree_uses() -> list[tuple[str, int, str, str]]:
    ids = set(archs.names())
    out = []
    for file in sorted(ROOT.rglob("*.py")):
        path = file.relative_to(ROOT.parent).as_posix()
        if not path.startswith(REGISTRY_DIR):
            out += [(path, line, arch, how) for line, arch, how in id_uses(file.read_text(), ids)]
    return out


def test_no_module_outside_the_registry_compares_an_architecture_id():
    wrong = [f"{path}:{line}: {arch!r} {how}" for path, line, arch, how in _tree_uses() if not _allowed(path, arch)]
    assert not wrong, ("architecture ids compared or keyed outside raidlab/archs/; ask the registry "
                       "(raidlab.archs) or declare it on the architecture:\n" + "\n".join(wrong))


def test_every_allowance_is_still_needed():
    used = {(arch, place) for path, _line, arch, _how in _tree_uses()
            for place in OWN_MODULES.get(arch, ()) + SAME_WORD.get(arch, ())
            if path == place or (place.endswith("/") and path.startswith(place))}
    listed = {(arch, place) for table in (OWN_MODULES, SAME_WORD) for arch, places in table.items()
              for place in places}
    assert not listed - used, f"allowances no module needs any more: {sorted(listed - used)}"
    assert set(OWN_MODULES) | set(SAME_WORD) <= set(archs.names())


@pytest.mark.parametrize("source, expected", [
    ('if arch == "vcraid":\n    pass', [(1, "vcraid", "compared")]),
    ('ok = "dcd" != arch', [(1, "dcd", "compared")]),
    ('if arch not in ("raid0", "sa1"):\n    pass', [(1, "raid0", "compared"), (1, "sa1", "compared")]),
    ('NON = ("raid0", "saz")\nredundant = arch not in NON',
     [(2, "raid0", "compared"), (2, "saz", "compared")]),
    ('match arch:\n    case "tss":\n        pass', [(2, "tss", "a case")]),
    ('HOSTS = {"tss": 1, "engine": 2}', [(1, "tss", "a dict key")]),
    ('kinds = {"raid5", "md-raid5"}', [(1, "md-raid5", "in a set"), (1, "raid5", "in a set")]),
    ('argv = ["create", "--arch", "raidx"]', [(1, "raidx", "in a list")]),
    # values, not comparisons; and strings that are no id
    ('build("raid5", members)\nname = "vcraid"\nreturn_value = ("raid10", {})', []),
    ('if arch == "raid7" or family == "engine":\n    pass', []),
])
def test_the_walk_finds_each_kind_of_use(source, expected):
    assert id_uses(source, set(archs.names())) == sorted(expected)
