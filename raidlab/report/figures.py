"""Figures drawn like the papers': grouped bars (Table 2, Figs. 7-8) or lines of a metric
against a parameter (TPS against clients, Figs. 4-6), with matplotlib.

Why like the paper: the point of a reproduction report is to be put beside the original
page. Bars: one group per case (PostMark small/medium/large, untar/copy/remove), one bar per
architecture, height = mean over repetitions, error bar = min..max of the repetitions (with
three runs a standard deviation says little; the range shows every run). The paper's value,
where it published one, is a black diamond on the same bar. Lines: one line per series (an
architecture, or for a sweep the arch entries sharing a `series`), same error bars, one
panel per set of case parameters other than x (Fig. 4a/b/c = write ratio), titled by them
with [report].panel first: cases that differ in anything but x are never averaged into one
line (Fig. 5's two write ratios at 0.5 KB are two panels, not one). The paper's points are
markers only: the paper printed values at some x (RAID-x's Table 4 at 1 and 16 clients), and
a line between them would draw values it never gave.

Why drawn this way, for a reader on a screen: a report is read in a browser from 800 px
wide up, so every figure is one column of panels, one panel per row, 8 inches (880 px)
wide whatever the number of panels, and its text stays readable where the page shows it
whole. One legend per figure, below the panels and outside their data. An axis whose values
span more than LOG_SPAN (a factor of 10) is logarithmic, so a column of 20 tx/s is not
flattened under one of 1,630. Axes are labelled in words with units (raidlab.report.labels),
and architectures named as the report's tables name them. At a quick size the paper's
points are left out: they are not comparable with the run, and drawing them would invite
the comparison.

The Agg backend is used: reports are made on headless hosts and in CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402

from raidlab.outputs import make_dirs, regular_or_absent, write_whole  # noqa: E402
from raidlab.report import labels  # noqa: E402
from raidlab.report.results import Results, Stat, metric_value  # noqa: E402
from raidlab.scenarios import ARCH_X_FIELDS, pattern_x, x_value  # noqa: E402

WIDTH_IN = 8.0        # every figure: 8 inches at DPI = 880 px, one panel per row
PANEL_IN = 2.9        # height of one panel
DPI = 110
LOG_SPAN = 10.0       # an axis whose positive values span more than this factor is logarithmic


def _run_params(results: Results, doc: dict) -> dict:
    params = dict(results.scenario.case(doc["case"]).params)
    if isinstance(doc.get("params"), dict):
        params.update(doc["params"])
    return params


def _paper_value(results: Results, label: str, case: str, metric: str) -> float | None:
    if results.manifest.get("quick"):
        return None  # a quick size is not the paper's: its points are not drawn beside ours
    for p in results.scenario.paper_values:
        if p.arch == label and p.case == case and p.metric == metric:
            return p.value
    return None


def _unit(stats: dict, metric: str) -> str:
    return next((s.unit for (_l, _c, m), s in stats.items() if m == metric and s.unit), "")


def _y_label(results: Results, metric: str, unit: str) -> str:
    """The scenario's y_label when it names one quantity for the whole figure, else words
    with a unit for the metric itself."""
    spec = results.scenario.report
    if spec.y_label and len(spec.metrics) <= 1:
        return spec.y_label
    return labels.axis_label(metric, unit)


def _title(results: Results, metric: str) -> str:
    scn = results.scenario
    return f"{scn.source or scn.id}: {labels.metric_words(metric)} ({scn.better(metric)} is better)"


def _figure(rows: int) -> tuple[Any, list]:
    fig, axes = plt.subplots(rows, 1, figsize=(WIDTH_IN, 1.2 + PANEL_IN * rows), squeeze=False,
                             layout="constrained")
    return fig, [row[0] for row in axes]


def _legend_name(results: Results, series: str) -> str:
    """A series as the legend shows it: the [[arch]] label the tables use, with the series'
    own words when they differ (`raidx-mem: RAID-x (images in memory)`)."""
    owners = [a.label for a in results.scenario.archs if a.series == series]
    if len(owners) == 1 and owners[0] != series:
        return f"{owners[0]}: {series}"
    return series


def _log_if_wide(ax, axis: str = "y") -> None:
    """A log scale on `axis` where its positive values span more than LOG_SPAN."""
    if axis == "y":
        values = [abs(float(y)) for line in ax.get_lines() for y in line.get_ydata() if y and y > 0]
        values += [p.get_height() for p in ax.patches if p.get_height() > 0]
    else:
        values = [float(x) for line in ax.get_lines() for x in line.get_xdata()
                  if isinstance(x, (int, float)) and x > 0]
    if not values or max(values) / min(values) <= LOG_SPAN:
        return
    plain = FuncFormatter(lambda v, _pos: f"{v:,.10g}")
    if axis == "y":  # ticks at 1, 2 and 5 of each decade, written as numbers (20, 50, 100)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:  # x: the values drawn are the ticks (1, 2, 4, 8, 16 clients)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(sorted(set(values))))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(plain)


def _finish(fig, axes: list, results: Results, title: str, suptitle: bool = True) -> None:
    """Title (marked when the runs were quick-size), log y axes where the values span more
    than LOG_SPAN, one legend for the figure below its panels."""
    if results.manifest.get("quick"):
        title += "\n[quick size: not comparable with the paper, whose points are not drawn]"
    for ax in axes:
        _log_if_wide(ax, "y")
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, handle)
    # the series first, the paper's points after them (a legend in rows of whole names)
    names = sorted(handles, key=lambda n: n == "paper" or n.endswith("(paper)"))
    if names:
        widest = max(len(n) for n in names)
        fig.legend([handles[n] for n in names], names, loc="outside lower center",
                   ncol=max(1, min(len(names), 3 if widest <= 26 else 2 if widest <= 48 else 1)),
                   fontsize=9, frameon=False)
    if suptitle:
        fig.suptitle(title, fontsize=11)
    else:
        axes[0].set_title(title, fontsize=11)


def _save(fig, out: Path, name: str) -> Path:
    path = out / name
    write_whole(regular_or_absent(path, "report figure"), lambda partial: fig.savefig(partial, dpi=DPI))
    plt.close(fig)
    return path


def _bar_err(stat: Stat) -> tuple[float, float]:
    return max(0.0, stat.mean - stat.min), max(0.0, stat.max - stat.mean)  # equal runs: no rounding below 0


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
    unit = _unit(stats, metric)
    fig, axes = _figure(len(cases))
    width = 0.8 / len(series)
    colors = plt.get_cmap("tab10")
    for ax, case in zip(axes, cases):
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
                        down, up = _bar_err(stat)
                        lo.append(down)
                        hi.append(up)
                    paper = _paper_value(results, a.label, case, metric)
                    if paper is not None:
                        px.append(at)
                        py.append(paper)
            ax.bar(xs, heights, width * 0.92, yerr=[lo, hi] if xs else None, capsize=2, label=name, color=colors(j))
            if px:
                ax.scatter(px, py, marker="D", color="black", zorder=3, s=18, label="paper")
        ax.set_xticks(range(len(groups)), [str(g) for g in groups], fontsize=9)
        ax.set_xlabel(spec.x_label or spec.x)
        ax.set_ylabel(_y_label(results, metric, unit))
        ax.set_title(case, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    _finish(fig, axes, results, _title(results, metric))
    return _save(fig, out, f"{metric}.png")


def bars(results: Results, stats: dict, metric: str, out: Path) -> Path | None:
    scn = results.scenario
    if scn.report.x in ARCH_X_FIELDS:
        return grouped_bars(results, stats, metric, out)
    cases = [c.name for c in scn.cases if any((a.label, c.name, metric) in stats
                                              or _paper_value(results, a.label, c.name, metric) is not None
                                              for a in scn.archs)]
    shown = [a.label for a in scn.archs if any((a.label, c, metric) in stats
                                               or _paper_value(results, a.label, c, metric) is not None
                                               for c in cases)]
    if not cases:
        return None
    unit = _unit(stats, metric)
    fig, [ax] = _figure(1)
    width = 0.8 / len(shown)
    colors = plt.get_cmap("tab10")
    for j, label in enumerate(shown):
        xs, heights, lo, hi, px, py = [], [], [], [], [], []
        for i, case in enumerate(cases):
            at = i - 0.4 + width * (j + 0.5)
            stat: Stat | None = stats.get((label, case, metric))
            if stat is not None:
                xs.append(at)
                heights.append(stat.mean)
                down, up = _bar_err(stat)
                lo.append(down)
                hi.append(up)
            paper = _paper_value(results, label, case, metric)
            if paper is not None:
                px.append(at)
                py.append(paper)
        ax.bar(xs, heights, width * 0.92, yerr=[lo, hi] if xs else None, capsize=3, label=label, color=colors(j))
        if px:
            ax.scatter(px, py, marker="D", color="black", zorder=3, s=22, label="paper")
    ax.set_xticks(range(len(cases)), cases)
    ax.set_ylabel(_y_label(results, metric, unit))
    ax.grid(axis="y", alpha=0.3)
    _finish(fig, [ax], results, _title(results, metric))
    return _save(fig, out, f"{metric}.png")


def figure_name(metric: str, x: str) -> str:
    """The file of a metric's figure; a pattern (tps_c{x}) is named by what it is drawn
    against: tps_c_by_clients.png."""
    if "{x}" not in metric:
        return f"{metric}.png"
    head = metric.split("{x}")[0].rstrip("_") or "metric"
    return f"{head}_by_{x or 'x'}.png"


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


def paper_points(results: Results, metric: str) -> dict[Any, dict[str, dict[Any, float]]]:
    """panel value -> series -> x -> the paper's value (none at a quick size)."""
    scn = results.scenario
    out: dict[Any, dict[str, dict[Any, float]]] = {}
    if results.manifest.get("quick"):
        return out
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


def _unit_of_runs(results: Results, metric: str) -> str:
    for doc in results.ok_runs:
        for name, entry in (doc.get("metrics") or {}).items():
            if (name == metric or ("{x}" in metric and pattern_x(metric, name) is not None)) \
                    and isinstance(entry, dict) and entry.get("unit"):
                return str(entry["unit"])
    return ""


def lines(results: Results, metric: str, out: Path) -> Path | None:
    scn = results.scenario
    points = line_points(results, metric)
    paper = paper_points(results, metric)
    order = list(dict.fromkeys(panel_of(results, c.name) for c in scn.cases))
    panels = [p for p in order if p in points or p in paper]
    if not panels:
        return None
    unit = _unit_of_runs(results, metric)
    series_order = list(dict.fromkeys(a.series for a in scn.archs))
    fig, axes = _figure(len(panels))
    colors = plt.get_cmap("tab10")
    for ax, panel in zip(axes, panels):
        for j, series in enumerate(series_order):
            name = _legend_name(results, series)
            data = points.get(panel, {}).get(series, {})
            if data:
                xs = sorted(data)
                means = [sum(data[x]) / len(data[x]) for x in xs]
                lo = [max(0.0, m - min(data[x])) for m, x in zip(means, xs)]
                hi = [max(0.0, max(data[x]) - m) for m, x in zip(means, xs)]
                ax.errorbar(xs, means, yerr=[lo, hi], marker="o", capsize=3, label=name, color=colors(j))
            pdata = paper.get(panel, {}).get(series, {})
            if pdata:
                xs = sorted(pdata)
                ax.plot(xs, [pdata[x] for x in xs], linestyle="none", marker="D", markersize=7,
                        color=colors(j), markeredgecolor="black", label=f"{name} (paper)")
        if all(isinstance(x, int) for series in points.get(panel, {}).values() for x in series):
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        _log_if_wide(ax, "x")
        ax.set_xlabel(scn.report.x_label or scn.report.x)
        ax.set_ylabel(_y_label(results, metric, unit) if scn.report.y_label else labels.axis_label(metric, unit))
        if panel:
            ax.set_title(_panel_title(panel), fontsize=10)
        ax.grid(alpha=0.3)
    _finish(fig, axes, results, _title(results, metric))
    return _save(fig, out, figure_name(metric, scn.report.x))


def draw(results: Results, stats: dict, metric: str, out: Path) -> Path | None:
    make_dirs(out, "report figures")
    if results.scenario.report.style == "lines":
        return lines(results, metric, out)
    return bars(results, stats, metric, out)

