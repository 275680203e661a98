"""Kernel module load order, worked out from the kernel package's own module index.

Why not busybox `modprobe` in the guest: the order must be known on the host anyway (to put
exactly the needed modules into the initramfs and to record what the VM ran), and two facts
of Debian's 6.1 kernel need a decision modprobe would not make for us:

* `libcrc32c` (needed by raid456 and, through crc32c, by ext4/jbd2) asks the crypto API for
  "crc32c" when it loads. That request is only a *soft* dependency in modules.softdep
  (`softdep libcrc32c pre: crc32c`), and "crc32c" is an alias two modules provide. We choose
  `crc32c_generic` (SOFT_DEPENDENCY_CHOICES): `crc32c-intel` needs SSE4.2, which not every
  emulated CPU has, and without any crc32c loaded first raid456 fails to load.
* modules.dep is not shipped in the package; it exists only after `depmod -b` over the
  extracted tree (raidlab.vm.kernel does that).

Everything here is pure: text in, plan out, so it is tested on small modules.dep texts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping

# Soft dependency (module name or alias) -> the module raidlab loads for it.
SOFT_DEPENDENCY_CHOICES: dict[str, str] = {
    "crc32c": "crc32c_generic",
    "crypto-crc32c": "crc32c_generic",
}


class ModuleGraphError(ValueError):
    """A wanted module is missing from the index, or the dependencies form a cycle."""


def module_name(path: str) -> str:
    """`kernel/drivers/md/md-mod.ko.xz` -> `md_mod` (the kernel's normalized name)."""
    base = os.path.basename(path.strip())
    for suffix in (".xz", ".zst", ".gz"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    if base.endswith(".ko"):
        base = base[:-3]
    return base.replace("-", "_")


@dataclasses.dataclass(frozen=True)
class ModuleEntry:
    name: str
    path: str                    # relative to /lib/modules/<release>
    depends: tuple[str, ...]     # module names, as modules.dep lists them


@dataclasses.dataclass(frozen=True)
class SoftDependency:
    pre: tuple[str, ...] = ()
    post: tuple[str, ...] = ()


def parse_modules_dep(text: str) -> dict[str, ModuleEntry]:
    """Parse modules.dep (`path: dep_path dep_path ...` per line)."""
    index: dict[str, ModuleEntry] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path, sep, rest = line.partition(":")
        if not sep:
            raise ModuleGraphError(f"modules.dep line {lineno} has no ':': {line!r}")
        entry = ModuleEntry(module_name(path), path.strip(),
                            tuple(module_name(p) for p in rest.split()))
        index[entry.name] = entry
    return index


def parse_modules_softdep(text: str) -> dict[str, SoftDependency]:
    """Parse modules.softdep (`softdep NAME pre: A B post: C` per line)."""
    result: dict[str, SoftDependency] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] != "softdep":
            continue
        name = module_name(words[1])
        pre: list[str] = []
        post: list[str] = []
        target = None
        for word in words[2:]:
            if word == "pre:":
                target = pre
            elif word == "post:":
                target = post
            elif target is not None:
                target.append(word)
        old = result.get(name, SoftDependency())
        result[name] = SoftDependency(old.pre + tuple(pre), old.post + tuple(post))
    return result


def parse_modules_builtin(text: str) -> set[str]:
    return {module_name(line) for line in text.splitlines() if line.strip()}


@dataclasses.dataclass(frozen=True)
class LoadPlan:
    order: tuple[str, ...]                 # module names, each after everything it needs
    paths: dict[str, str]                  # name -> path relative to /lib/modules/<release>
    builtin: tuple[str, ...] = ()          # wanted but built into the kernel: nothing to load
    unresolved_soft: tuple[str, ...] = ()  # soft dependencies with no module (modprobe ignores them too)

    def load_lines(self) -> str:
        """The guest's /etc/raidlab/modules.load: `name path` per line, in load order."""
        return "".join(f"{name} {self.paths[name]}\n" for name in self.order)


def load_order(
    wanted: Iterable[str],
    index: Mapping[str, ModuleEntry],
    softdeps: Mapping[str, SoftDependency] | None = None,
    *,
    builtin: Iterable[str] = (),
    choices: Mapping[str, str] = SOFT_DEPENDENCY_CHOICES,
) -> LoadPlan:
    """Order `wanted` plus everything they need so that each module follows its dependencies.

    Hard dependencies come from modules.dep; soft `pre:` dependencies are loaded before and
    `post:` after their module, resolved through `choices` (alias -> module) when the name
    is not a module itself. The order is deterministic: dependencies in the order
    modules.dep lists them, wanted modules in the given order.
    """
    softdeps = softdeps or {}
    builtin_set = {module_name(b) for b in builtin}
    order: list[str] = []
    done: set[str] = set()
    in_progress: list[str] = []
    builtin_hit: list[str] = []
    unresolved: list[str] = []

    def resolve_soft(name: str) -> str | None:
        name = choices.get(name, name)
        key = module_name(name)
        if key in index:
            return key
        if key in builtin_set:
            return None
        if name not in unresolved:
            unresolved.append(name)
        return None

    def visit(name: str, required_by: str | None) -> None:
        name = module_name(name)
        if name in done:
            return
        if name in in_progress:
            cycle = " -> ".join(in_progress[in_progress.index(name):] + [name])
            raise ModuleGraphError(f"module dependency cycle: {cycle}")
        if name not in index:
            if name in builtin_set:
                if name not in builtin_hit:
                    builtin_hit.append(name)
                return
            who = f" (needed by {required_by})" if required_by else ""
            raise ModuleGraphError(f"module {name}{who} is not in modules.dep")
        in_progress.append(name)
        soft = softdeps.get(name, SoftDependency())
        for pre in soft.pre:
            chosen = resolve_soft(pre)
            if chosen is not None and chosen != name:
                visit(chosen, name)
        # modules.dep lists the full closure, nearest dependency first; loading from the far
        # end keeps the same order modprobe uses.
        for dep in reversed(index[name].depends):
            visit(dep, name)
        in_progress.pop()
        done.add(name)
        order.append(name)
        for post in soft.post:
            chosen = resolve_soft(post)
            if chosen is not None and chosen != name:
                visit(chosen, name)

    for name in wanted:
        visit(name, None)
    return LoadPlan(tuple(order), {n: index[n].path for n in order},
                    tuple(builtin_hit), tuple(unresolved))
