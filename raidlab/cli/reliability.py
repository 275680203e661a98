"""`raidlab reliability`: the crash and fault campaigns, and docs/reliability.md from them
(raidlab.campaigns.document). Parsing and printing only."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console

_err = Console(stderr=True, highlight=False)


@click.command()
@click.option("--points", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="crash points per crash-test target")
@click.option("--crash", "crash_targets", multiple=True,
              help="crash-test targets (repeatable; default: every preset of `raidlab crashtest`)")
@click.option("--crash-mode", "crash_modes", multiple=True,
              type=click.Choice(["kill", "power", "power-model", "power-random"]),
              help="crash modes per target (repeatable; default: kill, power, power-random)")
@click.option("--fault", "fault_cells", multiple=True,
              help="cells of the fault campaign (repeatable; default: all of raidlab.campaigns.document.FAULT_CELLS, "
                   "every architecture's fault cells)")
@click.option("--damage-trials", type=click.IntRange(0, 10000), default=24, show_default=True,
              help="trials of the damaged-metadata campaign per target (0: none)")
@click.option("--damage", "damage_targets", multiple=True,
              help="targets of the damaged-metadata campaign (repeatable; default: all of "
                   "raidlab.campaigns.damage.TARGETS)")
@click.option("--interrupt-points", type=click.IntRange(0, 1000), default=5, show_default=True,
              help="interrupt points per command and signal (0: no interrupt campaign)")
@click.option("--interrupt", "interrupt_commands", multiple=True,
              type=click.Choice(["create", "destroy", "crashtest", "run", "report"]),
              help="commands for the interrupt campaign (repeatable; default: all five)")
@click.option("--write-hole-trials", type=click.IntRange(0, 1000), default=10, show_default=True,
              help="trials of the write-hole campaign per case (0: none)")
@click.option("--write-hole-case", "write_hole_cases", multiple=True,
              help="cases of the write-hole campaign (repeatable; default: all of raidlab.campaigns.writehole.CASES, "
                   "every architecture's write-hole cases: raid5's and md-raid5's, without and with a journal; "
                   "md's run in the lab VM)")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--write", "out", type=click.Path(dir_okay=False), default=None,
              help="write the document there (docs/reliability.md)")
@click.option("--cells", "cells_dir", type=click.Path(file_okay=False), default=None,
              help="keep each finished cell there and take cells a stopped run of the same code (raidlab/, "
                   "scripts/, pyproject.toml) and parameters finished (a campaign of hours goes on where it stopped)")
@click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
def reliability(points, crash_targets, crash_modes, fault_cells, damage_trials, damage_targets, interrupt_points,
                interrupt_commands, write_hole_trials, write_hole_cases, seed, out, cells_dir, home):
    """Run the crash campaign (every crashtest preset, killed and with the power cut), the
    write-hole campaign (a degraded raid5 cut without and with a journal), the fault campaign
    (a drive of every architecture with a live array) and the interrupt campaign, and write
    what they found as docs/reliability.md. Exit 1 if anything failed (a write hole without a
    journal is what the campaign shows, not a failure)."""
    from raidlab.campaigns.crash import PRESETS, config_for, run_crashtest
    from raidlab.campaigns.fault import MODES, run_faulttest
    from raidlab.outputs import writable_file, write_whole
    from raidlab.errors import UsageError
    from raidlab.campaigns.document import FAULT_CELLS, TITLE, CellStore, document
    from raidlab.campaigns.writehole import failed_rows
    from raidlab.units import parse_size

    if out is not None:
        writable_file(out, "--write", marker=TITLE.encode())
    from raidlab.run import code_revision, git_revision

    git = git_revision(ignore=out)  # the code that runs, not what the tree holds afterwards
    code = code_revision()
    commit = ((git["revision"] or "an unknown commit")[:7]
              + (" (with uncommitted changes)" if git.get("dirty") else ""))
    targets = list(crash_targets) or list(PRESETS)
    cells = list(fault_cells) or list(FAULT_CELLS)
    unknown = [c for c in cells if c not in FAULT_CELLS]
    if unknown:
        raise UsageError(f"--fault {unknown[0]}: no such cell", hint=f"one of {', '.join(FAULT_CELLS)}")
    from raidlab.campaigns.writehole import CASES as WRITE_HOLE_CASES

    unknown = [c for c in write_hole_cases if c not in WRITE_HOLE_CASES]
    if unknown:
        raise UsageError(f"--write-hole-case {unknown[0]}: no such case", hint=f"one of {', '.join(WRITE_HOLE_CASES)}")
    modes = list(crash_modes) or ["kill", "power", "power-random"]
    configs = [config_for(t, disks=None, options={}, disk_model="none", disk_size=parse_size("64M", "size"),
                          chunk=64 << 10, files=120, mode=mode) for t in targets for mode in modes]
    store = None
    if cells_dir is not None and code["code"] is not None and not code.get("dirty"):
        commit += f", cells kept in {cells_dir} run by the same code ({code['code'][:10]})"
    if cells_dir is not None:
        store = CellStore(cells_dir, revision=code["code"], dirty=bool(code.get("dirty")),
                          params={"points": points, "seed": seed, "write_hole_trials": write_hole_trials,
                                  "interrupt_points": interrupt_points, "damage_trials": damage_trials})

    def kept_or_run(key: str, run: Callable[[], dict]) -> dict:
        """A cell from the store, or run (and stored)."""
        kept = store.load(key) if store is not None else None
        if kept is not None:
            _err.print(f"{key}: taken from {cells_dir} (same code and parameters)")
            return kept
        summary = run()
        if store is not None:
            store.save(key, summary)
        return summary

    crash, faults = [], []
    with _err.status("reliability") as spinner:
        for config in configs:
            summary = kept_or_run(f"crash-{config.name}-{config.mode}", lambda config=config: run_crashtest(
                config, points=points, seed=seed, home=home,
                phase=lambda k, s, n=f"{config.name} ({config.mode})": spinner.update(f"crash {n} point {k}: {s}"[:90])))
            _err.print(f"crash {config.name} ({config.mode}): {summary['passed']}/{summary['points']} passed, "
                       f"{summary['fsynced_files_lost']} fsync'ed files lost, {summary['leaks']} leaks")
            crash.append(summary)
        writehole = None
        if write_hole_trials:
            from raidlab.campaigns.writehole import CASES, merge
            from raidlab.campaigns.writehole import run_campaign as run_writehole

            writehole = merge([kept_or_run(f"writehole-{case}", lambda case=case: run_writehole(
                trials=write_hole_trials, stripes=16, seed=seed, home=home, cases=[case],
                done=lambda t: spinner.update(f"write hole {t.case} seed {t.seed}")))
                for case in list(write_hole_cases) or list(CASES)])
            for row in writehole["rows"]:
                _err.print(f"write hole {row['case']}: refused without --force {row['refused']} of {row['trials']}, "
                           f"{row['stripes_wrong']} of {row['stripes_written']} stripes wrong, "
                           f"{row['errors']} errors, {row['leaks']} leaks")
        for cell in cells:
            arch, disks, options, disk = FAULT_CELLS[cell]
            summary = kept_or_run(f"fault-{cell}", lambda arch=arch, disks=disks, options=options, disk=disk, cell=cell:
                                  run_faulttest(arch, disks=disks, options=dict(options), disk_size=64 << 20,
                                                chunk=64 << 10, modes=list(MODES), seed=seed, home=home, disk=disk,
                                                status=lambda s: spinner.update(f"faults {cell}: {s}"[:90])))
            summary["cell"] = cell
            _err.print(f"faults {cell}: {summary['passed']}/{summary['modes']} passed, {summary['leaks']} leaks")
            faults.append(summary)
        damage = []
        if damage_trials:
            from raidlab.campaigns.damage import TARGETS as DAMAGE_TARGETS
            from raidlab.campaigns.damage import run_damagetest
            from raidlab.lab import private_dir, raidlab_home

            unknown = [t for t in damage_targets if t not in DAMAGE_TARGETS]
            if unknown:
                raise UsageError(f"--damage {unknown[0]}: no such target", hint=f"one of {', '.join(DAMAGE_TARGETS)}")
            damage_home = private_dir(Path(home) if home else raidlab_home(), tighten=False)
            for target in list(damage_targets) or list(DAMAGE_TARGETS):
                summary = kept_or_run(f"damage-{target}", lambda target=target: run_damagetest(
                    target, trials=damage_trials, seed=seed, home=damage_home,
                    phase=lambda k, s, t=target: spinner.update(f"damage {t} trial {k}: {s}"[:90])))
                _err.print(f"damage {target}: {summary['passed']}/{summary['trials']} passed "
                           f"({summary['refused']} refused, {summary['recovered']} recovered, {summary['wrong']} wrong)")
                damage.append(summary)
        interrupts = None
        if interrupt_points:
            import tempfile

            from raidlab.campaigns.interrupt import run_campaign
            from raidlab.lab import private_dir, raidlab_home

            base = private_dir(Path(home) if home else raidlab_home(), tighten=False)

            def interrupt_campaign() -> dict:
                with tempfile.TemporaryDirectory(prefix="interrupttest-", dir=base) as scratch:
                    return run_campaign(
                        points=interrupt_points, seed=seed, scratch=Path(scratch),
                        repo=Path(__file__).resolve().parents[2], commands=list(interrupt_commands) or None,
                        done=lambda p: spinner.update(f"interrupts: {p.command} {p.signal} after {p.delay_s} s"))

            interrupts = kept_or_run("interrupts-" + "-".join(sorted(interrupt_commands) or ["all"]),
                                     interrupt_campaign)
            _err.print(f"interrupts: {interrupts['passed']}/{interrupts['points']} passed")
    if out is not None:
        text = document(crash, faults, interrupts, command=" ".join(["raidlab", *sys.argv[1:]]), commit=commit,
                        when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), writehole=writehole, damage=damage)
        write_whole(out, lambda partial: partial.write_text(text))
        _err.print(f"wrote {out}")
    hole_failed = writehole is not None and bool(failed_rows(writehole))
    damage_failed = any(s["passed"] < s["trials"] for s in damage)
    return 1 if (any(s["failed"] for s in crash + faults) or (interrupts and interrupts["failed"]) or hole_failed
                 or damage_failed) else 0


def register(cli: click.Group) -> None:
    cli.add_command(reliability)
