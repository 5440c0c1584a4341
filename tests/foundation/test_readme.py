"""The README as a new user reads it: it starts with the two commands, uses only files the
user has, documents every setting, and every command and flag it shows exists."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer

from warmcast import cli
from warmcast.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, re.S)


def _commands() -> list[list[str]]:
    """Each `warmcast ...` invocation in the README's bash blocks, as argv after 'warmcast'."""
    out = []
    for block in _bash_blocks():
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip().rstrip("&").strip()
            if ".venv/bin/warmcast " in line:
                out.append(shlex.split(line.split(".venv/bin/warmcast ", 1)[1]))
    return out


def test_readme_starts_with_the_two_commands():
    first, second = (b.strip() for b in _bash_blocks()[:2])
    assert first.startswith("python3 -m venv .venv") and first.endswith(".venv/bin/warmcast demo")
    assert second == "bash scripts/test"


def test_readme_uses_no_files_outside_the_checkout():
    assert "../shared" not in README
    logs = {argv[argv.index("--log") + 1] for argv in _commands() if "--log" in argv}
    made = {argv[argv.index("--out") + 1] for argv in _commands() if argv[0] == "generate"}
    assert logs and logs <= made  # every log a README command reads is one a README command wrote


def test_readme_documents_every_setting_and_the_column_flags():
    for name in Settings.model_fields:
        assert f"`{name}`" in README, name
    for flag in ("--time-col", "--input-col", "--output-col", "--count-col", "--time-unit"):
        assert flag in README, flag
    assert "WARMCAST_API_TOKEN" in README and "Authorization: Bearer" in README
    models_row = next(line for line in README.splitlines() if line.startswith("| `models_dir` |"))
    assert "`<state_dir>/models`" in models_row  # Settings.models_dir's default, never the checkout


def test_every_readme_command_and_flag_exists():
    cli._register_all()
    root = typer.main.get_command(cli.app)
    commands = _commands()
    assert {"demo", "generate", "ingest", "setup", "deployments", "backtest"} <= {argv[0] for argv in commands}
    for argv in commands:
        cmd, rest = root, list(argv)
        while rest and hasattr(cmd, "commands") and rest[0] in cmd.commands:
            cmd = cmd.commands[rest.pop(0)]
        assert not hasattr(cmd, "commands"), f"README: warmcast {' '.join(argv)}: no such command"
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        flags = {a for a in rest if a.startswith("-")}
        assert flags <= known, f"README: warmcast {' '.join(argv)}: unknown {sorted(flags - known)}"
