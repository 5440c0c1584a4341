"""Capacity calibration (issue 15): measure what one instance serves within the SLO, per profile.

``search`` and ``steps`` are pure (the search is a function of measured steps); ``benchserve``
is the load engine (``vllm bench serve`` sends each step); ``runner`` sequences the steps,
``report`` writes calibration.json/.png, ``session`` is one ``warmcast calibrate`` run.
"""
