"""The ``convmem`` command: ``eval`` (labelled sessions), ``demo`` (the six-turn session)
and, with the transcript installed, ``threads`` (the durable record).

Exit status: 0 when a command completed, whatever a score says; 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from convmem.errors import ConfigError


def _resolver_factory(spec: str | None) -> Any:
    if spec is None:
        return None
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ConfigError(f"--resolver {spec!r}: expected module:factory")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--resolver {spec!r}: {exc}") from exc
    return factory()


def cmd_eval(args: argparse.Namespace, console: Console) -> int:
    from convmem.evaluation import SLOTS, domain_loader, read_sessions, replay

    sessions = read_sessions(args.file)
    report = replay(sessions, domain_loader(args.domains), resolver=_resolver_factory(args.resolver))
    summary = report.summary(per_turn=args.per_turn)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
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


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from convmem.demo import record_demo, run_demo

    thread_id: str | None = None
    if args.db:
        thread_id, rows = record_demo(args.db, tenant=args.tenant)
    else:
        rows = run_demo()
    if args.json:
        doc: dict[str, Any] = {"turns": [r.as_json() for r in rows]}
        if thread_id is not None:
            doc["thread_id"] = thread_id
        print(json.dumps(doc, indent=2))
        return 0
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
        print(f"thread_id={thread_id}", flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="convmem", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="replay labelled sessions and score them")
    ev.add_argument("file", help="labelled sessions, one JSON object per line")
    ev.add_argument("--domains", required=True, help="directory holding <domain>.json files")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--per-turn", action="store_true", help="include every turn's actual state")
    ev.add_argument("--resolver", help="module:factory returning a Resolver (e.g. an LLM resolver)")
    ev.set_defaults(run=cmd_eval)
    demo = sub.add_parser("demo", help="the six-turn demo session, replay vs convmem")
    demo.add_argument("--json", action="store_true")
    demo.add_argument("--db", help="also record the session (one edit, one regeneration) in a "
                      "transcript at this URL (sqlite:///file.db or postgresql://...)")
    demo.add_argument("--tenant", default="demo", help="tenant of the recorded thread (--db)")
    demo.set_defaults(run=cmd_demo)
    from convmem.transcript.cli import add_threads_parser

    add_threads_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console(stderr=False)
    try:
        if not hasattr(args, "run"):  # `convmem threads ...` dispatches through its own handler
            threads_code: int = args.func(args)
            return threads_code
        code: int = args.run(args, console)
    except ConfigError as exc:
        print(f"convmem: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
