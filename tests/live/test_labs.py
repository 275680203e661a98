"""Every lab in labs/ runs as written, and every number its text promises is checked against
what its commands printed.

How a lab runs: its `sh` blocks are taken from the Markdown, in order, and run in one bash
with `set -euo pipefail` from the repository's directory, as a student would type them, in a
fresh home: HOME and RAIDLAB_HOME are directories of the test (the labs set neither; raidlab's
own default home is the user's), the venv's raidlab first on PATH. A marker echoed before
each block splits the output by block. A block belongs to the step of the numbered item
("3. ...") above it in the lab's steps (blocks before the first item: step 0); a step's
output is that of its blocks.

How the promises are checked: beside each sentence of a lab that promises a number, an
ordering or a message, the lab carries an HTML comment (invisible once the Markdown is
rendered), read here:

    <!-- check: step(1, r"RMW (\\d+)") == 1 -->
    <!-- let: disk = step(1, r"\\nwrite +\\d+ +([\\d.]+)") -->

`check:` is a Python expression that must hold; `let:` names a value for the checks after
it in the same lab. Both are evaluated in order, with no builtins but these:

    step(n, regex)    group 1 of the regex's first match in step n's output, as a number
    last(n, regex)    the same, of its last match
    every(n, regex)   group 1 of every match, as numbers (a list)
    words(n, regex)   group 1 of every match, as text (a list)
    count(n, regex)   how many times the regex matches
    span(n, regex)    seconds from the first to the last line of step n that matches the
                      regex and starts with a time of day (HH:MM:SS, raidlab's progress lines)
    min, max, abs, len, sum, all, any, zip

A regex that does not match, or a check that does not hold, fails the lab's test with the
expression and the end of the step's output. The promise and its check sit side by side in
the lab, so neither changes without the other in view; every lab has checks, and every
check names steps the lab has (test_every_lab_checks_what_it_promises, which runs without
root). test_a_check_that_does_not_hold_fails shows the checks can fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab_leftovers import leftovers

REPO = Path(__file__).resolve().parents[2]
LABS = REPO / "labs"
VENV_BIN = Path(sys.executable).parent
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
STEP_ITEM = re.compile(r"^(\d+)\. ", re.M)
OBSERVATIONS = re.compile(r"^## What", re.M)
COMMENT = re.compile(r"<!--\s*(check|let):\s*(.*?)\s*-->", re.S)
MARK = "@@lab-block "
CLOCK = re.compile(r"^(\d\d):(\d\d):(\d\d) ")


def lab_paths() -> list[Path]:
    return sorted(LABS.glob("[0-9][0-9]-*.md"))


def lab_blocks(path: Path) -> list[tuple[int, str]]:
    """(step, commands) of each `sh` block of the lab, in order."""
    text = path.read_text()
    end = OBSERVATIONS.search(text)
    steps_part = text[:end.start()] if end else text
    blocks = []
    for match in BLOCK.finditer(steps_part):
        items = STEP_ITEM.findall(steps_part, 0, match.start())
        blocks.append((int(items[-1]) if items else 0, match.group(1)))
    return blocks


def lab_checks(path: Path) -> list[tuple[str, str]]:
    """("check" or "let", expression) of every check comment of the lab, in order."""
    return [(kind, re.sub(r"\s*\n\s*", " ", expr)) for kind, expr in COMMENT.findall(path.read_text())]


class LabOutput:
    """The output of a lab's steps, and the functions its checks use."""

    def __init__(self, steps: dict[int, str]):
        self.steps = steps

    def text(self, n: int) -> str:
        assert n in self.steps, f"the lab has no step {n} with commands (steps: {sorted(self.steps)})"
        return self.steps[n]

    def _found(self, n: int, pattern: str) -> list[str]:
        found = re.findall(pattern, self.text(n), re.M)
        assert found, f"step {n}: {pattern!r} not in its output:\n{self.text(n)[-2500:]}"
        return found

    @staticmethod
    def _number(value) -> float:
        value = value[0] if isinstance(value, tuple) else value
        return float(value.replace(",", ""))

    def step(self, n: int, pattern: str) -> float:
        return self._number(self._found(n, pattern)[0])

    def last(self, n: int, pattern: str) -> float:
        return self._number(self._found(n, pattern)[-1])

    def every(self, n: int, pattern: str) -> list[float]:
        return [self._number(v) for v in self._found(n, pattern)]

    def words(self, n: int, pattern: str) -> list[str]:
        return [v[0] if isinstance(v, tuple) else v for v in self._found(n, pattern)]

    def count(self, n: int, pattern: str) -> int:
        return len(re.findall(pattern, self.text(n), re.M))

    def span(self, n: int, pattern: str) -> float:
        times = []
        for line in self.text(n).splitlines():
            clock = CLOCK.match(line)
            if clock and re.search(pattern, line):
                h, m, s = (int(x) for x in clock.groups())
                times.append(h * 3600 + m * 60 + s)
        assert times, f"step {n}: no timed line matches {pattern!r}:\n{self.text(n)[-2500:]}"
        return (times[-1] - times[0]) % 86400

    def namespace(self) -> dict:
        functions = {"step": self.step, "last": self.last, "every": self.every, "words": self.words,
                     "count": self.count, "span": self.span}
        return {"__builtins__": {}, **functions, "min": min, "max": max, "abs": abs, "len": len, "sum": sum,
                "all": all, "any": any, "zip": zip}


def check_lab(path: Path, output: LabOutput) -> int:
    """Evaluate the lab's checks on its output; the number of checks that held."""
    names = output.namespace()
    held = 0
    for kind, expr in lab_checks(path):
        if kind == "let":
            name, _, value = expr.partition("=")
            assert name.strip().isidentifier(), f"{path.name}: `let: {expr}` names no value"
            names[name.strip()] = eval(value.strip(), names)  # noqa: S307 - the repository's own labs
            continue
        if not eval(expr, names):  # noqa: S307
            values = [f"{name} = {value!r}" for name, value in names.items()
                      if not callable(value) and name != "__builtins__"]
            steps = sorted({int(n) for n in re.findall(r"\b(?:step|last|every|words|count|span)\((\d+),", expr)})
            shown = [f"--- step {n}:\n{output.steps.get(n, '')[-2000:]}" for n in steps]
            raise AssertionError("\n".join([f"{path.name}: this check does not hold: {expr}", *values, *shown]))
        held += 1
    return held


def run_lab(path: Path, tmp_path: Path, timeout: float) -> LabOutput:
    """Run every `sh` block of lab `path` in order in one bash, in a fresh home."""
    home, raidlab_home = tmp_path / "home", tmp_path / "raidlab"
    home.mkdir(parents=True)
    blocks = lab_blocks(path)
    script = ["set -euo pipefail", f"cd {REPO}"]
    for k, (_step, commands) in enumerate(blocks):
        script += [f"echo '{MARK}{k}'", commands]
    script.append(f"echo '{MARK}end'")
    env = {k: v for k, v in os.environ.items() if k not in ("RAIDLAB_HOME", "XDG_STATE_HOME")}
    env.update(HOME=str(home), RAIDLAB_HOME=str(raidlab_home), COLUMNS="200",
               PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}")
    try:
        proc = subprocess.run(["bash", "-c", "\n".join(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    finally:
        labs = raidlab_home / "labs"
        left = sorted(labs.glob("*")) if labs.exists() else []
        # a failed step leaves its array, then its cluster (down refuses while an array runs)
        for command in ("destroy", "cluster down"):
            for lab in left:
                subprocess.run([str(VENV_BIN / "raidlab"), *command.split(), lab.name], env=env,
                               capture_output=True, timeout=300)
    assert proc.returncode == 0 and f"{MARK}end" in proc.stdout, \
        f"{path.name} stopped (rc {proc.returncode}):\n{proc.stdout[-5000:]}"
    parts = proc.stdout.split(MARK)[1:-1]
    assert len(parts) == len(blocks)
    steps: dict[int, str] = {}
    for (step, _commands), part in zip(blocks, parts):
        steps[step] = steps.get(step, "") + part.split("\n", 1)[-1]
    assert not leftovers(raidlab_home), leftovers(raidlab_home)
    return LabOutput(steps)


def test_every_lab_is_listed_and_has_commands_and_an_instructor_file():
    labs = lab_paths()
    readme = (LABS / "README.md").read_text()
    assert len(labs) >= 6
    for lab in labs:
        assert f"]({lab.name})" in readme, lab.name
        assert lab_blocks(lab), lab.name
        assert (LABS / "instructor" / lab.name).exists(), lab.name
        text = lab.read_text()
        for section in ("## Steps", "## Questions", "## Extensions"):
            assert section in text, (lab.name, section)


def test_every_lab_checks_what_it_promises():
    """Each lab has checks; each compiles and names only steps that have commands; no lab
    sets the home itself (the test's fresh one, or the student's own, is used) nor cites a
    paper by a file of the papers' folder instead of its authors and title."""
    for lab in lab_paths():
        checks = lab_checks(lab)
        assert sum(kind == "check" for kind, _ in checks) >= 3, lab.name
        steps = {step for step, _ in lab_blocks(lab)}
        lets: set[str] = set()
        for kind, expr in checks:
            source = expr.partition("=")[2].strip() if kind == "let" else expr
            code = compile(source, lab.name, "eval")
            named = [int(n) for n in re.findall(r"\b(?:step|last|every|words|count|span)\((\d+),", expr)]
            assert set(named) <= steps, (lab.name, expr, sorted(steps))
            assert named or lets & set(code.co_names), (lab.name, expr, "reads no output")
            if kind == "let":
                lets.add(expr.partition("=")[0].strip())
        text = lab.read_text()
        assert "export RAIDLAB_HOME" not in text and "seeds/" not in text, lab.name


def test_a_check_that_does_not_hold_fails(tmp_path):
    """The checks read the printed numbers: a promise the output does not keep fails, and
    so does a number the output does not print."""
    lab = tmp_path / "01-example.md"
    lab.write_text("1. Write.\n\n```sh\ntrue\n```\n\n## What you should observe\n\n"
                   "- Step 1: one read-modify-write. <!-- check: step(1, r\"RMW (\\d+)\") == 1 -->\n")
    assert [step for step, _ in lab_blocks(lab)] == [1]
    assert check_lab(lab, LabOutput({1: "full-stripe 0, RMW 1, RCW 0"})) == 1
    with pytest.raises(AssertionError, match="does not hold"):
        check_lab(lab, LabOutput({1: "full-stripe 0, RMW 2, RCW 0"}))
    with pytest.raises(AssertionError, match="not in its output"):
        check_lab(lab, LabOutput({1: "full-stripe 1"}))


def _lab(number: str) -> Path:
    (path,) = LABS.glob(f"{number}-*.md")
    return path


@pytest.mark.long
@pytest.mark.parametrize("number", [p.name[:2] for p in lab_paths()])
@pytest.mark.root
@pytest.mark.live
def test_lab_runs_as_written_and_keeps_its_promises(number, tmp_path):
    path = _lab(number)
    output = run_lab(path, tmp_path, timeout=1200)
    assert check_lab(path, output) >= 3
