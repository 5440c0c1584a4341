"""RedBeat, made to ride out a Redis restart.

RedBeat keeps the schedule in Redis and holds a lock so that only one beat fires
it; a second beat waits on the lock.  Stock RedBeat exits when Redis goes away
(its lock is extended outside its retrying connection).  This scheduler treats a
lost connection as a pause: it retries every half second, and when Redis is back
it carries on if it still owns the lock, re-acquires it if the lock is gone, or
stands by if another beat took over meanwhile.  A tick that falls due while
Redis is down is missed (there is nowhere to send it); the next one fires.

A Redis that comes back *empty* (restarted without persistence, a failover to an empty
replica, a flush) has lost the schedule itself: stock RedBeat then finds nothing due, sends
nothing and says nothing, forever.  Each tick checks that the schedule is there and re-creates
it from the app's configuration when it is not, every entry due at once (issue 31).
"""
from __future__ import annotations

import logging

import redis
from redis.exceptions import LockError
from redbeat import RedBeatScheduler

log = logging.getLogger("warmcast.workers.beat")
RETRY_S = 0.5


class WarmcastScheduler(RedBeatScheduler):
    def tick(self, min=min, **kwargs):  # noqa: A002 - Celery's signature
        try:
            if self.lock_key and self.lock is not None:
                try:
                    self.lock.extend(int(self.lock_timeout))
                except LockError:
                    # Our lock expired while Redis was away: take it again, unless another beat has it.
                    if not self.lock.acquire(blocking=False):
                        log.info("beat: another beat holds the schedule lock; standing by")
                        return self.max_interval
                    log.warning("beat: schedule lock re-acquired after losing it")
            self._ensure_schedule()
            return super().tick(min=min, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as err:
            log.warning("beat: Redis unreachable (%s); retrying in %.1f s", err, RETRY_S)
            return RETRY_S

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
