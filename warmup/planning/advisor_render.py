"""The advisor's proposal as a deployments-file fragment (reasons as comments) and as a plot."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from warmcast.config.deployments import Deployment, parse_deployments
from warmcast.errors import InputError
from warmup.planning.advisor import Windows, hhmm
from warmup.planning.advisor_args import InstanceSpec, Proposal

# keys the fragment writes itself; everything else of the deployment is kept as it is
OWN_KEYS = ("profiles", "default_profile", "schedule")


def _capacity(dep: Deployment, name: str, ctx_mean: float, base_ctx: float) -> tuple[float, str]:
    """capacity_rpm of an existing profile of that name, else the default's scaled by context length."""
    if name in dep.profiles:
        return dep.profiles[name].capacity_rpm, f"capacity_rpm kept from the existing {name} profile"
    ref = dep.profiles[dep.default_profile].capacity_rpm
    if name == dep.default_profile or base_ctx <= 0:
        return ref, "capacity_rpm from the default profile; measure it"
    scaled = max(1.0, round(ref * min(1.0, base_ctx / ctx_mean), 1))
    return scaled, f"capacity_rpm {ref:g} x {base_ctx:,.0f}/{ctx_mean:,.0f} tokens (shorter is faster); measure it"


def _comment(lines: list[str], text: str, indent: str) -> None:
    lines.extend(f"{indent}# {part}" for part in text.split("; "))


def render_fragment(dep: Deployment, windows: Windows, proposal: Proposal, spec: InstanceSpec,
                    now: datetime) -> str:
    """A deployments file holding this deployment with the proposed profiles and schedule; it is
    checked the way every command loads it before it is returned."""
    lines = [f"# warmcast advise profiles --deployment {dep.name} ({now:%Y-%m-%d %H:%M} UTC)",
             f"# {windows.days_seen} day(s) of stored minutes, {windows.covered_h:.1f} h of the day covered"]
    for r in windows.reasons + proposal.reasons:
        _comment(lines, r, "")
    rest = dep.model_dump(mode="json", exclude_defaults=True, exclude=set(OWN_KEYS))
    rest["name"] = dep.name
    names = {p.name for p in proposal.profiles}
    _drop_old_profile_refs(rest, names, lines)
    body = yaml.safe_dump([rest], sort_keys=False, default_flow_style=False, width=120).rstrip().splitlines()
    lines += ["deployments:"] + ["  " + b for b in body]
    lines.append(f"    default_profile: {proposal.default_profile}")
    lines.append("    profiles:")
    base = proposal.profiles[0].window.ctx_mean
    for p in proposal.profiles:
        cap, why_cap = _capacity(dep, p.name, p.window.ctx_mean, base)
        lines.append(f"      # {p.name}: {p.window.label} {windows.tz_name}, mean context "
                     f"{p.window.ctx_mean:,.0f} tokens, P95 {p.window.ctx_p95:,.0f}")
        for r in p.args.reasons + (why_cap,):
            lines.append(f"      #   {r}")
        lines.append(f"      {p.name}:")
        lines.append(f"        capacity_rpm: {cap:g}")
        args = ", ".join(f"{k}: {v}" for k, v in p.args.engine_args.items())
        lines.append(f"        engine_args: {{{args}}}")
    lines += _schedule(proposal, windows)
    text = "\n".join(lines) + "\n"
    parse_deployments(yaml.safe_load(text), "the advised fragment")  # refuse to hand out what would not load
    return text


def _drop_old_profile_refs(rest: dict[str, Any], names: set[str], lines: list[str]) -> None:
    """Keys that name the old profiles would not load with the new ones: left out, and said so."""
    if set(rest.get("scaler", {}).get("profile_resources", {})) - names:  # one workload per old profile
        del rest["scaler"]["profile_resources"]
        lines.append("# scaler.profile_resources left out: it names the old profiles; give one workload per "
                     f"new profile ({', '.join(sorted(names))}) to apply switches")
    if "pools" in rest:
        del rest["pools"]
        lines.append("# pools left out: they name the old profiles; assign the new ones "
                     f"({', '.join(sorted(names))}) to the hot and cold pools")


def _schedule(proposal: Proposal, windows: Windows) -> list[str]:
    if not proposal.schedule:
        return []
    out = ["    schedule:", f"      timezone: {windows.tz_name}", "      windows:"]
    for (name, a, b), (_, pre) in zip(proposal.schedule, proposal.prewarm):
        back = dict(proposal.prewarm).get(proposal.default_profile)
        out.append(f"        # pre-warm {name} from {hhmm(pre)}, {proposal.default_profile} from {hhmm(back)} "
                   f"(one cold start, {proposal.cold_start_min:.0f} min, ahead)")
        out.append(f"        - {{profile: {name}, start: \"{hhmm(a)}\", end: \"{hhmm(b)}\"}}")
    return out


def plot_path(path: str | Path) -> Path:
    """The plot's path if its suffix names a format matplotlib writes; InputError otherwise."""
    p = Path(path)
    if p.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InputError(f"{p}: the plot's format comes from its suffix: .png, .svg or .pdf")
    return p


def plot(windows: Windows, proposal: Proposal, path: str | Path, deployment: str) -> Path:
    """Mean and P95 context length by local hour, the proposed windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = plot_path(path)
    fig, ax = plt.subplots(figsize=(9, 4))
    hours = [h + 0.5 for h in range(24)]
    ax.plot(hours, windows.hourly_mean, marker="o", label="mean prompt tokens")
    ax.plot(hours, windows.hourly_p95, marker=".", linestyle="--", label="P95 prompt tokens")
    colours = ("tab:blue", "tab:orange")
    for i, prof in enumerate(proposal.profiles):
        _shade(ax, prof.window.start_min, prof.window.end_min, colours[i % 2], prof.name)
    ax.set_xlim(0, 24)
    ax.set_xticks(range(0, 25, 3))
    ax.set_xlabel(f"hour of day ({windows.tz_name})")
    ax.set_ylabel("prompt tokens")
    ax.set_yscale("log")
    ax.set_title(f"{deployment}: context length by hour and the advised windows")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p


def _shade(ax: Any, start: int, end: int, colour: str, label: str) -> None:
    spans = [(start, end)] if start < end else [(start, 1440), (0, end)] if end or start else [(0, 1440)]
    for i, (a, b) in enumerate(spans):
        ax.axvspan(a / 60, b / 60, color=colour, alpha=0.12, label=f"window {label}" if i == 0 else None)
