"""``warmcast backtest nodes``: deployments sharing a node pool, one log each, under warmcast's fleet
decision and the baselines (``warmup.sim.nodes_backtest``); writes report.json and nodes.png."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from warmcast.cli.log_options import LOG_HELP
from warmcast.errors import InputError


def nodes(
    deployments_file: Path = typer.Option(..., "--deployments-file", help="Deployments file with node_pools: and "
                                          "the deployments on the pool (node_pool:)."),
    log: list[str] = typer.Option(..., "--log", help="NAME=FILE, once per deployment of the pool. " + LOG_HELP),
    test_start: str = typer.Option(..., "--test-start", help="First test minute (UTC, on the aligned week); "
                                   "the forecasters train before it."),
    slo_late_share: Optional[float] = typer.Option(None, "--slo-late-share", min=0, max=1,
                                                   help="SLO for every deployment (default: each one's slo:)."),
    slo_wait_s: Optional[float] = typer.Option(None, "--slo-wait-s", min=0.001, help="A request waiting longer "
                                               "is late (default: each deployment's slo:)."),
    pool: Optional[str] = typer.Option(None, "--pool", help="The node pool (default: the file's only one)."),
    forecaster: str = typer.Option("seasonal_naive", "--forecaster", help="The forecaster of every "
                                   "deployment (lstm, uc_fourier, seasonal_naive, sim_seasonal_profile, ...)."),
    fill: bool = typer.Option(False, "--fill", help="Warm GPUs serve preemptible batch work (warmcast's policy)."),
    validation_days: float = typer.Option(2.0, "--validation-days", min=0, help="Each policy's knob per deployment "
                                          "(the HPA's target utilisation, warmcast's quantile, reactive guard and "
                                          "pool quantile) is chosen for its "
                                          "SLO on these days before --test-start (0: the defaults, untuned)."),
    out: Path = typer.Option(..., "--out", help="Directory for report.json and nodes.png."),
) -> None:
    """Deployments on one shared GPU node pool: node GPU-hours and each deployment's lateness per policy."""
    from warmcast.config.deployments import load_deployments

    dfile = load_deployments(deployments_file)
    the_pool = _pool(dfile, pool)
    logs = dict(_pair(x) for x in log)
    deps = {d.name: d for d in dfile.deployments if d.node_pool == the_pool.name}
    missing = sorted(set(deps) - set(logs))
    extra = sorted(set(logs) - set(deps))
    if missing or extra:
        raise InputError(f"--log needs exactly the deployments on node pool {the_pool.name} "
                         f"({sorted(deps)}): missing {missing}, not on the pool {extra}")
    report = run(the_pool, [deps[n] for n in logs], logs, test_start, slo_late_share, slo_wait_s, forecaster, fill,
                 validation_days)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report["doc"], indent=2))
    _plot(report["runs"], report["times"], out / "nodes.png", the_pool.name)
    for name, r in report["doc"]["policies"].items():
        met = sum(bool(d.get("slo_met")) for d in r["deployments"].values())
        verdict = "(hindsight: no verdict)" if r.get("hindsight") else f"SLO met by {met}/{len(r['deployments'])}"
        typer.echo(f"{name:>24}: node GPU-hours {r['node_gpu_hours']:9.1f}  batch {r['batch_gpu_hours']:7.1f}  {verdict}")
    typer.echo(f"wrote {out / 'report.json'} and {out / 'nodes.png'}")


def _pair(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise InputError(f"--log {text!r}: give NAME=FILE (the deployment's name, then its log)")
    return name, Path(path)


def _pool(dfile: Any, name: Optional[str]) -> Any:
    pools = {p.name: p for p in dfile.node_pools}
    if not pools:
        raise InputError("the deployments file has no node_pools: (see examples/deployments.yaml)")
    if name is None:
        if len(pools) > 1:
            raise InputError(f"the deployments file has several node pools {sorted(pools)}: name one with --pool")
        return next(iter(pools.values()))
    if name not in pools:
        raise InputError(f"--pool {name!r} is not one of node_pools {sorted(pools)}")
    return pools[name]


def run(pool: Any, deps: list, logs: dict[str, Path], test_start: str, late_share: Optional[float],
        wait_s: Optional[float], forecaster: str, fill: bool, validation_days: float = 0.0) -> dict[str, Any]:
    """Load and align the logs, forecast each deployment before the test start, choose each policy's
    knobs on the validation days before it (none: the defaults), run every policy."""
    import pandas as pd

    from warmup.sim import load_log
    from warmup.sim.nodes import NodeParams
    from warmup.sim.nodes_backtest import NodeMember, align, run_all
    from warmup.sim.nodes_inputs import inputs_for

    aligned, shifts = align({d.name: load_log(logs[d.name]) for d in deps})
    t = pd.Timestamp(test_start)
    ts = (t if t.tzinfo is None else t.tz_convert("UTC").tz_localize(None)).floor("min")
    members = [NodeMember(d.name, aligned[d.name], d.capacity_rpm, d.gpus_per_replica, d.cold_start_min,
                          d.min_replicas, d.max_replicas, d.slo.late_share if late_share is None else late_share,
                          d.slo.late_wait_s if wait_s is None else wait_s) for d in deps]
    p = NodeParams(pool.gpus_per_node, pool.node_lead_min, pool.max_nodes, preempt_s=pool.preempt_s)
    inp = inputs_for(members, ts, forecaster)
    knobs, pool_q = None, 0.95
    if validation_days > 0:
        from warmup.sim.nodes_tune import tune_all, tune_pool

        val = inputs_for(members, ts - pd.Timedelta(days=validation_days), forecaster, test_end=ts)
        knobs = tune_all(members, val, p)
        pool_q = tune_pool(members, val, p, knobs["warmcast"])
    rows, runs = run_all(members, inp, p, fill, knobs, pool_q)
    doc = {"pool": pool.name, "test_start": str(ts), "minutes": len(inp.times), "alignment": shifts,
           "forecaster": forecaster, "validation_days": validation_days, "policies": rows,
           "notes": ["hpa_balloons' count was tuned on the test days (hindsight): no verdict",
                     "GPUs are counted per pool (no fragmentation across nodes)"]}
    return {"doc": doc, "runs": runs, "times": inp.times}


def _plot(runs: dict, times: list, path: Path, pool: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    for name, r in runs.items():
        ax.step(times, r.nodes, where="post", label=f"{name} nodes")
    if "warmcast" in runs:
        ax.step(times, runs["warmcast"].warm / max(1, runs["warmcast"].pool.p.gpus_per_node), where="post",
                linestyle=":", label="warmcast warm GPUs (in nodes)")
    ax.set_title(f"node pool {pool}: nodes up or booting per minute")
    ax.set_ylabel("nodes")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    backtest.command("nodes")(nodes)
