"""The loop's steps, one module each, in the order one deployment goes through them.

Every module exposes one function, ``step(ctx, deployment, ...) -> <Step>Outcome``, that
reads its inputs, calls the pure core (:mod:`warmup.core`), applies the decision through
the actuator (:mod:`workers.apply`) and records it in the audit stream
(:mod:`workers.audit`), in that order.  :mod:`workers.tasks` binds Celery to them; the
benchmark and the tests call them directly.

- :mod:`~workers.steps.signals`: scrape the fleet's live signals and store them.
- :mod:`~workers.steps.forecast`: forecast the next 30 minutes from the stored load.
- :mod:`~workers.steps.plan`: pre-scale (signals -> forecast -> plan -> apply -> audit).
- :mod:`~workers.steps.warmup`: tiered warmup on queue depth; :mod:`~workers.steps.warmup_run`
  sends one warmup run's requests.
- :mod:`~workers.steps.switch`: advance the profile-switch state machine.
- maintenance: :mod:`~workers.steps.ingest` (completed minutes into the load store),
  :mod:`~workers.steps.retrain` (nightly challenger), :mod:`~workers.steps.expire` (retention).
"""
