"""TSS charged on the run's host (cpu_cost=host, raidlab.engine.tss.compression.HostCost):
every compression and decompression holds the host's processor at its rates plus one copy of
the stripe between the caches, every parity computation at the parity rate, and the replay
reports what the host did."""

from __future__ import annotations

import dataclasses

import pytest

from raidlab import scenarios
from raidlab.errors import UsageError
from raidlab.runners import sim


def _scenario(host: str | None, tmp_path):
    """tss-table3 (cpu_cost = "host") with its [host] table's lines after the model replaced
    by `host`, or without a [host] table (None)."""
    text = scenarios.load("scenarios/tss-table3.toml").text
    assert 'cpu_cost = "host"' in text
    table = '\n[host]\nmodel = "tss-pentium-75"\n'
    replaced = table + host + "\n" if host is not None else "\n"
    return scenarios.loads(text.replace(table, replaced, 1), tmp_path / "tss-host.toml")


def _run(scn, label: str) -> dict:
    case = scn.case("var")
    case = dataclasses.replace(case, params={**case.params, "duration": "1m"})
    return sim.run_case(scn, scn.arch(label), case)


def test_craid5_pays_compression_copies_and_parity_on_the_host(tmp_path):
    doc = _run(_scenario("", tmp_path), "craid5")
    replay = doc["raw"]["replay"]
    arch, host = replay["architecture"], replay["host"]
    work = host["work"]
    stripe = 4 * 16 * 1024                                   # four 16 KiB data units
    assert work["compress"]["count"] == arch["compressions"] > 0
    assert work["decompress"]["count"] == arch["decompressions"]
    assert work["compress"]["seconds"] == pytest.approx(arch["compressions"] * stripe / 7.7e6)
    assert work["copy"]["bytes"] == (arch["compressions"] + arch["decompressions"]) * stripe
    assert work["copy"]["seconds"] == pytest.approx(work["copy"]["bytes"] / 30e6)
    assert work["parity"]["count"] > 0
    busy = host["processors"][0]["busy_s"]
    assert busy == pytest.approx(sum(w["seconds"] for w in work.values()))
    assert doc["metrics"]["host_compress_s"]["value"] == pytest.approx(work["compress"]["seconds"])


def test_a_dearer_host_slows_craid5_and_leaves_raid0_alone(tmp_path):
    cheap, dear = _scenario("", tmp_path), _scenario("cost_scale = 4", tmp_path)
    metric = "all_request_ms_per_kib"
    assert _run(dear, "craid5")["metrics"][metric]["value"] > _run(cheap, "craid5")["metrics"][metric]["value"]
    assert _run(dear, "raid0")["metrics"][metric]["value"] == _run(cheap, "raid0")["metrics"][metric]["value"]


def test_cpu_cost_host_needs_a_host(tmp_path):
    with pytest.raises(UsageError, match="needs a host"):
        _run(_scenario(None, tmp_path), "craid5")
