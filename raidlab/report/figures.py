"""Figures drawn like the VC-RAID paper's: grouped bars (Table 2, Figs. 7-8) or lines of a
metric against a parameter (TPS against clients, Figs. 4-6), with matplotlib.

Why like the paper: the point of a reproduction report is to be put beside the original
page. Bars: one group per case (PostMark small/medium/large, untar/copy/remove), one bar per
architecture, height = mean over repetitions, error bar = min..max of the repetitions (with
three runs a standard deviation says little; the range shows every run). The paper's value,
where it published one, is a black diamond on the same bar. Lines: one line per series (an
architecture, or for a sweep the arch entries sharing a `series`), same error bars and
diamonds, one panel per set of case parameters other than x (Fig. 4a/b/c = write ratio),
titled by them with [report].panel first: cases that differ in anything but x are never
averaged into one line (Fig. 5's two write ratios at 0.5 KB are two panels, not one).

The Agg backend is used: reports are made on headless hosts and in CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from raidlab.outputs import make_dirs, regular_or_absent, write_whole  # noqa: E402
from raidlab.report.results import Results, Stat, metric_value  # noqa: E402
from raidlab.scenarios import ARCH_X_FIELDS, pattern_x, x_value  # noqa: E402


def _run_params(results: Results, doc: dict) -> dict:
    params = dict(results.scenario.case(doc["case"]).params)
    if isinstance(doc.get("params"), dict):
        params.update(doc["params"])
    return params


def _paper_value(results: Results, label: str, case: str, metric: str) -> float | None:
    for p in results.scenario.paper_values:
        if p.arch == label and p.case == case and p.metric == metric:
            return p.value
    return None


def grouped_bars(results: Results, stats: dict, metric: str, out: Path) -> Path | None:
    """Bars with an [[arch]] field as x (SA-RAID: the partition configurations): one panel per
    case, one group per x value (in the order the entries give them), one bar per series,
    the same error bars and paper diamonds as `bars`."""
    scn = results.scenario
    spec = scn.report
    entries = [a for a in scn.archs if x_value(spec, a, {}) is not None]
    groups = list(dict.fromkeys(x_value(spec, a, {}) for a in entries))
    series = list(dict.fromkeys(a.series for a in entries))
    cases = [c.name for c in scn.cases if any((a.label, c.name, metric) in stats
                                              or _paper_value(results, a.label, c.name, metric) is not None
                                              for a in entries)]
    if not cases or not groups:
        return None
    unit = next((s.unit for (l, c, m), s in stats.items() if m == metric and s.unit), "")
    fig, axes = plt.subplots(1, len(cases), figsize=(max(5.0, 1.0 + 0.35 * len(groups) * len(series)) * len(cases),
                                                     3.8), squeeze=False)
    width = 0.8 / len(series)
    colors = plt.get_cmap("tab10")
    for ax, case in zip(axes[0], cases):
        for j, name in enumerate(series):
            xs, heights, lo, hi, px, py = [], [], [], [], [], []
            for i, group in enumerate(groups):
                for a in entries:
                    if a.series != name or x_value(spec, a, {}) != group:
                        continue
                    at = i - 0.4 + width * (j + 0.5)
                    stat: Stat | None = stats.get((a.label, case, metric))
                    if stat is not None:
                        xs.append(at)
                        heights.append(stat.mean)
                        lo.append(max(0.0, stat.mean - stat.min))  # equal runs: no rounding below 0
                        hi.append(max(0.0, stat.max - stat.mean))
                    paper = _paper_value(results, a.label, case, metric)
                    if paper is not None:
                        px.append(at)
                        py.append(paper)
            ax.bar(xs, heights, width * 0.92, yerr=[lo, hi] if xs else None, capsize=2, label=name, color=colors(j))
            if px:
                ax.scatter(px, py, marker="D", color="black", zorder=3, s=18, label="paper")
        _dedupe_legend(ax)
        ax.set_xticks(range(len(groups)), [str(g) for g in groups], fontsize=8)
        ax.set_xlabel(spec.x_label or spec.x)
        ax.set_ylabel(spec.y_label or f"{metric}" + (f" ({unit})" if unit else ""))
        ax.set_title(case, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    _finish(fig, list(axes[0]), results, f"{scn.source or scn.id}: {metric} ({scn.better(metric)} is better)",
            suptitle=True)
    path = out / f"{metric}.png"
    write_whole(regular_or_absent(path, "report figure"), lambda partial: fig.savefig(partial, dpi=110))
    plt.close(fig)
    return path


def bars(results: Results, stats: dict, metric: str, out: Path) -> Path | None:
    scn = results.scenario
    if scn.report.x in ARCH_X_FIELDS:
        return grouped_bars(results, stats, metric, out)
    cases = [c.name for c in scn.cases if any((a.label, c.name, metric) in stats or _paper_value(results, a.label, c.name, metric) is not None for a in scn.archs)]
    labels = [a.label for a in scn.archs]
    if not cases:
        return None
    unit = next((s.unit for (l, c, m), s in stats.items() if m == metric and s.unit), "")
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 + 0.5 * len(cases) * len(labels)), 3.8))
    width = 0.8 / len(labels)
    colors = plt.get_cmap("tab10")
    for j, label in enumerate(labels):
        xs, heights, lo, hi = [], [], [], []
        for i, case in enumerate(cases):
            stat: Stat | None = stats.get((label, case, metric))
            if stat is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            heights.append(stat.mean)
            lo.append(max(0.0, stat.mean - stat.min))  # equal runs: no rounding below 0
            hi.append(max(0.0, stat.max - stat.mean))
        ax.bar(xs, heights, width * 0.92, yerr=[lo, hi] if xs else None, capsize=3, label=label, color=colors(j))
        paper_x = [i - 0.4 + width * (j + 0.5) for i, case in enumerate(cases)
                   if _paper_value(results, label, case, metric) is not None]
        paper_y = [_paper_value(results, label, case, metric) for case in cases
                   if _paper_value(results, label, case, metric) is not None]
        if paper_x:
            ax.scatter(paper_x, paper_y, marker="D", color="black", zorder=3, s=22,
                       label="paper" if j == 0 or not ax.get_legend_handles_labels()[1].count("paper") else None)
    _dedupe_legend(ax)
    ax.set_xticks(range(len(cases)), cases)
    ax.set_ylabel(scn.report.y_label or f"{metric}" + (f" ({unit})" if unit else ""))
    better = scn.better(metric)
    ax.grid(axis="y", alpha=0.3)
    _finish(fig, [ax], results, f"{scn.source or scn.id}: {metric} ({better} is better)")
    path = out / f"{metric}.png"
    write_whole(regular_or_absent(path, "report figure"), lambda partial: fig.savefig(partial, dpi=110))
    plt.close(fig)
    return path


LOG_SPAN = 100.0  # a figure whose positive values span more than this factor gets a log axis


def figure_name(metric: str, x: str) -> str:
    """The file of a metric's figure; a pattern (tps_c{x}) is named by what it is drawn
    against: tps_c_by_clients.png."""
    if "{x}" not in metric:
        return f"{metric}.png"
    head = metric.split("{x}")[0].rstrip("_") or "metric"
    return f"{head}_by_{x or 'x'}.png"


def _finish(fig, axes: list, results: Results, title: str, suptitle: bool = False) -> None:
    """Title (marked when the runs were quick-size), a log y axis where the values span
    orders of magnitude (DCD's response times), layout."""
    if results.manifest.get("quick"):
        title += "  [quick size: not comparable with the paper]"
    for ax in axes:
        values = [abs(y) for line in ax.get_lines() for y in line.get_ydata() if y and y > 0]
        values += [p.get_height() for p in ax.patches if p.get_height() > 0]
        if values and max(values) / min(values) > LOG_SPAN:
            ax.set_yscale("log")
    if suptitle:
        fig.suptitle(title, fontsize=10)
    else:
        axes[0].set_title(title, fontsize=10)
    fig.tight_layout()


def _dedupe_legend(ax) -> None:
    handles, names = ax.get_legend_handles_labels()
    seen: dict[str, Any] = {}
    for h, n in zip(handles, names):
        seen.setdefault(n, h)
    ax.legend(seen.values(), seen.keys(), fontsize=8)


Panel = tuple[tuple[str, str], ...]


def panel_of(results: Results, case: str) -> Panel:
    """The panel of a case: the case parameters that vary between the scenario's cases,
    other than x, [report].panel first."""
    scn = results.scenario
    spec = scn.report
    missing = object()
    varying = {k for c in scn.cases for k in c.params
               if k != spec.x and len({repr(o.params.get(k, missing)) for o in scn.cases}) > 1}
    params = scn.case(case).params
    keys = sorted((k for k in varying if k in params), key=lambda k: (k != spec.panel, k))
    return tuple((k, f"{params[k]:g}" if isinstance(params[k], float) else str(params[k]))
                 for k in keys)


def _panel_title(panel: Panel) -> str:
    return ", ".join(f"{k} = {v}" for k, v in panel)


def line_points(results: Results, metric: str) -> dict[Any, dict[str, dict[Any, list[float]]]]:
    """panel value -> series -> x -> values of the ok runs (pure given results)."""
    scn = results.scenario
    spec = scn.report
    out: dict[Any, dict[str, dict[Any, list[float]]]] = {}
    for doc in results.ok_runs:
        arch = scn.arch(doc["arch"])
        params = _run_params(results, doc)
        panel = panel_of(results, doc["case"])
        if "{x}" in metric:  # one run carries every x (tps_c1..tps_c4)
            found = [(pattern_x(metric, name), name) for name in doc.get("metrics", {})]
            pairs = [(x, metric_value(doc, name)) for x, name in found if x is not None]
        else:
            pairs = [(x_value(spec, arch, params), metric_value(doc, metric))]
        for x, got in pairs:
            if x is None or got is None or not isinstance(x, (int, float, str)):
                continue  # e.g. clients = [1, 2, 3, 4]: not one x, only its tps_c{x} metrics are
            out.setdefault(panel, {}).setdefault(arch.series, {}).setdefault(x, []).append(got[0])
    return out


def _paper_points(results: Results, metric: str) -> dict[Any, dict[str, dict[Any, float]]]:
    scn = results.scenario
    out: dict[Any, dict[str, dict[Any, float]]] = {}
    for p in scn.paper_values:
        if "{x}" in metric:
            x = pattern_x(metric, p.metric)
        elif p.metric == metric:
            x = x_value(scn.report, scn.arch(p.arch), scn.case(p.case).params)
        else:
            continue
        if x is None or not isinstance(x, (int, float, str)):
            continue
        arch = scn.arch(p.arch)
        panel = panel_of(results, p.case)
        out.setdefault(panel, {}).setdefault(arch.series, {})[x] = p.value
    return out


def lines(results: Results, metric: str, out: Path) -> Path | None:
    scn = results.scenario
    points = line_points(results, metric)
    paper = _paper_points(results, metric)
    order = list(dict.fromkeys(panel_of(results, c.name) for c in scn.cases))
    panels = [p for p in order if p in points or p in paper]
    if not panels:
        return None
    series_order = list(dict.fromkeys(a.series for a in scn.archs))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    colors = plt.get_cmap("tab10")
    for ax, panel in zip(axes[0], panels):
        for j, series in enumerate(series_order):
            data = points.get(panel, {}).get(series, {})
            if data:
                xs = sorted(data)
                means = [sum(data[x]) / len(data[x]) for x in xs]
                lo = [max(0.0, m - min(data[x])) for m, x in zip(means, xs)]
                hi = [max(0.0, max(data[x]) - m) for m, x in zip(means, xs)]
                ax.errorbar(xs, means, yerr=[lo, hi], marker="o", capsize=3, label=series, color=colors(j))
            pdata = paper.get(panel, {}).get(series, {})
            if pdata:
                xs = sorted(pdata)
                ax.plot(xs, [pdata[x] for x in xs], linestyle=":", marker="D", color=colors(j),
                        markeredgecolor="black", label=f"{series} (paper)")
        if all(isinstance(x, int) for series in points.get(panel, {}).values() for x in series):
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(scn.report.x_label or scn.report.x)
        ax.set_ylabel(scn.report.y_label or metric)
        if panel:
            ax.set_title(_panel_title(panel), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _finish(fig, list(axes[0]), results, f"{scn.source or scn.id}: {metric} ({scn.better(metric)} is better)",
            suptitle=True)
    path = out / figure_name(metric, scn.report.x)
    write_whole(regular_or_absent(path, "report figure"), lambda partial: fig.savefig(partial, dpi=110))
    plt.close(fig)
    return path


def draw(results: Results, stats: dict, metric: str, out: Path) -> Path | None:
    make_dirs(out, "report figures")
    if results.scenario.report.style == "lines":
        return lines(results, metric, out)
    return bars(results, stats, metric, out)
