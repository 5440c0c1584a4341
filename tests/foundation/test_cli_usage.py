"""The program as a user meets it: usage mistakes, errors under a progress bar in a terminal,
and a base package whose modules do not import each other in a circle."""
from __future__ import annotations

import ast
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

WARMCAST = [sys.executable, "-m", "warmcast.cli"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(WARMCAST + args, capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.parametrize("args, message, hint", [
    (["summary"], "Missing option '--deployment'", "Try '"),
    (["no-such-command"], "No such command 'no-such-command'", "Try '"),
    (["summary", "--deployment"], "Option '--deployment' requires an argument", ""),
    (["backtest", "fleet", "--log"], "Option '--log' requires an argument", ""),
])
def test_usage_mistakes_print_the_error_and_a_hint_and_exit_2(args, message, hint):
    r = _run(args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "site-packages" not in r.stderr
    hits = [line for line in r.stderr.splitlines() if message in line]
    assert len(hits) == 1, r.stderr
    assert hint in r.stderr and (not hint or "--help' for help" in r.stderr)
    assert len(r.stderr.strip().splitlines()) <= 6, r.stderr  # the message, usage and hint; no trace


def test_round2_version_prints_the_installed_version():
    """Issue 32: there was no --version."""
    from importlib.metadata import version

    r = _run(["--version"])
    assert r.returncode == 0 and r.stdout.strip() == f"warmcast {version('warmcast')}", (r.stdout, r.stderr)


def test_bare_warmcast_shows_help_and_no_error():
    r = _run([])
    assert r.returncode in (0, 2)
    out = r.stdout + r.stderr
    assert "Traceback" not in out and "NoArgsIsHelpError" not in out
    assert "ingest" in out and "summary" in out and "Usage" in out


def test_ingest_error_prints_on_its_own_line_after_the_progress_bar_in_a_terminal(
        tmp_path, redis_server_url, key_prefix):
    (tmp_path / "bad.csv").write_text("time,requests\n2024-01-01 00:00:00,1\n2024-01-01 00:01:00,x\n")
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix}
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    proc = subprocess.Popen(WARMCAST + ["ingest", "bad.csv", "--deployment", "tty"], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 2
    text = ANSI.sub("", b"".join(chunks).decode())
    assert "ingest bad.csv" in text  # a progress bar was drawn on the terminal
    error_line = next(line for line in text.split("\n") if "bad.csv:3" in line)
    # what the terminal shows on that line: the text after the last carriage return
    shown = error_line.rstrip("\r").split("\r")[-1]
    assert shown.startswith("error: bad.csv:3: column 'requests'"), repr(error_line)


def _imports(path: Path, package: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith(f"{package}.")}
    return found


def test_base_package_modules_do_not_import_each_other_in_a_circle():
    root = Path(__file__).resolve().parents[2] / "warmcast"
    modules = {f"warmcast.{p.stem}": p for p in root.glob("*.py") if p.stem != "__init__"}
    graph = {m: _imports(p, "warmcast") & set(modules) for m, p in modules.items()}

    def reach(start: str) -> set[str]:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        return seen

    cycles = sorted(m for m in modules if m in reach(m))
    assert not cycles, f"modules on an import cycle: {cycles}"


def _leaf_commands(cmd, path: tuple[str, ...] = ()):
    """(path, click command) for every command the program has, groups walked down to their leaves."""
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield path, cmd
        return
    for name, sub in sorted(subs.items()):
        yield from _leaf_commands(sub, (*path, name))


def test_round2_every_help_is_readable_at_80_columns():
    """Issue 32: at COLUMNS=80 rich's option table cut names and defaults with '…' (backtest fleet,
    calibrate, plan capacity, ...). Every option's names (with metavar) must be shown in full on one
    line, its [default: ...] in full (a default longer than the help column may wrap), nothing cut."""
    import typer
    from typer.testing import CliRunner

    from warmcast import cli as wcli

    wcli._register_all()
    commands = list(_leaf_commands(typer.main.get_command(wcli.app)))
    assert len(commands) >= 25 and (("backtest", "fleet") in dict(commands))
    runner, bad = CliRunner(), []
    for path, cmd in commands:
        out = runner.invoke(wcli.app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": None}).output
        flat, bare = " ".join(out.split()), "".join(out.split())  # help text wraps; nothing may be lost
        ctx = cmd.context_class(cmd, info_name=path[-1])
        for p in (p for p in cmd.get_params(ctx) if p.param_type_name == "option"):
            names, help_text = p.get_help_record(ctx) or ("", "")
            bad += [f"{' '.join(path)}: {names!r}"] if names not in flat else []
            shown = re.findall(r"\[default: [^\]]*\]", help_text or "")
            bad += [f"{' '.join(path)}: {d!r}" for d in shown if "".join(d.split()) not in bare]
        bad += [f"{' '.join(path)}: cut with '…'"] if "…" in out else []
        bad += [f"{' '.join(path)}: line over 80 columns"] if max(map(len, out.splitlines())) > 80 else []
    assert bad == [], "\n".join(bad)
