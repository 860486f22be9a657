"""The ``convmem`` command.

Subcommands: ``init`` (a commented starter domain), ``domain`` (check a domain file,
print its JSON Schema), ``eval`` (score labelled sessions), ``demo`` (the six-turn
session), ``state`` (a thread's session state on Redis) and ``threads`` (the durable
record, ``convmem.transcript.cli``).

Exit status: 0 when a command completed, whatever a score says; 1 when a service
failed (a database or cache unreachable) or an answer was "no"; 2 on bad input. A
user's mistake is a one-line error naming what was wrong, never a traceback: every
command raises ``ConfigError`` for bad input and ``main`` prints it. Imports are
lazy, so ``convmem --help`` loads argparse and this module only; each command
imports what it needs (the SQL stack for ``threads``, redis-py for ``state``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convmem.errors import ConfigError, ConvMemError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from convmem.domain import Domain
    from convmem.resolve import Resolver

# --------------------------------------------------------------------------- argument types


def positive_int(text: str) -> int:
    """argparse type for counts and limits: 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def max_age_days(text: str) -> float | None:
    """argparse type for a retention: ``forever``, or days as ``30`` or ``30d``.

    ``None`` means forever. Refused: units other than days, ``nan``/``inf``, negative
    values and ages too large for a date (``1e300``).
    """
    raw = text.strip().lower()
    if raw == "forever":
        return None
    number = raw[:-1] if raw.endswith("d") else raw
    try:
        days = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of days (30 or 30d) or 'forever', got {text!r}"
        ) from None
    if not math.isfinite(days) or days < 0:
        raise argparse.ArgumentTypeError(f"expected a finite, non-negative number of days, got {text!r}")
    from convmem.transcript.records import MAX_RETENTION_DAYS  # the policy's own bound

    if days > MAX_RETENTION_DAYS:
        raise argparse.ArgumentTypeError(f"{text!r} days is longer than any retention; use 'forever'")
    return days


def database_url(text: str) -> str:
    """argparse type for ``--db``: a SQLAlchemy URL, with a hint for a bare file path."""
    import sqlalchemy as sa

    try:
        url = sa.make_url(text)
    except sa.exc.ArgumentError:
        if text.endswith((".db", ".sqlite", ".sqlite3")) or os.sep in text or "/" in text:
            raise argparse.ArgumentTypeError(
                f"{text!r} is a file path, not a database URL; use sqlite:///{text}"
            ) from None
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a database URL; use sqlite:///path.db or "
            "postgresql://user@host/dbname"
        ) from None
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql", "postgres"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: unsupported database {backend!r}; use sqlite:///path.db or "
            "postgresql://user@host/dbname"
        )
    if backend == "sqlite" and url.database in (None, "", ":memory:"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: SQLite needs a file, as sqlite:///path.db (an in-memory database "
            "would vanish when the command ends)"
        )
    return text


def redis_url(text: str) -> str:
    """argparse type for ``--redis``: a redis://, rediss:// or unix:// URL."""
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Redis URL; use redis://host:6379/0 (rediss:// for TLS)"
        )
    return text


def env_default(name: str) -> str | None:
    """An option's default from the environment; unset and empty both mean none."""
    return os.environ.get(name) or None


def add_thread_action(
    actions: Any, name: str, summary: str, description: str, thread_help: str
) -> argparse.ArgumentParser:
    """Register an ACTION on one thread: its parser, the thread id its first argument."""
    parser: argparse.ArgumentParser = actions.add_parser(
        name, help=summary, description=description
    )
    parser.add_argument("thread_id", help=thread_help)
    return parser


def _console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr)


# --------------------------------------------------------------------------- init and domain


def _section(title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
    """An empty table of the domain report, its title flush left (rich imported lazily:
    the CLI starts without it)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    return table


def cmd_init(args: argparse.Namespace) -> int:
    from convmem import examples
    from convmem.domain import domain_schema, parse_domain_bytes

    target = Path(args.path)
    if target.is_dir():
        target = target / "domain.json"
    if target.exists() and not args.force:
        raise ConfigError(f"{target} exists; pass --force to overwrite it")
    if not target.parent.is_dir():
        raise ConfigError(f"{target.parent} is not a directory")
    starter = examples.read_bytes("starter")
    parse_domain_bytes(starter, str(target))  # what we write must load
    schema = target.with_name("domain.schema.json")
    try:
        target.write_bytes(starter)
        schema.write_text(domain_schema(), "utf-8")
    except OSError as exc:
        raise ConfigError(f"{exc.filename}: cannot write ({exc.strerror})") from exc
    print(f"wrote {target} (a starter domain; \"$comment\" keys explain each part)")
    print(f"wrote {schema} (its JSON Schema, for your editor)")
    print(f"next: edit it, then `convmem domain check {target}`")
    return 0


def _load(spec: str) -> Domain:
    from convmem.domain import load_domain

    return load_domain(spec)


def cmd_domain_check(args: argparse.Namespace) -> int:
    domain = _load(args.file)
    types: dict[str, int] = {}
    for e in domain.entities:
        types[e.type] = types.get(e.type, 0) + 1
    summary: dict[str, Any] = {
        "name": domain.name,
        "entities": dict(sorted(types.items())),
        "filters": {
            key: ("period" if spec.kind == "period" else sorted(spec.values))  # type: ignore[union-attr]
            for key, spec in domain.filters.items()
        },
        "clear_phrases": {k: list(v) for k, v in domain.clear_phrases.items()},
        "formats": {k: list(v) for k, v in domain.formats.items()},
        "tools": {
            name: {
                "focus": None if rule.focus is None else {
                    "type": rule.focus.type, "id": rule.focus.id_field, "label": rule.focus.label_field,
                },
                "filters": dict(rule.filters),
            }
            for name, rule in domain.tools.items()
        },
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    from rich.text import Text

    out = _console()
    out.print(Text(f"{args.file}: domain {domain.name!r} is valid"))
    table = _section("entities", "type", "count", right=("count",))
    for etype, count in summary["entities"].items():
        table.add_row(Text(etype), str(count))
    if not types:
        table.add_row("(none: focus comes from tool results)", "0")
    out.print(table)
    table = _section("filters", "key", "kind / values", "cleared by")
    for key, kind in summary["filters"].items():
        shown = kind if isinstance(kind, str) else "vocab: " + ", ".join(kind)
        table.add_row(Text(key), Text(shown), Text(", ".join(summary["clear_phrases"].get(key, []))))
    out.print(table)
    table = _section("formats", "format", "cue phrases")
    for fmt, cues in summary["formats"].items():
        table.add_row(fmt, Text(", ".join(cues)))
    out.print(table)
    table = _section("tools", "tool", "sets focus (type: id field, label field)",
                     "sets filters (filter <- argument)")
    for name, rule in summary["tools"].items():
        focus = rule["focus"]
        table.add_row(  # Text throughout: a domain's words are data, never rich markup
            Text(name),
            Text("-" if focus is None else f"{focus['type']}: {focus['id']}, {focus['label']}"),
            Text(", ".join(f"{k} <- {v}" for k, v in rule["filters"].items()) or "-"),
        )
    out.print(table)
    return 0


def cmd_domain_schema(args: argparse.Namespace) -> int:
    from convmem.domain import domain_schema

    sys.stdout.write(domain_schema())
    return 0


# --------------------------------------------------------------------------- eval and demo


def _resolver_factory(spec: str | None) -> Resolver | None:
    if spec is None:
        return None
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ConfigError(f"--resolver {spec!r}: expected module:factory (e.g. myapp.llm:make_resolver)")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--resolver {spec!r}: {exc}") from exc
    except Exception as exc:  # the user's module failed while importing: say so, no traceback
        raise ConfigError(f"--resolver {spec!r}: importing {module} raised {exc!r}") from exc
    if not callable(factory):
        raise ConfigError(f"--resolver {spec!r}: {attr} is not callable")
    try:
        resolver = factory()
    except Exception as exc:  # the user's factory: report it as bad input
        raise ConfigError(f"--resolver {spec!r}: {attr}() raised {exc!r}") from exc
    if not callable(getattr(resolver, "resolve", None)) or not callable(
        getattr(resolver, "aresolve", None)
    ):
        raise ConfigError(
            f"--resolver {spec!r}: {attr}() returned {type(resolver).__name__}, which has no "
            "resolve/aresolve methods (a convmem.Resolver)"
        )
    return resolver  # type: ignore[no-any-return]


def cmd_eval(args: argparse.Namespace) -> int:
    from convmem.evaluation import SLOTS, domain_loader, read_sessions, replay

    sessions = read_sessions(args.file)
    report = replay(sessions, domain_loader(args.domains), resolver=_resolver_factory(args.resolver))
    summary = report.summary(per_turn=args.per_turn)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    from rich.table import Table

    console = _console()
    scopes = {"all": summary, **summary["per_domain"]}
    table = Table(title=f"convmem eval: {args.file}")
    table.add_column("metric")
    for name in scopes:
        table.add_column(name, justify="right")
    table.add_row("turns", *(str(s["turns"]) for s in scopes.values()))
    table.add_row("fully correct",
                  *(f"{s['turns_fully_correct']} ({s['accuracy']:.1%})" for s in scopes.values()))
    for slot in SLOTS:
        table.add_row(f"  {slot}", *("—" if s["per_slot"][slot] is None else f"{s['per_slot'][slot]:.1%}"
                                      for s in scopes.values()))
    table.add_row("clarify rate, turns", *(f"{s['clarify_rate']['turns']:.1%}" for s in scopes.values()))
    table.add_row("clarify rate, sessions",
                  *(f"{s['clarify_rate']['sessions']:.1%}" for s in scopes.values()))
    console.print(table)
    for tag, t in summary["per_tag"].items():
        console.print(f"tag {tag}: {t['turns_fully_correct']}/{t['turns']} fully correct ({t['accuracy']:.1%})")
    for f in summary["failures"]:
        console.print(f"[red]✗[/red] {f['session']} turn {f['turn']}: {f['user']!r} wrong {f['wrong']}")
        console.print(f"    expected {json.dumps(f['expected'], sort_keys=True)}")
        console.print(f"    actual   {json.dumps(f['actual'], sort_keys=True)}")
    if args.per_turn:
        for t in summary["per_turn"]:
            console.print(f"{t['session']} {t['turn']}: {json.dumps(t['actual'], sort_keys=True)}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from convmem.demo import record_demo, run_demo
    from convmem.identity import check_tenant

    thread_id: str | None = None
    if args.db:
        tenant = check_tenant(args.tenant, "--tenant")
        try:
            thread_id, rows = record_demo(args.db, tenant=tenant)
        except ImportError as exc:  # psycopg missing for a postgresql:// URL
            raise ConfigError(f"--db {args.db!r}: {exc}; pip install \"convmem[postgres]\"") from exc
    else:
        rows = run_demo()
    if args.json:
        doc: dict[str, Any] = {"turns": [r.as_json() for r in rows]}
        if thread_id is not None:
            doc["thread_id"] = thread_id
            doc["tenant"] = args.tenant
        print(json.dumps(doc, indent=2))
        return 0
    from rich.table import Table

    console = _console()
    for r in rows:
        console.rule(f"turn {r.turn}")
        console.print(f"[bold]user:[/bold] {r.question}", markup=True, highlight=False)
        if r.clarification:
            console.print(f"[yellow]clarify (no model call):[/yellow]\n{r.clarification}", highlight=False)
        else:
            console.print(f"[bold]rewrite:[/bold] {r.rewritten}", highlight=False)
        console.print(r.block or "(empty block)", markup=False, highlight=False)
    table = Table(title="prompt tokens per turn (4,000-token system+context, 2,000-token answers)")
    for col in ("turn", "replay raw history", "convmem", "memory-added"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r.turn), f"{r.replay_tokens:,}", f"{r.convmem_tokens:,}", str(r.memory_tokens))
    console.print(table)
    if thread_id is not None:
        import shlex

        print(f"thread_id={thread_id}", flush=True)
        print(f"tenant={args.tenant}", flush=True)
        base = f"convmem threads --db {shlex.quote(args.db)} --tenant {shlex.quote(args.tenant)}"
        print(f"next: {base} show {thread_id}", flush=True)
    return 0


# --------------------------------------------------------------------------- state


def cmd_state(args: argparse.Namespace) -> int:
    from convmem.identity import check_tenant, check_thread_id

    if not args.redis:
        raise ConfigError("give --redis URL or set CONVMEM_REDIS_URL")
    if not args.tenant:
        raise ConfigError("give --tenant T or set CONVMEM_TENANT")
    tenant = check_tenant(args.tenant, "--tenant")
    thread_id = check_thread_id(args.thread_id, "thread_id")
    try:
        from convmem.stores.redis import RedisClusterSessionStateStore, RedisSessionStateStore
    except ImportError as exc:
        raise ConfigError(f"convmem state needs redis-py: pip install \"convmem[redis]\" ({exc})") from exc
    kind = RedisClusterSessionStateStore if args.cluster else RedisSessionStateStore
    # strict: an unreachable server is an error here, not the empty state a turn degrades to
    store = kind(args.redis, prefix=args.prefix, strict=True, socket_timeout=args.timeout)
    try:
        try:
            state = store.load(tenant, thread_id)
        except ValueError as exc:  # redis-py refusing the URL (bad port, bad db number)
            raise ConfigError(f"--redis {args.redis!r}: {exc}") from exc
        if state is None:
            print(f"no session state for tenant {tenant!r}, thread {thread_id!r} "
                  "(never written, or expired after its TTL)")
            return 1 if args.state_command == "show" else 0
        if args.state_command == "reset":
            store.delete(tenant, thread_id)
            print(f"reset: session state of tenant {tenant!r}, thread {thread_id!r} deleted "
                  f"(version {state.version}); the durable record, if any, is untouched")
            return 0
        if args.json:
            from convmem.state import encode_state

            sys.stdout.write(encode_state(state).decode("utf-8") + "\n")
            return 0
        from convmem.render import render

        print(f"tenant={tenant} thread_id={thread_id} version={state.version} turn={state.turn}")
        print(render(state) or "(empty state)")
        if state.pending is not None:
            print(f"pending clarification of: {state.pending.question}")
        return 0
    finally:
        store.close()


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convmem",
        description="Session state and a durable conversation record for LangChain and "
        "LlamaIndex applications.",
        epilog="Start with `convmem init`, then `convmem domain check domain.json`. "
        "Exit status: 0 done, 1 a service failed or the answer was no, 2 bad input.",
    )
    from convmem import __version__

    parser.add_argument("--version", action="version", version=f"convmem {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = sub.add_parser("init", help="write a commented starter domain file",
                          description="Write a commented starter domain (and its JSON Schema "
                          "beside it, for editors).")
    init.add_argument("path", nargs="?", default="domain.json",
                      help="file (or directory) to write; default domain.json")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(run=cmd_init)

    dom = sub.add_parser("domain", help="check a domain file, print its JSON Schema",
                         description="Domain files: check one, or print the JSON Schema.")
    dsub = dom.add_subparsers(dest="domain_command", required=True, metavar="ACTION")
    check = dsub.add_parser("check", help="validate a domain and print what it defines",
                            description="Validate a domain file and print its entity types, "
                            "filters, formats and tool rules; exit 2 with the file and JSON path "
                            "of the first error.")
    check.add_argument("file", help="a domain file, or the name of a bundled example (crm, crm_typed, helpdesk)")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(run=cmd_domain_check)
    schema = dsub.add_parser("schema", help="print the domain file's JSON Schema",
                             description="Print the domain file's JSON Schema (draft 2020-12).")
    schema.set_defaults(run=cmd_domain_schema)

    ev = sub.add_parser("eval", help="replay labelled sessions and score them",
                        description="Replay labelled sessions (spec §6) and score focus, "
                        "filters, format, clarification, options and rewrite per turn. "
                        "Exits 0 when the run completed, whatever the score.")
    ev.add_argument("file", help="labelled sessions, one JSON object per line")
    ev.add_argument("--domains", default=None,
                    help="directory holding <domain>.json files (default: the bundled examples)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--per-turn", action="store_true", help="include every turn's actual state")
    ev.add_argument("--resolver", help="module:factory returning a Resolver (e.g. an LLM resolver)")
    ev.set_defaults(run=cmd_eval)

    demo = sub.add_parser("demo", help="the six-turn demo session, replay vs convmem",
                          description="Play a six-turn session and compare prompt tokens with "
                          "replaying raw history.")
    demo.add_argument("--json", action="store_true", help="print one JSON object")
    demo.add_argument("--db", type=database_url,
                      help="also record the session (one edit, one regeneration) in a "
                      "transcript at this URL (sqlite:///file.db or postgresql://...); the "
                      "schema is created if missing")
    demo.add_argument("--tenant", default="demo", help="tenant of the recorded thread (with --db)")
    demo.set_defaults(run=cmd_demo)

    st = sub.add_parser("state", help="show or reset a thread's session state on Redis",
                        description="Show or reset one thread's session state in the Redis "
                        "cache (the durable record is `convmem threads`).")
    st.add_argument("--redis", type=redis_url, default=env_default("CONVMEM_REDIS_URL"),
                    help="Redis URL (redis://host:6379/0); env CONVMEM_REDIS_URL")
    st.add_argument("--tenant", default=env_default("CONVMEM_TENANT"),
                    help="tenant of the thread; env CONVMEM_TENANT")
    st.add_argument("--cluster", action="store_true", help="the URL names a Redis Cluster node")
    st.add_argument("--prefix", default="convmem", help="key prefix the application uses (default convmem)")
    st.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for the server (default 2)")
    ssub = st.add_subparsers(dest="state_command", required=True, metavar="ACTION")
    app_thread = "the application's thread id"
    show = add_thread_action(ssub, "show", "print the state block, version and turn",
                             "Print a thread's session state as the model sees it.", app_thread)
    show.add_argument("--json", action="store_true", help="print the stored JSON instead")
    add_thread_action(ssub, "reset", "delete the thread's session state",
                      "Delete a thread's session state; its next turn starts empty.", app_thread)
    st.set_defaults(run=cmd_state)

    from convmem.transcript.cli import add_threads_parser

    add_threads_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if not hasattr(args, "run"):  # `convmem threads ...` dispatches through its own handler
            threads_code: int = args.func(args)
            return threads_code
        code: int = args.run(args)
    except ConfigError as exc:
        print(f"convmem {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ConvMemError as exc:  # a service failed (StateUnavailable, TranscriptUnavailable)
        print(f"convmem {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("convmem: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
