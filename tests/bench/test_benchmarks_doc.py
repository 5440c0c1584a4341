"""docs/BENCHMARKS.md is written by the benchmarks (issue 26): every section its index names lies
between its markers, begins with the script's provenance (command, time, load average) and names
the command the index gives; every bench script that writes a section has one there."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "BENCHMARKS.md").read_text()
INDEX = re.findall(r"^\| [^|]+ \| [^|]+ \| `bench:(\w+)` \| `([^`]+)` \|$", DOC, re.M)


def _section(name: str) -> str:
    m = re.search(rf"<!-- bench:{name} begin -->\n(.*?)<!-- bench:{name} end -->", DOC, re.S)
    assert m, f"no section bench:{name} between its markers in docs/BENCHMARKS.md"
    return m.group(1)


def test_every_indexed_section_is_written_by_its_script_with_its_command() -> None:
    assert len(INDEX) >= 10, INDEX
    for name, command in INDEX:
        body = _section(name)
        assert body.startswith("Written by the script itself"), (name, body[:200])
        assert re.search(r"load average \d+\.\d\d when the run began", body), name
        script = command.split()[1]                      # .venv/bin/python bench/x.py ...
        assert f"    .venv/bin/python {script}" in body, (name, script)


def test_every_bench_that_writes_a_section_is_in_the_index() -> None:
    indexed = {name for name, _ in INDEX}
    for path in sorted((ROOT / "bench").glob("*.py")):
        text = path.read_text()
        for name in re.findall(r'(?:publish|printed_into)\([^,]+, "(\w+)"', text) + re.findall(
                r'write_section\("(\w+)"', text):
            assert name in indexed, f"{path.name} writes bench:{name}, which the index of BENCHMARKS.md lacks"
