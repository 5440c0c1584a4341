"""A count series' interval: the step its stamps agree on, and what to do with the stamps that don't.

The interval was once the greatest common divisor of every step, so one stamp a minute late made a
5-minute series a 1-minute one and each 5-minute count was stored as one minute's (issue 41: a summary
mean of 991.7/min where the truth was about 200).  Now:

- the interval is the *dominant* step: the most common gap between consecutive stamps (on a tie, the
  shortest); it must divide a minute (10 s, 30 s ...) or be whole minutes that divide a day (5, 10,
  60 ...), else the series is refused;
- the grid is the dominant phase (stamp modulo interval), so a series stamped at :02, :07 ... keeps it;
- **missing stamps** (a gap of several whole intervals) are tolerated in any number: those bins stay
  missing, never zero, and the report counts them (in a series finer than a minute, the minute a
  missing stamp falls in is kept missing: a part of a minute is not its load);
- **shifted stamps** (off the grid) are tolerated up to :data:`SHIFT_SHARE` of the stamps (at least one):
  each is moved to its nearest bin (a tie goes to the earlier one), counted and named in the report.
  A shifted stamp whose nearest bin holds another stamp, or whose move would carry another stamp's
  minute with it, is refused, as is any series with more shifted stamps than that: the file names the
  offending rows and nothing is stored.

Pure: times in, a fit out; the caller maps a time to its file and line for the messages.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from warmcast.errors import InputError
from warmcast.resolution import NS_PER_MIN

SHIFT_SHARE = 0.01  # of a series' stamps that may be off its grid (each moved to its nearest bin, and said)
NAMED = 5  # offending rows named in a refusal
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class IntervalFit:
    """The grid a count series' stamps lie on and the stamps moved onto it."""

    step_ns: int = 0  # 0: fewer than two stamps, no interval to tell
    phase_ns: int = 0
    shifted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # stamps off the grid ...
    snapped: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ... and the bins they were moved to
    missing: int = 0  # bins between the first and the last with no stamp
    # a finer series' minutes (but its last) that miss an interval: a part of a minute is not its load, so they
    # are kept missing as a blank interval keeps its minute (the last one is the log's partial last minute)
    incomplete: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def resolution_min(self) -> int:
        """Minutes per stored bin: 1 for a series at a minute or finer (summed per minute)."""
        return int(self.step_ns // NS_PER_MIN) if self.step_ns > NS_PER_MIN else 1


class Stamps:
    """A count series' stamps as read, over chunks and files: time, file and line of every row (blank
    intervals too: they are bins of the grid), 16 bytes a row."""

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._all: tuple[np.ndarray, ...] | None = None  # the parts joined, once asked for
        self.files: list[str] = []

    def add(self, ns: np.ndarray, lines: np.ndarray, path: str, blank: np.ndarray) -> None:
        if path not in self.files:
            self.files.append(path)
        file_no = np.full(len(ns), self.files.index(path), np.int32)
        self._parts.append((np.asarray(ns, np.int64), np.asarray(lines, np.int64), file_no, np.asarray(blank, bool)))
        self._all = None

    def _arrays(self) -> tuple[np.ndarray, ...]:
        if self._all is None:
            parts = self._parts or [(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32),
                                     np.zeros(0, bool))]
            self._all = tuple(np.concatenate(col) for col in zip(*parts))
        return self._all

    def times(self) -> np.ndarray:
        """Every row's time, in the order read."""
        return self._arrays()[0]

    def distinct(self) -> np.ndarray:
        return np.unique(self._arrays()[0])

    def repeated(self) -> int:
        """Rows whose (non-blank) time another row of the call has already (issue 31: they are summed)."""
        ns, _, _, blank = self._arrays()
        return int((~blank).sum() - len(np.unique(ns[~blank])))

    def where(self, t: int) -> str:
        """'file:line' of the first row stamped ``t``."""
        ns, lines, file_no, _ = self._arrays()
        i = int(np.flatnonzero(ns == t)[0])
        return f"{self.files[file_no[i]]}:{lines[i]}"


def label(step_ns: int) -> str:
    """'5-minute', '45-second', '1.5-minute'."""
    if step_ns < NS_PER_MIN:
        return f"{step_ns / NS_PER_S:g}-second"
    return f"{step_ns / NS_PER_MIN:g}-minute"


def fit_interval(times: np.ndarray, where: Callable[[int], str]) -> IntervalFit:
    """The grid of ``times`` (sorted, distinct, ns).  ``where(t)`` names the row of time ``t``
    ('file:line'); InputError when the interval is not one warmcast keeps or the stamps disagree with it."""
    times = np.asarray(times, np.int64)
    if len(times) < 2:
        return IntervalFit()
    values, counts = np.unique(np.diff(times), return_counts=True)
    step = int(values[np.argmax(counts)])  # the first maximum: the shortest of tied steps
    refuse_odd_interval(step)
    phases, counts = np.unique(times % step, return_counts=True)
    phase = int(phases[np.argmax(counts)])
    off = times[(times % step) != phase]
    q, r = np.divmod(off - phase, step)
    snapped = phase + (q + (2 * r > step)) * step  # the nearest bin; a tie goes to the earlier one
    _refuse_offending(times, off, snapped, step, where)
    allowed = max(1, int(SHIFT_SHARE * len(times)))
    if len(off) > allowed:
        named = "; ".join(f"{where(int(t))} ({_ts(t)})" for t in off[:NAMED])
        raise InputError(f"{len(off):,} of the {len(times):,} stamps of this {label(step)} series lie off its grid, "
                         f"more than the {allowed:,} ({SHIFT_SHARE:.0%}) warmcast moves to their nearest bin: "
                         f"{named}{' ...' if len(off) > NAMED else ''}; put the stamps on the series' interval "
                         "(or resample it) first; nothing was stored")
    bins = np.union1d(times[(times % step) == phase], snapped)
    missing = int((bins[-1] - bins[0]) // step + 1 - len(bins))
    incomplete = np.zeros(0, np.int64)
    if step < NS_PER_MIN:
        minutes, held = np.unique(bins // NS_PER_MIN, return_counts=True)
        incomplete = minutes[:-1][held[:-1] < NS_PER_MIN // step]
    return IntervalFit(step, phase, off, snapped, missing, incomplete)


def refuse_odd_interval(step_ns: int) -> None:
    """Only an interval that divides a minute (summed per minute) or is whole minutes dividing a day
    (kept in its own bins) is stored; any other (7 or 90 minutes, 45 s) would put several times too many
    requests in some stored values (issue 31: a 7-minute series stored 7x), so the file is refused."""
    if step_ns < NS_PER_MIN:
        if NS_PER_MIN % step_ns:
            raise InputError(f"a count series at {label(step_ns)} intervals: warmcast sums a series finer than a "
                             "minute per minute only when its interval divides a minute (1, 2, 5, 10, 15, 20, 30 s "
                             "...); sum it per minute first; nothing was stored")
        return
    minutes = step_ns // NS_PER_MIN
    if step_ns % NS_PER_MIN or 1440 % minutes:
        raise InputError(f"a count series at {label(step_ns)} intervals: warmcast keeps a series per minute or in "
                         "bins that divide a day (2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 60 ... minutes); sum it "
                         "into such bins (or per minute) first; nothing was stored")


def _refuse_offending(times: np.ndarray, off: np.ndarray, snapped: np.ndarray, step: int,
                      where: Callable[[int], str]) -> None:
    """Refuse a shifted stamp that cannot be moved alone.  The accumulator holds minutes, so besides
    a nearest bin that holds another stamp, a finer series' stamp cannot leave its minute, and a
    coarser one's cannot leave a minute it shares or land in a minute another stamp holds."""
    on_grid = np.setdiff1d(times, off, assume_unique=True)
    _, inverse, count = np.unique(snapped, return_inverse=True, return_counts=True)
    own, dst = off // NS_PER_MIN, snapped // NS_PER_MIN
    minutes, per_minute = np.unique(times // NS_PER_MIN, return_counts=True)
    moves = dst != own
    reasons = [
        (np.isin(snapped, on_grid) | (count[inverse] > 1), "holds another stamp"),
        (moves & (step < NS_PER_MIN), "is in another minute (a finer series is summed per minute)"),
        ((per_minute[np.searchsorted(minutes, own)] > 1) & moves, "is in another minute, and this stamp's "
                                                                  "minute holds another stamp"),
        (moves & np.isin(dst, minutes), "is in a minute that holds another stamp"),
    ]
    bad = np.flatnonzero(np.any([mask for mask, _ in reasons], axis=0)) if len(off) else []
    if len(bad):
        named = "; ".join(f"{where(int(off[i]))} ({_ts(off[i])}): its nearest bin {_hm(snapped[i])} "
                          + next(text for mask, text in reasons if mask[i]) for i in bad[:NAMED])
        raise InputError(f"this {label(step)} series has {len(bad):,} stamps off its grid that cannot be moved to "
                         f"their nearest bin: {named}{' ...' if len(bad) > NAMED else ''}; fix those rows (or "
                         "resample the series onto its interval) first; nothing was stored")


def _ts(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")).replace("T", " ")


def _hm(ns: int) -> str:
    return _ts(ns)[11:16] if int(ns) % NS_PER_MIN == 0 else _ts(ns)[11:]
