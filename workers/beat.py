"""RedBeat, made to ride out a Redis restart, a stalled tick and a late machine.

RedBeat keeps the schedule in Redis and holds a lock so that only one beat fires
it; a second beat waits on the lock.  Stock RedBeat exits when Redis goes away
(its lock is extended outside its retrying connection).  This scheduler treats a
lost connection as a pause: it retries every half second, and when Redis is back
it carries on if it still owns the lock, re-acquires it if the lock is gone, or
stands by if another beat took over meanwhile.  A tick that falls due while
Redis is down is missed (there is nowhere to send it); the next one fires.

A stalled tick (the machine, the process or Redis itself stopped for longer than the lock's
timeout) used to kill the beat: stock RedBeat extends the lock a second time inside its own
``tick`` and nothing caught its ``LockNotOwnedError`` (issue 41).  Here the lock is extended in
one place, and a lock found lost anywhere in a tick is re-acquired or handed over, never fatal.

A Redis that comes back *empty* (restarted without persistence, a failover to an empty
replica, a flush) has lost the schedule itself: stock RedBeat then finds nothing due, sends
nothing and says nothing, forever.  Each tick checks that the schedule is there and re-creates
it from the app's configuration when it is not, every entry due at once (issue 31).

Interval entries fall due on their interval's boundaries in UTC (every minute at :00), not one
interval after the last run: an interval that restarts from each late run drifts under load
(01:27:47, then 01:29:04: minute 01:28 had no tick).  Each fan-out carries the slot it was fired
for, so a message a worker takes up after the boundary still serves its own slot.
"""
from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

import redis
from celery.schedules import schedstate, schedule
from redbeat import RedBeatScheduler
from redbeat.schedulers import RedBeatSchedulerEntry
from redis.exceptions import LockError

from workers.schedule import tick_id

log = logging.getLogger("warmcast.workers.beat")
RETRY_S = 0.5
STALL_KEY = "fault:beat-stall"  # under the key prefix; read only with fault_beat_stall set


def _ts(dt: datetime) -> float:
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


def slot_after(ts: float, every_s: float) -> float:
    """The first boundary of ``every_s`` strictly after ``ts`` (epoch seconds, UTC)."""
    return (ts // every_s + 1) * every_s


class AlignedEntry(RedBeatSchedulerEntry):
    """A schedule entry whose interval (a plain ``schedule``) is aligned to UTC boundaries; any other
    schedule (the nightly crontab) behaves as RedBeat's."""

    def every_s(self) -> float | None:
        return self.schedule.run_every.total_seconds() if type(self.schedule) is schedule else None

    @property
    def due_at(self):
        every = self.every_s()
        if every is None or self.last_run_at is None:
            return super().due_at
        return datetime.fromtimestamp(slot_after(_ts(self.last_run_at), every), timezone.utc)

    def is_due(self):
        every = self.every_s()
        if every is None or not self.enabled:
            return super().is_due()
        now = _ts(self.default_now())
        due = now if self.last_run_at is None else slot_after(_ts(self.last_run_at), every)
        if now >= due:
            return schedstate(True, slot_after(now, every) - now)
        return schedstate(False, due - now)


class WarmcastScheduler(RedBeatScheduler):
    Entry = AlignedEntry

    def tick(self, min=min, **kwargs):  # noqa: A002 - Celery's signature
        try:
            if not self._hold_lock():
                return self.max_interval
            self._fault_stall()
            self._ensure_schedule()
            return self._fire_due(min)
        except LockError as err:
            # The lock lapsed inside this tick (a stall past its timeout): the next tick takes it
            # again or stands by; what fired meanwhile is deduplicated by the fan-out's slot claim.
            log.warning("beat: schedule lock lost during a tick (%s: %s); re-acquiring at the next check",
                        type(err).__name__, err)
            return RETRY_S
        except (redis.ConnectionError, redis.TimeoutError, OSError) as err:
            log.warning("beat: Redis unreachable (%s); retrying in %.1f s", err, RETRY_S)
            return RETRY_S

    def _hold_lock(self) -> bool:
        """Extend the schedule lock (the one place it is extended); take it again if it lapsed.
        False while another beat holds it."""
        if not self.lock_key or self.lock is None:
            return True
        try:
            self.lock.extend(int(self.lock_timeout))
            return True
        except LockError:
            if not self.lock.acquire(blocking=False):
                log.info("beat: another beat holds the schedule lock; standing by")
                return False
            log.warning("beat: schedule lock re-acquired after losing it")
            return True

    def _fire_due(self, min=min) -> float:  # noqa: A002
        """RedBeat's own tick without its second lock extension: send what is due, return the sleep."""
        remaining = []
        try:
            for entry in self.schedule.values():
                nxt = self.maybe_due(entry, **self._maybe_due_kwargs)
                if nxt:
                    remaining.append(nxt)
        except RuntimeError:
            log.debug("beat: RuntimeError", exc_info=True)
        return min(remaining + [self.max_interval])

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        """Send a fan-out with the slot it falls due in (the beat's clock at the boundary, not the
        worker's when it takes the message up)."""
        every = entry.every_s() if isinstance(entry, AlignedEntry) else None
        if every and entry.task == "warmcast.fanout":
            entry.kwargs = {**entry.kwargs, "tick": tick_id(every, _ts(self.app.now()))}
        return super().apply_async(entry, producer=producer, advance=advance, **kwargs)

    def _fault_stall(self) -> None:
        """Fault injection for bench/chaos.py (off in production): stall this tick, between the lock's
        extension and the firing, for the seconds a test left in Redis."""
        if not getattr(self.app, "wc_options", None) or not self.app.wc_options.fault_beat_stall:
            return
        from redbeat.schedulers import get_redis

        key = f"{self.app.wc_settings.key_prefix}:{STALL_KEY}"
        seconds = get_redis(self.app).getdel(key)
        if seconds:
            log.warning("fault injection: beat tick stalled for %s s", seconds.decode() if isinstance(seconds, bytes)
                        else seconds)
            time.sleep(float(seconds))

    def _ensure_schedule(self) -> None:
        """Re-create the static schedule when Redis lost it (its sorted set of due times is gone)."""
        conf = self.app.redbeat_conf
        if not conf.schedule or self.lock_key and (self.lock is None or not self.lock.owned()):
            return
        from redbeat.schedulers import get_redis

        if get_redis(self.app).exists(conf.schedule_key):
            return
        self.setup_schedule()
        due = self.due_at_once(conf.schedule)
        log.warning("beat: the schedule was missing from Redis (restarted empty or flushed); re-created %d "
                    "entries, %d of them due at once", len(conf.schedule), due)

    def due_at_once(self, names) -> int:
        """Make the named interval entries due now; how many were.  A re-created entry would first fire
        one interval after its creation, but the loop has just lost its state: it ticks at once, so it
        is back within one tick of the loss (issue 31)."""
        now, due = self.app.now(), 0
        for name in names:
            entry = self.Entry.from_key(self.Entry.generate_key(self.app, name), app=self.app)
            every = getattr(entry.schedule, "run_every", None)
            if every is not None:
                entry.reschedule(last_run_at=now - every)
                due += 1
        return due

    def close(self):
        try:
            super().close()
        except (redis.ConnectionError, redis.TimeoutError, LockError) as err:
            log.warning("beat: could not release the schedule lock at exit (%s); it expires on its own", err)
