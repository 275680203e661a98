"""The site of the reproduction (`raidlab report --site`), read in a real browser.

A site is built from a results root holding two papers' current results (copied from the
committed ones, with a current.toml naming them), then every page of it (the index, each
paper's page, each scenario's full report) is opened in headless Chromium driven by
Selenium through chromium-driver: each page loads with a title, every figure decodes (an
image complete with a natural width), the browser's console shows no error, and every claim
row has a verdict. A screenshot of the index is kept under build/test-artifacts/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from raidlab.report import claimtable
from raidlab.report.site import write_site

pytestmark = [pytest.mark.live]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "test-artifacts"
SCENARIOS = ("dcd-table2", "tss-table3")  # one paper each, one with a headline and its sweep
EXTRAS = ("dcd-then-and-now-replay",)  # a scenario without claims, shown on its paper's page


def _driver():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (pip install -e '.[test]')")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.skip("chromium or chromium-driver not installed (scripts/system-packages.txt)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
                "--allow-file-access-from-files"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(chromedriver), options=options)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A site built from the committed current results of SCENARIOS."""
    root = tmp_path_factory.mktemp("site")
    results, scns = root / "results", root / "scenarios"
    scns.mkdir()
    rows = {r.scenario: r for r in claimtable.rows(REPO / "results", REPO / "scenarios")}
    entries = []
    for sid in SCENARIOS:
        row = rows[sid]
        shutil.copy(REPO / "scenarios" / f"{sid}.toml", scns / f"{sid}.toml")
        for source in row.sources:
            shutil.copytree(REPO / "results" / source, results / source, ignore=shutil.ignore_patterns("report"))
        entry = [f'[[current]]', f'scenario = "{sid}"',
                 "results = [" + ", ".join(f'"{s}"' for s in row.sources) + "]"]
        if row.headline:
            entry.append(f'headline = "{row.headline}"')
        if row.sweep:
            (results / row.sweep).mkdir(parents=True)
            shutil.copy(REPO / "results" / row.sweep / "sweep.json", results / row.sweep / "sweep.json")
            entry.append(f'sweep = "{row.sweep}"')
        entries.append("\n".join(entry))
    (results / "current.toml").write_text("\n\n".join(entries) + "\n")
    for row in claimtable.extras(REPO / "results", REPO / "scenarios"):
        if row.scenario in EXTRAS:
            shutil.copy(REPO / "scenarios" / f"{row.scenario}.toml", scns / f"{row.scenario}.toml")
            [source] = row.sources
            shutil.copytree(REPO / "results" / source, results / source, ignore=shutil.ignore_patterns("report"))
    write_site(results, scns, root / "site")
    return root / "site"


def _pages(site: Path) -> list[Path]:
    return [site / "index.html", *sorted(p for p in site.glob("*.html") if p.name != "index.html"),
            *sorted(site.glob("*/*/report/report.html"))]


def test_the_site_has_an_index_a_page_per_paper_and_a_report_per_scenario(site):
    pages = _pages(site)
    assert (site / "index.html") in pages
    assert len([p for p in site.glob("*.html") if p.name != "index.html"]) == len(SCENARIOS)
    assert len(list(site.glob("*/*/report/report.html"))) == len(SCENARIOS) + len(EXTRAS)
    assert list(site.glob("*/*/raw/**/runs/*.json")), "no raw run file copied"
    # the extra sits on its paper's page, after the claims, under its own heading
    dcd = (site / "dcd.html").read_text()
    assert dcd.index("Extras, without claims") > dcd.index("dcd-table2")
    assert "DCD then and now (extra)" in dcd
    assert (site / "dcd" / "dcd-then-and-now-replay" / "report" / "report.html").is_file()


def test_every_page_loads_every_figure_decodes_no_console_error_every_claim_judged(site):
    driver = _driver()
    try:
        figures = claims = 0
        for page in _pages(site):
            driver.get(page.as_uri())
            assert driver.title, f"{page}: no title"
            images = driver.execute_script(
                "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])")
            for src, complete, width in images:
                assert complete and width > 0, f"{page}: figure {src} does not decode"
            figures += len(images)
            rows = driver.execute_script(
                "return Array.from(document.querySelectorAll('tbody tr'))"
                ".filter(r => r.querySelector('td.verdict')).map(r => r.querySelector('td.verdict').textContent)")
            assert all(text.strip() for text in rows), f"{page}: a claim row without a verdict"
            claims += len(rows)
            if page.parent == site:  # the site's own pages: every link leads to a file of the site
                hrefs = driver.execute_script(
                    "return Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))")
                for href in hrefs:
                    assert (site / href).is_file(), f"{page}: link {href} leads nowhere"
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == [], f"{page}: console errors {errors}"
            if page.name == "index.html" and page.parent == site:
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                assert driver.save_screenshot(str(ARTIFACTS / "site-index.png"))
        assert figures > 0 and claims > 0
    finally:
        driver.quit()
    assert (ARTIFACTS / "site-index.png").stat().st_size > 0
