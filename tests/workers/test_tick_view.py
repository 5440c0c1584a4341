"""A tick builds its deployment's view once (issue 42): the core configuration with every layer and
the planner's lead are resolved one time and every step of the tick reads that view; the next
tick sees a layer changed in between.  Real Redis, the simulated fleet; the counters wrap the real
resolvers (they count calls and answer with the real result)."""
from __future__ import annotations

from warmup.actuators import coldstart
from workers import context, lead
from workers.simulate import seed_deployment
from workers.steps import signals, tick


def _count(monkeypatch) -> dict[str, int]:
    from workers.alerting import state as alert_state

    calls = {"cfg": 0, "lead": 0, "deployment": 0}

    def counted(name, real):
        def call(*a, **k):
            calls[name] += 1
            return real(*a, **k)
        return call

    monkeypatch.setattr(context, "live_core_config", counted("cfg", context.live_core_config))
    monkeypatch.setattr(alert_state, "effective", counted("deployment", alert_state.effective))
    # a tick longer than the per-process cache of the effective deployment (1 s): every lookup by name
    # resolves it again, and a layer changed in between would give two steps two deployments
    monkeypatch.setattr(context, "EFFECTIVE_TTL_S", 0.0)
    real_lead = coldstart.resolve_lead
    monkeypatch.setattr(coldstart, "resolve_lead", counted("lead", real_lead))
    monkeypatch.setattr(lead, "resolve_lead", counted("lead", real_lead))
    return calls


def test_a_tick_resolves_its_configuration_and_lead_once(ctx, monkeypatch):
    seed_deployment(ctx, "simdep", mean_rpm=80)
    signals.step(ctx, "simdep")
    calls = _count(monkeypatch)
    out = tick.step(ctx, "simdep", tick="2026-01-01T00:01:00", run_id="a")
    assert out.status == "applied"
    assert calls == {"cfg": 1, "lead": 1, "deployment": 1}


def test_the_next_tick_reads_a_layer_changed_in_between(ctx):
    seed_deployment(ctx, "simdep", mean_rpm=80)
    signals.step(ctx, "simdep")
    tick.step(ctx, "simdep", tick="2026-01-01T00:01:00", run_id="a")
    ctx.state.put("policy-config", "simdep", {"scaling": {"max_replicas": 2}})
    tick.step(ctx, "simdep", tick="2026-01-01T00:02:00", run_id="b")
    assert ctx.pinned_view("simdep") is None                       # the pin ended with its tick
    assert ctx.cfg("simdep").scaling.max_replicas == 2
    assert int(ctx.state.get("plan-journal", "simdep")["decision"]["desired"]) <= 2
