"""Degradation on purpose: one place that turns a store failure into an empty state.

Session state is a cache; losing it costs one repeated question, so an outage must
never fail a turn. A store reports every failed operation here. The first failure of
an *incident* logs one WARNING on ``convmem.stores`` and bumps ``stats.degraded``;
later failures of the same incident stay quiet (a dead server would otherwise log on
every turn), and the incident ends at the next successful operation, so the next
outage is reported again. ``strict=True`` raises ``StateUnavailable`` instead, for
deployments that prefer failing loudly.
"""

from __future__ import annotations

import logging
import threading

from convmem.errors import StateUnavailable
from convmem.stores.base import StoreStats

logger = logging.getLogger("convmem.stores")


class Incidents:
    """Incident bookkeeping for one store (thread-safe; cheap on the success path)."""

    def __init__(self, store_name: str, stats: StoreStats, *, strict: bool) -> None:
        self.store_name = store_name
        self.stats = stats
        self.strict = strict
        self._open = False
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        """True while an incident is in progress (no success since the last failure)."""
        return self._open

    def failed(self, operation: str, key: str, error: BaseException) -> None:
        """Record a failure; raises ``StateUnavailable`` when strict, else returns."""
        if self.strict:
            raise StateUnavailable(
                f"{self.store_name} {operation} {key!r} failed: {_describe(error)}"
            ) from error
        with self._lock:
            first = not self._open
            self._open = True
            if first:
                self.stats.degraded += 1
        if first:
            logger.warning(
                "%s degraded: %s %r failed (%s); continuing with an empty session state "
                "until the store answers again",
                self.store_name, operation, key, _describe(error),
            )

    def succeeded(self) -> None:
        """An operation worked: close the incident, if one is open."""
        if self._open:  # unlocked fast path: a stale read only delays the close by one call
            with self._lock:
                was_open, self._open = self._open, False
            if was_open:
                logger.info("%s recovered", self.store_name)


def _describe(error: BaseException) -> str:
    """``Type: message`` (redis-py 7's ``repr`` of its errors drops the message)."""
    return f"{type(error).__name__}: {error}"
