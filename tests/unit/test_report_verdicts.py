"""Reports lead with their verdicts: the banner first, each failing verdict saying on which
side of its band it fell, a quick size never judged; numbers printed to what was measured;
figures one panel per row, legend outside the data, the paper's points unjoined; the names
of the figures in the tables; links to NOTES.md, the scenario copy and every run file."""

from __future__ import annotations

import html.parser
import json
import shutil
import struct
from pathlib import Path

import pytest

from raidlab import scenarios
from raidlab.report import claims as claimsmod
from raidlab.report import figures, labels
from raidlab.report.render import _stat_text, write_report
from raidlab.report.results import Results, Stat
from raidlab.scenarios import Claim

REPO = Path(__file__).resolve().parents[2]
DCD = REPO / "results" / "dcd-table2" / "20261203-091103"
SA = REPO / "results" / "sa-raid-figures" / "20261126-113144"


def _ratio(**kw) -> Claim:
    return Claim(id="c", text="t", kind="ratio", metric="m", cases=("hplajw", "snake"), num="disk", den="dcd",
                 min=100.0, max=210.0, **kw)


def _stats(values: dict[tuple[str, str], float]) -> dict:
    return {(label, case, "m"): Stat.of([v], "ms") for (label, case), v in values.items()}


def test_a_failing_ratio_says_which_case_and_on_which_side_of_its_band():
    stats = _stats({("disk", "hplajw"): 219.94, ("dcd", "hplajw"): 1.0,
                    ("disk", "snake"): 150.0, ("dcd", "snake"): 1.0})
    v = claimsmod.evaluate(_ratio(), stats)
    assert v.verdict == claimsmod.FAILS
    assert v.text == "does not hold: hplajw 219.94 above 100-210"       # snake is inside: not named
    low = _stats({("disk", "hplajw"): 50.0, ("dcd", "hplajw"): 1.0, ("disk", "snake"): 150.0, ("dcd", "snake"): 1.0})
    assert claimsmod.evaluate(_ratio(), low).text == "does not hold: hplajw 50.00 below 100-210"
    inside = _stats({("disk", "hplajw"): 150.0, ("dcd", "hplajw"): 1.0, ("disk", "snake"): 150.0,
                     ("dcd", "snake"): 1.0})
    assert claimsmod.evaluate(_ratio(), inside).text == "holds"


def test_a_failing_order_names_the_pair_that_came_out_the_other_way():
    claim = Claim(id="o", text="t", kind="order", metric="m", cases=("small",), order=("raid0", "scd", "raid5"))
    stats = _stats({("raid0", "small"): 939.0, ("scd", "small"): 1630.0, ("raid5", "small"): 196.0})
    assert claimsmod.evaluate(claim, stats).text == "does not hold: small: raid0 939 below scd 1630"


def test_a_quick_size_is_not_judged_and_still_shows_what_was_measured():
    stats = _stats({("disk", "hplajw"): 15.0, ("dcd", "hplajw"): 1.0, ("disk", "snake"): 15.0, ("dcd", "snake"): 1.0})
    full = claimsmod.evaluate(_ratio(), stats)
    quick = claimsmod.evaluate(_ratio(), stats, quick=True)
    assert full.verdict == claimsmod.FAILS
    assert quick.verdict == claimsmod.NOT_JUDGED and quick.text == "not judged (quick size)"
    assert quick.measured == full.measured == "hplajw: disk/dcd = 15.00; snake: disk/dcd = 15.00"


@pytest.mark.parametrize("values, shown", [
    ([2.92, 2.92 + 6.67e-14, 2.92], "2.92 (n=3)"),              # float noise is no spread
    ([0.0, 0.0, 0.0], "0 (n=3)"),                                 # no "± 0"
    ([0.6806, 0.6812, 0.6810], "0.681 (n=3)"),                    # below the printed 0.001
    ([137.0, 172.0, 141.0], "150 ± 19 (n=3, 137..172)"),
    ([4.42, 4.45, 4.43], "4.43 ± 0.02 (n=3, 4.42..4.45)"),
    ([42.0], "42 (n=1)"),
])
def test_a_mean_is_printed_with_its_spread_only_where_the_spread_shows(values, shown):
    assert _stat_text(Stat.of(values)) == shown


def test_metrics_are_labelled_in_words_with_units():
    assert labels.axis_label("read_request_ms_per_kib", "ms") == "read time per KiB (ms)"
    assert labels.axis_label("write_mean_ms", "ms") == "mean write response time (ms)"
    assert labels.axis_label("aggregate_mb_s", "MB/s") == "aggregate bandwidth (MB/s)"
    assert labels.axis_label("read_mb_s", "") == "read bandwidth (MB/s)"     # the unit from the name
    assert labels.axis_label("tps_c{x}", "tx/s") == "transactions per second (tx/s)"


def _copy(src: Path, tmp_path: Path) -> Path:
    out = tmp_path / src.parent.name / src.name
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("report"))
    return out


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.imgs, self.meta = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a":
            self.hrefs.append(a["href"])
        elif tag == "img":
            self.imgs.append(a["src"])
        elif tag == "meta":
            self.meta.append(a)


def _png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_a_report_leads_with_its_verdicts_and_links_every_file_it_rests_on(tmp_path):
    results = _copy(DCD, tmp_path)
    md, page = write_report(results)
    text = md.read_text()
    banner = text.index("> **Verdicts on 3 claims:** ✓ 1 holds · ✗ 2 does not hold · – 0 not judged (quick size) · "
                        "? 0 not measured")
    notes = text.index("[NOTES.md](../NOTES.md)")
    assert banner < notes < text.index("## Claims") < text.index("![") < text.index("## Provenance")
    row = next(line for line in text.splitlines() if line.startswith("| two-orders-hplajw-snake |"))
    assert row.split(" | ")[1] == "✗ does not hold: hplajw 219.94 above 100-210; snake 225.01 above 100-210"
    assert "± 0 " not in text and "e-1" not in text
    assert "| hplajw | dcd-logical | 0.681 (n=3) | 0.65 | 1.05 |" in text   # sd 0.00035 below 0.001

    parser = _Links()
    parser.feed(page.read_text())
    assert {"name": "viewport", "content": "width=device-width, initial-scale=1"} in parser.meta
    out = md.parent
    linked = {(out / href).resolve() for href in parser.hrefs}
    assert all(p.is_file() for p in linked), [p for p in linked if not p.is_file()]
    runs = {p.resolve() for p in (results / "runs").glob("*.json")}
    assert len(runs) == 18 and runs <= linked
    assert (results / "NOTES.md").resolve() in linked and (results / "scenario.toml").resolve() in linked
    assert '<td class="verdict fails">' in page.read_text() and '<td class="verdict holds">' in page.read_text()
    # every figure is one column wide: 8 inches at 110 dpi
    assert parser.imgs and all(_png_size(out / src)[0] == 880 for src in parser.imgs)


def test_a_quick_size_report_judges_nothing_and_draws_no_paper_points(tmp_path):
    results = _copy(DCD, tmp_path)
    manifest = json.loads((results / "manifest.json").read_text())
    (results / "manifest.json").write_text(json.dumps({**manifest, "quick": True}))
    [md] = write_report(results, formats=("md",))
    text = md.read_text()
    assert "· – 3 not judged (quick size) ·" in text and "**Quick size**" in text
    claims = text.split("## Claims", 1)[1].split("\n## ", 1)[0]
    assert "does not hold" not in claims and claims.count("– not judged (quick size)") == 3
    assert "ours / paper" not in text and "paper (at its size)" in text
    loaded = Results(results, scenarios.load(results / "scenario.toml", check_references=False),
                     {"quick": True}, [])
    assert figures._paper_value(loaded, "disk", "hplajw", "write_mean_ms") is None


def test_fewer_repetitions_than_the_scenario_are_said_beside_the_verdicts(tmp_path):
    results = _copy(DCD, tmp_path)
    for run in (results / "runs").glob("*--r[23].json"):
        run.unlink()
    manifest = json.loads((results / "manifest.json").read_text())
    manifest["planned_runs"] = [r for r in manifest["planned_runs"] if r.endswith("--r1")]
    (results / "manifest.json").write_text(json.dumps(manifest))
    [md] = write_report(results, formats=("md",))
    text = md.read_text()
    assert text.index("**1 of the scenario's 3 repetitions**") < text.index("## Claims")


def test_grouped_bars_and_their_tables_name_an_arch_alike(tmp_path):
    results = _copy(SA, tmp_path)
    [md] = write_report(results, formats=("md",), scenario_file=REPO / "scenarios" / "sa-raid-figures.toml")
    text = md.read_text()
    measured, archs = text.split("## Architectures", 1)
    # the figure draws series raid0, sa1.. over groups b1-c1-d1-e1..: the table is laid out
    # the same way, and the claims name a bar by its series and group
    assert "| case | configuration | raid0 | sa1 | sa2 | sa3 |" in measured
    assert "| 256m | b1-c1-d1-e1 | 46 (n=3); paper 46 |" in measured
    assert "write_mb_s in 256m: 1.075 <= raid0 b1-c1-d1-e1/raid0 b8-c8-d8-e8 <= 1.3" in measured
    assert "raid0-b1c1d1e1" not in measured
    assert "| raid0-b1c1d1e1 | raid0 b1-c1-d1-e1 |" in archs      # the label, and how it is shown
    # three cases, one panel per row: taller than wide, at the one column's width
    width, height = _png_size(md.parent / "figures" / "read_mb_s.png")
    assert width == 880 and height > width


def test_line_figures_draw_the_paper_unjoined_and_one_legend_outside_the_panels(tmp_path, monkeypatch):
    scn = scenarios.load(REPO / "scenarios" / "raidx-fig8-clients.toml")
    runs = [{"arch": "raidx-mem", "case": case, "status": "ok",
             "metrics": {"aggregate_mb_s": {"value": float(n), "unit": "MB/s"}}}
            for n, case in ((1, "lr-c1"), (2, "lr-c2"), (16, "lr-c16"), (1, "lw-c1"), (16, "lw-c16"))]
    res = Results(path=tmp_path, scenario=scn, manifest={}, runs=runs)
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, out, name: drawn.append(fig) or out / name)
    figures.lines(res, "aggregate_mb_s", tmp_path)
    [fig] = drawn
    axes = fig.get_axes()
    assert len(axes) >= 2 and len({round(ax.get_position().x0, 3) for ax in axes}) == 1   # one per row
    paper = [line for ax in axes for line in ax.get_lines() if line.get_label().endswith("(paper)")]
    assert paper and all(line.get_linestyle() == "None" for line in paper)
    assert all(ax.get_legend() is None for ax in axes) and len(fig.legends) == 1
    assert axes[0].get_xscale() == "log"                              # 1..16 clients
    assert axes[0].get_ylabel() == "aggregate bandwidth (MB/s)"
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "raidx-mem: RAID-x (images in memory)" in names              # the tables' label first
