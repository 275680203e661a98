"""Line figures: one panel per set of case parameters other than x, so runs of different
cases are never averaged into one point (Fig. 5 has two write ratios at each request size)."""

from __future__ import annotations

from pathlib import Path

from raidlab import scenarios
from raidlab.report.figures import line_points, panel_of
from raidlab.report.results import Results

REPO = Path(__file__).resolve().parents[2]


def _run(arch: str, case: str, **metrics: float) -> dict:
    return {"arch": arch, "case": case, "status": "ok",
            "metrics": {k: {"value": v, "unit": "tx/s"} for k, v in metrics.items()}}


def _results(name: str, runs: list[dict]) -> Results:
    scn = scenarios.load(REPO / "scenarios" / name)
    return Results(path=Path("/nonexistent"), scenario=scn, manifest={}, runs=runs)


def test_cases_sharing_the_panel_parameter_stay_apart():
    res = _results("vcraid-fig5-scd-mcd.toml", [
        _run("scd", "w0.5-512", tps_c1=10.0), _run("scd", "w0.9-512", tps_c1=20.0),
        _run("scd", "w0.5-512", tps_c1=12.0)])
    points = line_points(res, "tps_c{x}")
    a, b = panel_of(res, "w0.5-512"), panel_of(res, "w0.9-512")
    assert a == (("request_size", "512"), ("write_ratio", "0.5"))   # [report].panel first
    assert points == {a: {"scd": {1: [10.0, 12.0]}}, b: {"scd": {1: [20.0]}}}


def test_cases_differing_only_in_x_share_a_panel():
    # Fig. 6 sweeps an arch option (ram_buffer): one panel per case (its server I/O), five x values.
    res = _results("vcraid-fig6-ram-buffer.toml", [
        _run("scd-1M", "w0.5-c2", tps=5.0), _run("scd-16M", "w0.5-c2", tps=7.0)])
    assert line_points(res, "tps") == {(("io", "buffered"),): {"scd": {1.0: [5.0], 16.0: [7.0]}}}


def test_figures_are_named_readably_get_a_log_axis_across_magnitudes_and_say_quick():
    import types

    import matplotlib.pyplot as plt

    from raidlab.report.figures import _finish, figure_name

    assert figure_name("tps_c{x}", "clients") == "tps_c_by_clients.png"
    assert figure_name("write_mean_ms", "") == "write_mean_ms.png"
    # log from a span of more than 10x: 20 and 1,630 tx/s (VC-RAID Table 2) get one; 38.4..46 does not
    for heights, quick, log in (([130.0, 0.7], False, True), ([1630.0, 20.0], False, True),
                                ([46.0, 38.4], True, False), ([9.0, 1.0], False, False)):
        fig, ax = plt.subplots()
        ax.bar(range(len(heights)), heights)
        _finish(fig, [ax], types.SimpleNamespace(manifest={"quick": quick}), "T", suptitle=False)
        assert (ax.get_yscale() == "log") is log
        assert ("quick size" in ax.get_title()) is quick
        plt.close(fig)
