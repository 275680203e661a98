"""Reports as a reader sees them: `raidlab report` on a copy of a committed results
directory, the HTML opened in headless Chromium at 1400 and 800 px wide.

What is checked is what the layout gives, not the markup: a copy of the report with a
small script appended (the page itself is unchanged) measures, after load, where the
verdict banner lies and how wide each figure is displayed, and Chromium's --dump-dom hands
the measurements back. The banner must lie in the first screen; every figure must be
displayed at 0.6 of its natural width or more, where its axis text (10 pt at 110 dpi) stays
readable; the page must not scroll sideways (wide tables scroll in their own box). The
screenshots of the first screen stay in the test's tmp directory.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.live]

REPO = Path(__file__).resolve().parents[2]
HEIGHT = 900
READABLE = 0.6  # displayed / natural width of a figure

MEASURE = """<script>
window.addEventListener('load', function () {
  var found = {width: window.innerWidth, height: window.innerHeight,
               scrollWidth: document.documentElement.scrollWidth,
               viewport: !!document.querySelector('meta[name=viewport]'), images: []};
  var banner = document.getElementById('verdicts');
  if (banner) { var b = banner.getBoundingClientRect(); found.banner = {top: b.top, bottom: b.bottom}; }
  var claims = document.querySelector('td.verdict');
  if (claims) { found.firstVerdictTop = claims.getBoundingClientRect().top; }
  document.querySelectorAll('img').forEach(function (img) {
    found.images.push({src: img.getAttribute('src'), natural: img.naturalWidth,
                       shown: img.getBoundingClientRect().width, complete: img.complete});
  });
  var out = document.createElement('pre');
  out.id = 'raidlab-measure';
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
});
</script>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium not installed (scripts/system-packages.txt; ./scripts/setup-system.sh)")
    return found


def _browse(chromium: str, profile: Path, width: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", f"--user-data-dir={profile}", f"--window-size={width},{HEIGHT}",
                           "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("results, extra", [
    ("dcd-table2/20261203-091103", []),
    ("sa-raid-figures/20261126-113144", ["--scenario", str(REPO / "scenarios" / "sa-raid-figures.toml")]),
])
def test_the_verdicts_are_in_the_first_screen_and_every_figure_is_readable(tmp_path, raidlab_cmd, results, extra):
    chromium = _chromium()
    copy = tmp_path / results
    shutil.copytree(REPO / "results" / results, copy, ignore=shutil.ignore_patterns("report"))
    proc = subprocess.run([*raidlab_cmd, "report", str(copy), *extra], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    _check_in_the_browser(chromium, tmp_path, copy / "report" / "report.html")


# Committed reports, one per paper, as a reader opens them.
COMMITTED = ["tss-table3/20261126-094556/report", "raidx-fig8-clients/20261126-180330/report",
             "sa-raid-figures/20261126-113144/report", "dcd-table2/20261126-140806/report",
             "vcraid-table2-postmark/paper-conditions-all-cases"]


@pytest.mark.parametrize("report", COMMITTED)
def test_the_committed_reports_lead_with_their_verdicts_and_readable_figures(tmp_path, report):
    """The same reading of the reports committed under results/, as they are."""
    chromium = _chromium()
    copy = tmp_path / "report"
    shutil.copytree(REPO / "results" / report, copy)
    _check_in_the_browser(chromium, tmp_path, copy / "report.html")


def _check_in_the_browser(chromium: str, tmp_path: Path, page: Path) -> None:
    """The first-screen screenshots and the measured layout at 1400 and 800 px (module doc)."""
    measured_page = page.with_name("measure.html")
    measured_page.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))

    for width in (1400, 800):
        shot = tmp_path / f"first-screen-{width}.png"
        proc = _browse(chromium, tmp_path / "profile", width, f"--screenshot={shot}", page.as_uri())
        assert shot.is_file(), proc.stderr[-2000:]
        assert struct.unpack(">II", shot.read_bytes()[16:24]) == (width, HEIGHT)

        proc = _browse(chromium, tmp_path / "profile", width, "--dump-dom", measured_page.as_uri())
        match = re.search(r'<pre id="raidlab-measure">([^<]*)</pre>', proc.stdout)
        assert match, f"no measurement at {width} px: {proc.stderr[-2000:]}"
        found = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
        (tmp_path / f"layout-{width}.json").write_text(json.dumps(found, indent=1))

        assert found["width"] == width and found["viewport"]
        # the banner, then the claims' verdicts, and the banner whole within the first screen
        assert 0 <= found["banner"]["top"] < found["banner"]["bottom"] <= found["height"], found
        assert found["firstVerdictTop"] > found["banner"]["bottom"]
        assert found["scrollWidth"] <= width, f"the page scrolls sideways at {width} px: {found['scrollWidth']}"
        assert found["images"], "no figure in the report"
        for image in found["images"]:
            assert image["complete"] and image["natural"] > 0, image
            assert image["shown"] / image["natural"] >= READABLE, (width, image)
