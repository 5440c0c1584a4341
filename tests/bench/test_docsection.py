"""Benchmarks write their own sections of docs/BENCHMARKS.md (bench/docsection.py, issue 26): a
section is replaced between its markers, the rest of the document kept byte for byte."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from docsection import markers, provenance, write_section  # noqa: E402
from fleet_slo_doc import render  # noqa: E402


def test_a_section_is_appended_then_replaced_and_nothing_else_moves(tmp_path: Path) -> None:
    doc = tmp_path / "B.md"
    doc.write_text("# Benchmarks\n\nprose a person wrote\n")
    write_section("x", "figure 1", doc)
    begin, end = markers("x")
    assert doc.read_text() == f"# Benchmarks\n\nprose a person wrote\n\n{begin}\nfigure 1\n{end}\n"
    doc.write_text(doc.read_text() + "\nlater prose\n")
    write_section("x", "figure 2\n", doc)
    assert doc.read_text() == f"# Benchmarks\n\nprose a person wrote\n\n{begin}\nfigure 2\n{end}\n\nlater prose\n"


def test_the_fleet_slo_section_has_its_command_every_row_and_the_before_beside_the_after() -> None:
    row = lambda x, late: {"gpu_hours": 10 * x, "gpu_hours_vs_oracle": x, "late_pct": 100 * late,  # noqa: E731
                           "late_share": late, "late_episodes": 1, "params": {"quantile": 0.9, "other": 1}}
    rows = {"predictive": row(1.1, 0.0001), "reactive": row(1.3, 0.001), "oracle": row(1.0, 0.0)}
    report = {"slo": {"late_share": 0.0005, "late_wait_s": 5.0}, "forecaster": "lstm", "load_at_start": 0.42,
              "command": ".venv/bin/python bench/fleet_slo.py --forecaster lstm",
              "traces": {"nasa": {"1995-07-12": {"rows": rows, "verdict": "MET", "seconds": 3.0}}}}
    before = {"forecaster": "lstm", "traces": {"nasa": {"1995-07-12": {"rows": {**rows, "predictive": row(1.2, 0.0)}}}}}
    md = render(report, before, "commit abc")
    assert md.startswith(provenance(0.42, "x").split(",")[0]) and "load average 0.42" in md
    assert "    .venv/bin/python bench/fleet_slo.py --forecaster lstm\n" in md
    assert "| predictive | 11.0 | 1.100x | 0.0100% | 1 | yes | {'quantile': 0.9} |" in md
    assert "| reactive | 13.0 | 1.300x | 0.1000% | 1 | no |" in md
    assert "| predictive | 1.200x, 0.0000% | 1.100x, 0.0100% |" in md and "commit abc" in md


def test_what_a_bench_prints_becomes_its_section_only_when_it_ends_well(tmp_path: Path, capsys) -> None:
    from docsection import printed_into

    doc = tmp_path / "B.md"
    doc.write_text("# Benchmarks\n")
    try:
        with printed_into(str(doc), "y", 0.5, ".venv/bin/python bench/y.py"):
            print("half a table")
            raise RuntimeError("the server died")
    except RuntimeError:
        pass
    assert doc.read_text() == "# Benchmarks\n"          # a failed run writes nothing
    with printed_into(str(doc), "y", 0.5, ".venv/bin/python bench/y.py"):
        print("| a | b |")
    text = doc.read_text()
    assert "load average 0.50 when the run began" in text and "    .venv/bin/python bench/y.py" in text
    assert "```\n| a | b |\n```" in text and "half a table" in capsys.readouterr().out
    with printed_into("none", "y", 0.5, "cmd"):
        print("not written")
    assert doc.read_text() == text
