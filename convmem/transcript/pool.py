"""Pooled PostgreSQL connections the server already hung up on are dropped at checkout.

After a server restart every pooled connection is dead, and without a check the
first call on each engine fails. ``pool_pre_ping`` would fix that with a round trip
on every checkout, a tax on every append. An idle PostgreSQL connection has nothing
to read, so a readable socket means the server closed it (a restart or an
administrator's ``pg_terminate_backend`` sends a FATAL notice, then EOF): a
zero-timeout ``poll`` notices that without a round trip, and the pool replaces the
connection (``DisconnectionError`` at checkout). A call already in a transaction
when the server goes away still fails, as ``TranscriptUnavailable``, with nothing
committed. A server that vanished silently (no FIN) is not detected here.
"""

from __future__ import annotations

import select
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event


def _hung_up(dbapi_connection: Any) -> bool:
    """True when an idle connection's socket is readable or the driver marks it closed."""
    driver = getattr(dbapi_connection, "driver_connection", None) or dbapi_connection
    if getattr(driver, "closed", False) or getattr(driver, "broken", False):
        return True
    try:
        fd = driver.fileno()
    except Exception:  # psycopg raises when the connection is already gone
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)  # pragma: no cover - Windows
    return bool(readable)


def drop_hung_up_connections(engine: sa.Engine) -> None:
    """Make ``engine``'s pool replace connections the server closed (see module doc)."""

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if _hung_up(dbapi_connection):
            raise sa.exc.DisconnectionError("the server closed this pooled connection")
