"""Engine args for one advised window (pure): block size, sequences, batched tokens, swap space.

Block size follows the seed table by context length (2k -> 16, 4k -> 24, 8k -> 32, 16k+ -> 64)
applied to a smoothed predicted length ``h * current + (1 - h) * mean`` (``h`` 0.3 above 8k
tokens, where long contexts vary more and the history is trusted more, else 0.7), clamped to
8..64, then moved to the nearest size the installed vLLM's attention backends accept.  The
table row is the one nearest the predicted length on a log scale (8k-token nights get 32, as
the seed's example).  The seed's "times 0.15" is not applied: no reading of it reproduces its
own table (0.15 x 2048 = 307, far outside 8..64), so the table is the rule.  Sequences: as many P95-long
sequences as the KV cache left after the weights holds.  Swap space: max(20 GB, 0.3 x weight
memory), where the installed vLLM still has ``--swap-space``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from warmup.planning.advisor import WindowStats, hhmm

SEED_TABLE = ((2048, 16), (4096, 24), (8192, 32), (16384, 64))
H_LONG, H_SHORT, LONG_TOKENS = 0.3, 0.7, 8192
MIN_BLOCK, MAX_BLOCK = 8, 64
MAX_SEQS = 256             # vLLM's default ceiling; more rarely helps
MIN_BATCHED = 2048


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """What one instance has: accelerator memory, model weights, KV bytes per token, block sizes."""

    memory_gb: float = 80.0
    weights_gb: float = 16.0
    kv_bytes_per_token: float = 131072.0   # Llama-3-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    memory_utilisation: float = 0.9
    output_tokens: float = 512.0           # generated tokens a sequence adds to its KV
    accepted_block_sizes: tuple[int, ...] = (16, 32, 64)
    block_sizes_from: str = "every GPU attention backend"
    has_swap_space: bool = False
    vllm_version: str = ""


@dataclass(frozen=True, slots=True)
class ProfileArgs:
    engine_args: dict
    reasons: tuple[str, ...]
    swap_gb: float


def predicted_length(w: WindowStats) -> tuple[float, str]:
    """Smoothed predicted context length of a window and how it was smoothed."""
    h = H_LONG if w.ctx_current > LONG_TOKENS else H_SHORT
    pred = h * w.ctx_current + (1 - h) * w.ctx_mean
    return pred, (f"predicted length {pred:,.0f} = {h} x latest day {w.ctx_current:,.0f} + {1 - h:.1f} x "
                  f"mean {w.ctx_mean:,.0f} tokens (h {h} {'above' if h == H_LONG else 'at or below'} 8k)")


def seed_block(length: float) -> tuple[int, str]:
    """The seed table's block size for ``length``: the row nearest it on a log scale (16k+ is 64)."""
    tokens, size = min(SEED_TABLE, key=lambda row: abs(math.log(max(length, 1.0) / row[0])))
    size = min(MAX_BLOCK, max(MIN_BLOCK, size))
    return size, f"seed table row nearest {length:,.0f} tokens is {tokens // 1024}k: {size}"


def nearest_accepted(size: int, accepted: tuple[int, ...]) -> tuple[int, str]:
    """The accepted block size nearest ``size``; a tie goes to the larger (fewer block-table
    entries for long sequences, at most one block of waste per sequence either way)."""
    if not accepted:
        return size, "no accepted block sizes known: kept"
    best = min(accepted, key=lambda a: (abs(a - size), -a))
    return best, ("accepted as is" if best == size else f"{size} is not accepted; nearest accepted {best}")


def block_size(w: WindowStats, spec: InstanceSpec) -> tuple[int, tuple[str, ...]]:
    pred, why_pred = predicted_length(w)
    seed, why_seed = seed_block(pred)
    size, why_near = nearest_accepted(seed, tuple(a for a in spec.accepted_block_sizes if a <= 1024))
    return size, (f"block-size {size}: {why_pred}; {why_seed}; {why_near} by {spec.block_sizes_from}",)


def sequences(w: WindowStats, spec: InstanceSpec) -> tuple[int, int, tuple[str, ...]]:
    """(max-num-seqs, max-num-batched-tokens, reasons) from the window's P95 context and the KV memory."""
    kv_gb = spec.memory_gb * spec.memory_utilisation - spec.weights_gb
    p95 = w.ctx_p95 if math.isfinite(w.ctx_p95) else w.ctx_mean * 3
    per_seq = p95 + spec.output_tokens
    kv_tokens = max(0.0, kv_gb) * 1e9 / spec.kv_bytes_per_token
    fit = int(kv_tokens // per_seq)
    seqs = max(1, min(MAX_SEQS, fit if fit < 8 else fit // 8 * 8))
    batched = max(MIN_BATCHED, int(math.ceil(p95 / 1024.0)) * 1024, seqs)
    why = (f"max-num-seqs {seqs}: KV memory {spec.memory_gb:g} GB x {spec.memory_utilisation:g} - weights "
           f"{spec.weights_gb:g} GB = {kv_gb:,.1f} GB holds {kv_tokens:,.0f} tokens at "
           f"{spec.kv_bytes_per_token:,.0f} B/token, {fit} sequences of P95 {p95:,.0f} + {spec.output_tokens:,.0f} "
           f"output tokens (multiple of 8, at most {MAX_SEQS})")
    why_b = (f"max-num-batched-tokens {batched}: one P95 prompt ({p95:,.0f} tokens) prefills in one step "
             f"(rounded up to 1k, at least {MIN_BATCHED} and max-num-seqs)")
    if kv_gb <= 0:
        why += f"; WARNING: the weights do not fit in {spec.memory_gb:g} GB x {spec.memory_utilisation:g}"
    return seqs, batched, (why, why_b)


def swap_space(spec: InstanceSpec) -> tuple[float, str]:
    gb = max(20.0, 0.3 * spec.weights_gb)
    why = f"swap space {gb:g} GB = max(20 GB, 0.3 x weights {spec.weights_gb:g} GB)"
    if not spec.has_swap_space:
        why += (f"; vLLM {spec.vllm_version or '(installed)'} has no --swap-space option (its V1 engine "
                "preempts by recomputation), so it is not set")
    return gb, why


def profile_args(w: WindowStats, spec: InstanceSpec) -> ProfileArgs:
    """Engine args for a window with a reason per arg."""
    size, why_block = block_size(w, spec)
    seqs, batched, why_seqs = sequences(w, spec)
    swap, why_swap = swap_space(spec)
    args: dict = {"block-size": size, "max-num-seqs": seqs, "max-num-batched-tokens": batched}
    if spec.has_swap_space:
        args["swap-space"] = round(swap, 1)
    return ProfileArgs(args, why_block + why_seqs + (why_swap,), swap)


@dataclass(frozen=True, slots=True)
class ProposedProfile:
    name: str
    window: WindowStats
    args: ProfileArgs


@dataclass(frozen=True, slots=True)
class Proposal:
    """Profiles per window, the default one, the schedule windows (name, start, end as minutes of
    the local day), the pre-warm time of each switch, and every reason."""

    profiles: tuple[ProposedProfile, ...]
    default_profile: str
    schedule: tuple[tuple[str, int, int], ...]
    prewarm: tuple[tuple[str, int], ...]   # (profile, local minute of day its pre-warm starts)
    cold_start_min: float
    reasons: tuple[str, ...]


def _names(windows: tuple[WindowStats, ...]) -> tuple[str, ...]:
    """day/night when the long window holds 03:00 (the small hours), else short/long."""
    if len(windows) == 1:
        return ("day",)
    long_ = windows[1]
    a, b = long_.start_min, long_.end_min
    night = (a <= 180 < b) if a < b else (180 >= a or 180 < b)
    return ("day", "night") if night else ("short", "long")


def propose(windows: tuple[WindowStats, ...], spec: InstanceSpec, cold_start_min: float,
            cold_source: str) -> Proposal:
    """One profile per window (short context first, the default); the other window is scheduled
    with its pre-warm one cold start ahead of each switch (the measured one where there is one)."""
    names = _names(windows)
    profiles = tuple(ProposedProfile(n, w, profile_args(w, spec)) for n, w in zip(names, windows))
    if len(windows) < 2:
        return Proposal(profiles, names[0], (), (), cold_start_min,
                        ("one window: no schedule, the one profile serves all day",))
    short, long_ = windows
    lead = int(math.ceil(cold_start_min))
    prewarm = ((names[1], (long_.start_min - lead) % 1440), (names[0], (long_.end_min - lead) % 1440))
    why = (f"default profile {names[0]} ({short.label}); {names[1]} scheduled {long_.label}; each switch "
           f"pre-warms one cold start ahead ({cold_start_min:.0f} min, {cold_source}): {names[1]} from "
           f"{hhmm(prewarm[0][1])}, {names[0]} from {hhmm(prewarm[1][1])}")
    return Proposal(profiles, names[0], ((names[1], long_.start_min, long_.end_min),), prewarm, cold_start_min,
                    (why,))
