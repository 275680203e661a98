"""`raidlab demo`: the default small comparison `make demo` runs, ending with a report path.

Until the scenarios of the workloads issue exist, the demo is the disk layer's own
validation, written like a report: every paper drive of the catalog benchmarked on the
virtual clock, each published figure of its expectation file beside the measured value
with a verdict, plus one live-clock run of the DCD paper's HP C2200A to show how closely
this host delivers the model's timing (lateness). Everything in the report is measured in
this run; the published figures are quoted with their sources.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from raidlab import __version__
from raidlab.disks.bench import run_bench

# (catalog name, the paper that uses it)
PAPER_DRIVES = [
    ("hp-c2200a", "DCD (Hu & Yang), Table 1"),
    ("ibm-dnes-318350", "VC-RAID (He & Yang), Table 1"),
    ("ibm-dnes-309170", "VC-RAID (He & Yang), Table 1"),
    ("maxtor-91366u4", "VC-RAID (He & Yang), Table 1"),
    ("maxtor-91020d6", "VC-RAID (He & Yang), Table 1"),
    ("seagate-st52160n", "VC-RAID (He & Yang), Table 1"),
    ("seagate-st32151n", "VC-RAID (He & Yang), Table 1"),
    ("ibm-ultrastar-9lzx", "SA-RAID (McCormick)"),
    ("quantum-fireball-1280s", "TSS (Pallipadi & Gopinath)"),
]


def _expectations(model: str) -> list[dict[str, Any]]:
    path = resources.files("raidlab.disks") / "data" / "expectations" / f"{model}.toml"
    try:
        return tomllib.loads(path.read_text()).get("figure", [])
    except FileNotFoundError:
        return []


def _measured(figure: dict[str, Any], bench: dict[str, Any]) -> float | None:
    measure = figure.get("measure")
    params = figure.get("params", {})
    if measure == "random_read_mean_ms":
        key = {4096: "random_read_4k", 8192: "random_read_8k"}.get(params.get("bytes"))
        return bench[key]["mean_ms"] if key else None
    if measure == "capacity_bytes":
        return float(bench["size"])
    seq = bench.get("sequential", {})
    if measure in ("outer_zone_mb_s", "sequential_read_outer_mb_s"):
        return seq.get("read_outer_mb_s")
    if measure in ("inner_zone_mb_s", "sequential_read_inner_mb_s"):
        return seq.get("read_inner_mb_s")
    return None


def _git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent.parent, timeout=10)
    except OSError:
        return None
    return out.stdout.strip() or None


def run_demo(out_root: Path, *, samples: int = 600, live: bool | None = None,
             progress: Callable[[str], None] = lambda s: None) -> Path:
    """Run the demo; return the path of report.md."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = out_root / "demo" / stamp
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    lines = [
        "# raidlab demo: the papers' drives as emulated disks",
        "",
        f"raidlab {__version__}, git {_git_revision() or 'unknown'}, kernel {platform.release()}, "
        f"{dt.datetime.now().isoformat(timespec='seconds')}.",
        "",
        "Each drive of the catalog is benchmarked on the virtual clock (exact model time, "
        f"{samples} QD1 random requests per test). Published figures come from the drive's "
        "expectation file (`raidlab/disks/data/expectations/`), with their sources.",
        "",
        "| drive | used in | 4 KiB rand read ms | 8 KiB rand read ms | seq read outer / inner MB/s | published figure | measured | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, paper in PAPER_DRIVES:
        progress(f"benchmarking {model} (virtual clock)")
        bench = run_bench(model, clock="virtual", samples=samples)
        results[model] = bench
        seq = bench["sequential"]
        base = (f"| {model} | {paper} | {bench['random_read_4k']['mean_ms']:.2f} | "
                f"{bench['random_read_8k']['mean_ms']:.2f} | "
                f"{seq['read_outer_mb_s']:.2f} / {seq['read_inner_mb_s']:.2f} |")
        checked = [f for f in _expectations(model) if not f.get("input") and _measured(f, bench) is not None]
        if not checked:
            lines.append(base + " (no published performance figure) | | |")
            continue
        for i, fig in enumerate(checked):
            value = _measured(fig, bench)
            rel = abs(value - fig["published"]) / fig["published"]
            verdict = "holds" if rel <= fig["tolerance"] else "does not hold"
            prefix = base if i == 0 else "| | | | | |"
            lines.append(f"{prefix} {fig['name']}: {fig['published']} ({fig['source']}) | "
                         f"{value:.2f} ({rel * 100:.1f}% off, tolerance {fig['tolerance'] * 100:.0f}%) | {verdict} |")
    do_live = (os.geteuid() == 0) if live is None else live
    if do_live:
        progress("benchmarking hp-c2200a on the live clock (real I/O on a sparse image)")
        bench = run_bench("hp-c2200a", clock="live", size=256 << 20, samples=200, image_dir=str(out))
        results["hp-c2200a-live"] = bench
        q1, q16 = bench["lateness_qd1"], bench["lateness_qd16"]
        lines += [
            "",
            "## Live clock: does this host deliver the model's timing?",
            "",
            "HP C2200A model over a 256 MiB sparse image, real I/O in a worker thread, completion "
            "when the model says. Lateness = actual completion - model completion.",
            "",
            "| | mean ms (virtual) | mean ms (live) | lateness p50 ms | p99 ms | max ms |",
            "|---|---|---|---|---|---|",
            f"| 4 KiB random read QD1 | {results['hp-c2200a']['random_read_4k']['mean_ms']:.2f} | "
            f"{bench['random_read_4k']['mean_ms']:.2f} | {q1['p50_ms']:.3f} | {q1['p99_ms']:.3f} | {q1['max_ms']:.3f} |",
            f"| 4 KiB random read QD16 | | | {q16['p50_ms']:.3f} | {q16['p99_ms']:.3f} | {q16['max_ms']:.3f} |",
        ]
    (out / "results.json").write_text(json.dumps(results, indent=2))
    lines += ["", f"Raw results: `{out / 'results.json'}`. Reproduce: `make demo`.", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report
