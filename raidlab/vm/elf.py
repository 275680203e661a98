"""Which shared libraries a host program needs, read from its ELF headers.

Why parse ELF instead of calling ldd: ldd runs the program's dynamic loader on it (it is not a
static reading), its output format is meant for people, and a pure reader can be tested on
any byte string. The lab VM's initramfs copies each program with exactly the libraries this
module finds (the PT_INTERP loader plus the DT_NEEDED closure), so the programs run in the VM
the same as on the host.

Scope: 64-bit little-endian ELF (x86_64), which is what the lab VM runs. Library lookup
follows the dynamic loader's order for the cases Debian's binaries use: DT_RPATH (when there
is no DT_RUNPATH), DT_RUNPATH, then the multiarch and default directories (the same list
ld.so.cache is built from on Debian/Ubuntu). `$ORIGIN` in a run path is expanded.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterable
from pathlib import Path

PT_LOAD, PT_DYNAMIC, PT_INTERP, PT_NOTE = 1, 2, 3, 4
XEN_ELFNOTE_PHYS32_ENTRY = 18   # the PVH entry point note (Linux's CONFIG_PVH)
DT_NULL, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 1, 5, 15, 29

DEFAULT_LIBRARY_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)


class ElfError(ValueError):
    """Not an ELF file this reader understands, or a library that cannot be found."""


@dataclasses.dataclass(frozen=True)
class ElfDynamicInfo:
    interpreter: str | None          # PT_INTERP, e.g. /lib64/ld-linux-x86-64.so.2; None if static
    needed: tuple[str, ...]          # DT_NEEDED sonames, in file order
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()

    @property
    def is_static(self) -> bool:
        return self.interpreter is None and not self.needed


def parse_elf(data: bytes) -> ElfDynamicInfo:
    """Interpreter and dynamic-section entries of a 64-bit little-endian ELF image."""
    _check_header(data)
    (e_phoff,) = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)

    loads: list[tuple[int, int, int]] = []   # (vaddr, offset, filesz)
    interpreter = None
    dynamic: tuple[int, int] | None = None
    for i in range(e_phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, e_phoff + i * e_phentsize)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_INTERP:
            interpreter = data[p_offset:p_offset + p_filesz].split(b"\0", 1)[0].decode()
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return ElfDynamicInfo(interpreter, ())

    entries: list[tuple[int, int]] = []
    offset, size = dynamic
    for pos in range(offset, offset + size, 16):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == DT_NULL:
            break
        entries.append((tag, value))
    strtab_vaddr = next((v for t, v in entries if t == DT_STRTAB), None)
    if strtab_vaddr is None:
        raise ElfError("dynamic section without a string table")
    strtab = _vaddr_to_offset(strtab_vaddr, loads)

    def string_at(index: int) -> str:
        start = strtab + index
        return data[start:data.index(b"\0", start)].decode()

    needed = tuple(string_at(v) for t, v in entries if t == DT_NEEDED)
    rpath = tuple(p for t, v in entries if t == DT_RPATH for p in string_at(v).split(":") if p)
    runpath = tuple(p for t, v in entries if t == DT_RUNPATH for p in string_at(v).split(":") if p)
    return ElfDynamicInfo(interpreter, needed, rpath, runpath)


def _check_header(data: bytes) -> None:
    if data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError("only 64-bit little-endian ELF is supported")


def elf_notes(data: bytes) -> list[tuple[str, int, bytes]]:
    """(name, type, descriptor) of every note in the PT_NOTE segments."""
    _check_header(data)
    (e_phoff,) = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    notes = []
    for i in range(e_phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, e_phoff + i * e_phentsize)
        if p_type != PT_NOTE:
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            pos += 12
            name = data[pos:pos + namesz].rstrip(b"\0").decode(errors="replace")
            pos += (namesz + 3) & ~3
            notes.append((name, ntype, data[pos:pos + descsz]))
            pos += (descsz + 3) & ~3
    return notes


def has_pvh_entry(data: bytes) -> bool:
    """Does this vmlinux carry a PVH entry point (so QEMU can boot it directly)?"""
    return any(name == "Xen" and ntype == XEN_ELFNOTE_PHYS32_ENTRY for name, ntype, _ in elf_notes(data))


def _vaddr_to_offset(vaddr: int, loads: list[tuple[int, int, int]]) -> int:
    for seg_vaddr, seg_offset, seg_filesz in loads:
        if seg_vaddr <= vaddr < seg_vaddr + seg_filesz:
            return vaddr - seg_vaddr + seg_offset
    raise ElfError(f"address {vaddr:#x} is in no loadable segment")


def read_elf(path: str | os.PathLike) -> ElfDynamicInfo:
    return parse_elf(Path(path).read_bytes())


def _search_dirs(info: ElfDynamicInfo, origin: str, extra: Iterable[str]) -> list[str]:
    dirs = [] if info.runpath else list(info.rpath)
    dirs += list(info.runpath)
    dirs = [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for d in dirs]
    return dirs + list(extra)


def library_closure(
    programs: Iterable[str | os.PathLike],
    library_dirs: Iterable[str] = DEFAULT_LIBRARY_DIRS,
) -> list[str]:
    """Every shared object (and loader) the programs need, as host paths, sorted.

    A library is reported under the directory where it is first found (e.g.
    /lib/x86_64-linux-gnu/libc.so.6), which is also where the VM's loader will look for it.
    Raises ElfError naming the program and the soname if a library cannot be found.
    """
    library_dirs = tuple(library_dirs)
    found: set[str] = set()
    queue: list[str] = [str(p) for p in programs]
    seen_objects: set[str] = set()
    while queue:
        path = queue.pop()
        if path in seen_objects:
            continue
        seen_objects.add(path)
        info = read_elf(path)
        if info.interpreter and info.interpreter not in found:
            found.add(info.interpreter)
            queue.append(info.interpreter)
        origin = os.path.dirname(os.path.realpath(path))
        dirs = _search_dirs(info, origin, library_dirs)
        for soname in info.needed:
            location = next((os.path.join(d, soname) for d in dirs
                             if os.path.exists(os.path.join(d, soname))), None)
            if location is None:
                raise ElfError(f"{path} needs {soname}, which is in none of: {', '.join(dirs)}")
            if location not in found:
                found.add(location)
                queue.append(location)
    return sorted(found)
