"""What convmem's Redis stores say on the wire, and how they read the replies.

The Lua scripts (compare-and-set on the stored version, discard-if-unchanged), the
command helpers (``EVALSHA`` with its ``EVAL`` fall-back for a cold script cache), and the
classification of what redis-py raises: a *misconfiguration* (refused credentials, a
database the server does not have, not a Redis server, the wrong store class) raises
``ConfigError``; an *outage* degrades. Kept apart from the store classes so that the rules
for the server fit on one screen, and the stores on another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.connection
import redis.exceptions

from convmem.batching import LoopTurnBatches, Queued
from convmem.errors import ConfigError
from convmem.state import COUNT_LIMIT, MAX_STATE_BYTES, READABLE_FORMATS

T = TypeVar("T")
Command = tuple[Any, ...]
Steps = Generator[Command, Any, T]

#: Compare-and-set. KEYS[1] state key; ARGV: expected version, new value, TTL in ms.
#: The stored version is read as ``convmem.state.stored_version`` does: 0 for a value
#: over the size limit, the digits after the head ``{"v":<f>,"version":`` for a value we
#: encoded in any readable format ``<f>`` (``READABLE_FORMATS``, one digit each: no JSON
#: decoding on the hot path), else the ``version`` of a JSON object in a readable format,
#: else 0. Either number counts only under the decoder's rule
#: (``convmem.state.whole_number``: a whole number 0 <= v < 2**53, no leading zero in the
#: head; ``whole`` below), else it is 0 too: a value the decoder refuses for its version
#: is "not ours" here as well, so ``expected_version=0`` replaces it (even one of
#: another Redis type: the GET error is caught). The SET refreshes the TTL.
#: Replies with one integer: the new version (>= 1) when written, or
#: ``-1 - stored_version`` (<= -1) on a conflict.
CAS_SCRIPT = """
local function whole(n)
  if type(n) == 'number' and n >= 0 and n < @LIMIT@ and math.floor(n) == n then
    return n
  end
  return 0
end
local version = 0
local ok, cur = pcall(redis.call, 'GET', KEYS[1])
if ok and cur and string.len(cur) <= @MAX_BYTES@ then
  local head = string.match(cur, '^{"v":[@FORMATS@],"version":(%d+)[,}]')
  if head then
    if string.len(head) <= 16 and (head == '0' or string.sub(head, 1, 1) ~= '0') then
      version = whole(tonumber(head))
    end
  else
    local decoded, data = pcall(cjson.decode, cur)
    if decoded and type(data) == 'table' and type(data['v']) == 'number' and @READABLE@ then
      if data['version'] ~= nil then
        version = whole(data['version'])
      end
    end
  end
end
if version ~= tonumber(ARGV[1]) then
  return -1 - version
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return version + 1
""".replace("@MAX_BYTES@", str(MAX_STATE_BYTES)).replace(
    "@FORMATS@", "".join(str(v) for v in READABLE_FORMATS)).replace(
    "@READABLE@", "(" + " or ".join(f"data['v'] == {v}" for v in READABLE_FORMATS) + ")").replace(
    "@LIMIT@", str(COUNT_LIMIT))

#: Delete a corrupt value only if it is still the one we read (its SHA-1 matches).
DISCARD_SCRIPT = """
local ok, cur = pcall(redis.call, 'GET', KEYS[1])
if ok and cur and redis.sha1hex(cur) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

CAS_SHA = hashlib.sha1(CAS_SCRIPT.encode()).hexdigest()
DISCARD_SHA = hashlib.sha1(DISCARD_SCRIPT.encode()).hexdigest()
_SCRIPTS = {CAS_SHA: CAS_SCRIPT, DISCARD_SHA: DISCARD_SCRIPT}

#: What "the store is unavailable" means; anything else is a bug and propagates.
#: (Authentication errors are ``ConnectionError`` subclasses: ``misconfiguration``
#: is asked first.)
UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,  # includes refused, reset, BusyLoading
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterError,  # includes CLUSTERDOWN
    redis.exceptions.RedisClusterException,  # includes slot not covered, no nodes
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
    OSError,
)

#: Error replies of a server that is up but cannot serve for now: an outage, degraded.
#: WRONGTYPE (a value of another Redis type at our key) is not ours: treated like a
#: corrupt value. A script's error reply quotes the inner command's.
_TRANSIENT_REPLIES = ("WRONGTYPE", "MISCONF", "BUSY ", "NOREPLICAS", "OOM ", "LOADING")

_AUTH_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthorizationError,
    redis.exceptions.AuthenticationWrongNumberOfArgsError,
    redis.exceptions.NoPermissionError,
)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from (redis-py's cluster client wraps the node's
    error in a ``RedisClusterException``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def misconfiguration(exc: BaseException) -> str | None:
    """What is wrong with the configuration and what to do, when ``exc`` says so; None
    for an outage or anything else. Spec §5: these raise, they never degrade."""
    for e in _causes(exc):
        text = str(e)
        if isinstance(e, _AUTH_ERRORS) or any(w in text for w in ("NOAUTH", "WRONGPASS", "NOPERM")):
            return (f"the server refused our credentials ({text}); check the user name and "
                    "password in the URL (redis://user:password@host:port/db) or the client's")
        if isinstance(e, redis.exceptions.InvalidResponse):
            return (f"the server does not speak the Redis protocol ({text}); check that the "
                    "host and port are a Redis server's")
        if "DB index is out of range" in text:
            return ("the database number in the URL is beyond the server's `databases` "
                    "setting (16 by default: 0-15); use one that exists")
        if "Cluster mode is not enabled" in text:
            return ("the server is a standalone Redis, not a cluster node; use "
                    "RedisSessionStateStore for it")
        if isinstance(e, redis.exceptions.AskError):  # MOVED / ASK outside a cluster client
            return (f"the server is a Redis Cluster node (it answered MOVED/ASK {text}); use "
                    "RedisClusterSessionStateStore for it")
        if "unknown command" in text and isinstance(e, redis.exceptions.ResponseError):
            return (f"the server lacks a command this store needs ({text}); it needs Redis "
                    "6.2 or later with Lua scripting (EVAL/EVALSHA) enabled")
    return None


def is_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, UNAVAILABLE):
        return True
    return isinstance(exc, redis.exceptions.ResponseError) and any(
        reply in str(exc) for reply in _TRANSIENT_REPLIES)


def shown_url(url: str) -> str:
    """``url`` with its password masked, for error messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port is not None else ""
        netloc = f"{parts.username or ''}:***@{host}{port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<a malformed URL>"


def checked_url(url: str, store: str, *, cluster: bool) -> str:
    """``url`` when redis-py can use it as written, else ``ConfigError`` naming it."""
    shown = shown_url(url)
    try:
        options: dict[str, Any] = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{store}: malformed Redis URL {shown!r}: {exc}") from exc
    db = urlsplit(url).path.strip("/")
    if not url.startswith("unix://") and db and not db.isdigit():
        # redis-py would silently use database 0
        raise ConfigError(f"{store}: malformed Redis URL {shown!r}: the path must be a "
                          f"database number (redis://host:port/0), got {db!r}")
    if cluster and options.get("db") not in (0, None):
        raise ConfigError(f"{store}: Redis Cluster has only database 0; the URL {shown!r} "
                          f"asks for database {options['db']}")
    if cluster and url.startswith("unix://"):
        raise ConfigError(f"{store}: Redis Cluster is reached over TCP, not {shown!r}")
    return url


def glob_escape(text: str) -> str:
    """Escape SCAN MATCH metacharacters so a tenant name matches literally."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def as_bytes(raw: bytes | str) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode()


def as_text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def script_command(sha: str, key: str, *args: Any) -> Command:
    return ("EVALSHA", sha, 1, key, *args)


def eval_fallback(command: Command) -> Command:
    """``EVALSHA sha ...`` -> ``EVAL script ...`` (also warms the script cache)."""
    return ("EVAL", _SCRIPTS[command[1]], *command[2:])


def _dropped(exc: AttributeError) -> redis.exceptions.ConnectionError:
    """redis-py's cluster clients close every node connection after a timeout, including
    ones other callers are using mid-command; those then fail inside redis-py with an
    AttributeError on the reset reader or writer. It is the same outage: report it as one."""
    return redis.exceptions.ConnectionError(f"connection reset under a concurrent command ({exc})")


def call_command(client: Any, command: Command) -> Any:
    """One command; only what redis-py itself raises can come out of here."""
    try:
        return client.execute_command(*command)
    except AttributeError as exc:
        raise _dropped(exc) from exc


async def acall_command(client: Any, command: Command) -> Any:
    """Async ``call_command``."""
    try:
        return await client.execute_command(*command)
    except AttributeError as exc:
        raise _dropped(exc) from exc


#: Most commands one pipeline carries; a bigger loop turn's commands go out as several.
BATCH_LIMIT = 256


class CommandBatches:
    """Auto-pipelining for one async client: the commands that callers issue during one
    turn of the event loop go out as one non-transactional pipeline, on one pooled
    connection, in one write and one read (what ioredis calls ``enableAutoPipelining``;
    the batching itself is ``convmem.batching.LoopTurnBatches``).

    Each caller still gets its own reply or its own error: a command's ``ResponseError``
    (``NOSCRIPT``, ``WRONGTYPE``) goes to that caller alone; an error of the pipeline
    itself (an outage, a timeout, refused credentials) goes to every caller in it, each of
    which degrades or raises as it would have alone. Under many concurrent sessions this
    replaces one pool checkout, write, wake-up and read per command by one per loop turn.
    A command alone in its loop turn is sent by its caller, as unbatched.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self._batches: LoopTurnBatches[Command, Any] = LoopTurnBatches(
            self._send, self._alone, BATCH_LIMIT)

    async def call(self, command: Command) -> Any:
        """``command``'s reply, sent with the other commands of this loop turn."""
        return await self._batches.call(command)

    async def _alone(self, command: Command) -> Any:
        return await acall_command(self.client, command)

    async def _send(self, batch: list[Queued[Command, Any]]) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            for queued in batch:
                pipe.execute_command(*queued.item)
            replies = await pipe.execute(raise_on_error=False)  # resets the pipeline
        except AttributeError as exc:
            raise _dropped(exc) from exc
        for queued, value in zip(batch, replies, strict=True):
            queued.settle(value)  # a command's own error (an exception) is its caller's
