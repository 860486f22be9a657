"""``convmem threads``: the durable record from a shell.

``add_threads_parser(subparsers)`` registers
``threads --db URL --tenant T {list,show,export,import,redact,delete,sweep,search,migrate}``
on the application's argparse tree (``CONVMEM_DATABASE_URL`` and ``CONVMEM_TENANT``
are the defaults) and sets ``func`` to ``run_threads``, which returns the exit code.
``export`` writes the canonical JSON to stdout byte for byte, so ``cmp`` can compare
two exports; ``show`` draws the branch tree with the active path marked; ``sweep``
is a dry run unless ``--apply`` and always needs the default policy spelled out;
``delete`` asks first unless ``--yes``.

User mistakes end in one line and exit 2, before the database is touched where
possible: a bare path as ``--db`` (with the ``sqlite:///`` spelling to use), a
SQLite file that does not exist or a database never migrated (with the ``migrate``
command to run), an import file that is missing, a directory, not UTF-8, truncated
or nested too deeply. A database that cannot be reached, or an operation the record
refuses (an unknown thread, an id taken), exits 1. The SQL stack and ``rich`` are
imported when a command runs, not when the parser is built.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convmem.cli import database_url, max_age_days, positive_int
from convmem.errors import ConfigError, ConvMemError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.tree import Tree

    from convmem.transcript.records import Message, ThreadTree
    from convmem.transcript.store import TranscriptStore


def add_threads_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``threads`` on an ``add_subparsers()`` object; returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "threads",
        help="inspect, export, redact and delete conversation records",
        description="The durable conversation record: list, show, export, import, redact, "
        "delete, sweep and search threads, and create or upgrade the schema.",
    )
    p.add_argument(
        "--db",
        type=database_url,
        default=os.environ.get("CONVMEM_DATABASE_URL") or None,
        help="database URL (sqlite:///file.db or postgresql://...); env CONVMEM_DATABASE_URL",
    )
    p.add_argument(
        "--tenant",
        default=os.environ.get("CONVMEM_TENANT") or None,
        help="tenant whose threads are addressed; env CONVMEM_TENANT",
    )
    sub = p.add_subparsers(dest="threads_command", required=True, metavar="ACTION")
    ls = sub.add_parser("list", help="threads of the tenant, most recent first",
                        description="List the tenant's threads, most recent first.")
    ls.add_argument("--limit", type=positive_int, default=50,
                    help="at most this many threads (default 50)")
    show = sub.add_parser("show", help="draw the branch tree, active path marked",
                          description="Draw a thread's branch tree; the active path is marked.")
    show.add_argument("thread_id", help="id of the thread")
    show.add_argument("--execution", action="store_true", help="include the execution log")
    exp = sub.add_parser("export", help="canonical JSON of the whole thread to stdout",
                         description="Write the thread's canonical JSON export to stdout.")
    exp.add_argument("thread_id", help="id of the thread")
    exp.add_argument("--user-view", action="store_true", help="only what the user saw")
    imp = sub.add_parser("import", help="load an export (file or - for stdin)",
                         description="Load a thread export into the tenant.")
    imp.add_argument("file", help="an export written by `convmem threads export`, or - for stdin")
    imp.add_argument("--new-id", action="store_true", help="give the thread fresh ids")
    red = sub.add_parser("redact", help="remove a message's content everywhere it reached",
                         description="Redact a message: its content, every copy and everything "
                         "derived from it.")
    red.add_argument("thread_id", help="id of the thread")
    red.add_argument("message_id", help="id of the message (see `show`)")
    red.add_argument("--actor", required=True, help="who asks for the redaction (recorded)")
    red.add_argument("--reason", required=True, help="why (recorded), e.g. 'GDPR art. 17'")
    dele = sub.add_parser("delete", help="delete a thread and everything of it",
                          description="Delete a thread, its derived rows and attachments. "
                          "Asks for confirmation unless --yes.")
    dele.add_argument("thread_id", help="id of the thread")
    dele.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    sw = sub.add_parser("sweep", help="delete threads past retention (dry run unless --apply)",
                        description="Find threads past their retention; delete them with --apply.")
    sw.add_argument(
        "--default-max-age",
        required=True,
        type=max_age_days,
        help="policy for threads without their own: days (30 or 30d) or 'forever'",
    )
    sw.add_argument("--owner", required=True, help="who owns the default policy")
    sw.add_argument("--apply", action="store_true", help="really delete")
    sw.add_argument("--all-tenants", action="store_true", help="ignore --tenant")
    se = sub.add_parser("search", help="full-text search over the tenant's messages",
                        description="Full-text search over the tenant's messages.")
    se.add_argument("query", help="words to look for")
    se.add_argument("--thread", default=None, help="only this thread")
    se.add_argument("--limit", type=positive_int, default=20, help="at most this many hits (default 20)")
    sub.add_parser("migrate", help="create or upgrade the schema",
                   description="Create or upgrade the record's schema (safe to run again).")
    p.set_defaults(func=run_threads)
    return p


def _short(text: str, width: int = 70) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def _label(m: Message, active: bool) -> str:
    from rich.markup import escape

    kinds = sorted({p.kind for p in m.parts if p.kind != "text"})
    body = escape(_short(m.text) or ("[" + ", ".join(kinds) + "]"))
    mark = "[bold green]●[/]" if active else "[dim]○[/]"
    style = "bold" if active else "dim"
    extra = " [red](redacted)[/]" if m.redacted else ""
    copy = f" [dim]copy of {m.copy_of[:8]}[/]" if m.copy_of else ""
    return f"{mark} [{style}]#{m.seq} {m.role}[/]: {body}{extra}{copy} [dim]{m.id}[/]" + (
        "" if m.visibility == "conversation" else " [yellow](execution)[/]"
    )


def render_tree(tree: ThreadTree, *, execution: bool = True) -> Tree:
    """The branch tree as a ``rich`` tree; the active path is marked ●.

    A run of messages without alternatives is one node of several lines, so the
    tree only indents where a thread branches (an edit, a regeneration, a fork
    point); hidden execution-log messages pass their children up.
    """
    from rich.markup import escape
    from rich.tree import Tree

    th = tree.thread
    title = escape(th.title or "(untitled)")
    root = Tree(f"[bold]{title}[/] [dim]{th.id} key={escape(repr(th.key))}[/]")
    active = set(tree.active_path_ids)
    children: dict[str | None, list[Message]] = {}
    for m in tree.messages:
        children.setdefault(m.parent_id, []).append(m)

    def shown(parent_id: str | None) -> list[Message]:
        out: list[Message] = []
        for child in children.get(parent_id, []):
            if not execution and child.visibility == "execution":
                out.extend(shown(child.id))
            else:
                out.append(child)
        return out

    def add(node: Tree, parent_id: str | None) -> None:
        for child in shown(parent_id):
            run = [child]
            while len(following := shown(run[-1].id)) == 1:
                run.append(following[0])
            add(node.add("\n".join(_label(m, m.id in active) for m in run)), run[-1].id)

    add(root, None)
    return root


def _read_export(file: str) -> dict[str, Any]:
    """The import document, parsed here so a bad file is one line of error, exit 2."""
    name = "standard input" if file == "-" else file
    try:
        raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read ({exc.strerror})") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text (byte {exc.start}); is this an export?") from exc
    if not text.strip():
        raise ConfigError(f"{name}: empty; expected the JSON of `convmem threads export`")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = "" if text.rstrip().endswith(("}", "]")) else " (the file ends early: truncated?)"
        raise ConfigError(
            f"{name}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}{hint}"
        ) from exc
    except RecursionError as exc:  # json's parser recurses once per nesting level
        raise ConfigError(f"{name}: nested too deeply to be an export") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"{name}: expected a JSON object (an export), got {type(doc).__name__}")
    from convmem.transcript.export import load_document

    try:
        return load_document(doc)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from exc


def _check_database(store: TranscriptStore, url: str, cmd: str) -> None:
    """Refuse, with the command to run, a database that was never migrated."""
    if store.engine.dialect.name == "sqlite":
        path = store.engine.url.database or ""
        if not Path(path).is_file():  # asking SQLite would create an empty file
            raise ConfigError(
                f"no database file at {path}; create it with "
                f"`convmem threads --db {shlex.quote(url)} migrate`"
            )
    if not store.has_schema():
        raise ConfigError(
            f"{url} has no convmem schema yet; run `convmem threads --db {shlex.quote(url)} migrate`"
        )


def _confirm(question: str) -> bool:
    """Ask on the terminal; no answer (EOF, as in a script) is "no"."""
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        print()
        return False
    return answer.strip().lower() in ("y", "yes")


def run_threads(args: argparse.Namespace) -> int:
    """Handle ``convmem threads ...``; returns the process exit code."""
    from rich.console import Console

    from convmem.identity import check_tenant
    from convmem.transcript.records import RetentionPolicy
    from convmem.transcript.store import TranscriptStore

    err = Console(stderr=True, highlight=False)  # progress bars; messages are plain lines
    cmd = args.threads_command
    try:
        if not args.db:
            raise ConfigError("give --db URL or set CONVMEM_DATABASE_URL")
        if cmd not in ("migrate", "sweep") and not args.tenant:
            raise ConfigError("give --tenant T or set CONVMEM_TENANT")
        if args.tenant:
            check_tenant(args.tenant, "--tenant")
        policy = RetentionPolicy(max_age=None, owner="convmem-cli")  # read-only commands
        if cmd == "sweep":
            if not args.all_tenants and not args.tenant:
                raise ConfigError("give --tenant T or --all-tenants")
            days = args.default_max_age
            policy = RetentionPolicy(
                max_age=None if days is None else timedelta(days=days), owner=args.owner
            )
        document = _read_export(args.file) if cmd == "import" else None
    except ConfigError as exc:
        print(f"convmem threads {cmd}: error: {exc}", file=sys.stderr)
        return 2
    try:
        store = TranscriptStore(args.db, retention=policy)
    except ImportError as exc:  # psycopg missing for a postgresql:// URL
        print(f"convmem threads {cmd}: error: {exc}; pip install \"convmem[postgres]\"",
              file=sys.stderr)
        return 2
    try:
        if cmd != "migrate":
            try:
                _check_database(store, args.db, cmd)
            except ConfigError as exc:
                print(f"convmem threads {cmd}: error: {exc}", file=sys.stderr)
                return 2
        if cmd == "delete" and not args.yes and not _confirm(
            f"Delete thread {args.thread_id} of tenant {args.tenant} and everything derived "
            "from it?"
        ):
            print("nothing deleted (answer y, or pass --yes)", file=sys.stderr)
            return 1
        return _dispatch(store, args, err, document)
    except ConvMemError as exc:
        print(f"convmem threads {cmd}: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()


def _dispatch(
    store: TranscriptStore, args: argparse.Namespace, err: Console, document: Any = None
) -> int:
    from rich.console import Console
    from rich.markup import escape

    out = Console()
    tenant: str = args.tenant
    cmd = args.threads_command
    if cmd == "migrate":
        store.migrate()
        out.print("schema at head")
    elif cmd == "list":
        threads = store.list_threads(tenant, limit=args.limit)
        if not threads:
            out.print(f"tenant {tenant!r} has no threads", markup=False, highlight=False)
            return 0
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"threads of tenant {tenant!r}, most recent first", title_justify="left")
        for col in ("thread_id", "updated (UTC)", "key", "title"):
            table.add_column(col, overflow="fold")
        for th in threads:
            table.add_row(  # Text: a key or title is data, never rich markup
                th.id, f"{th.updated_at:%Y-%m-%d %H:%M:%S}", Text(th.key or ""), Text(th.title or "")
            )
        out.print(table)
    elif cmd == "show":
        out.print(render_tree(store.tree(tenant, args.thread_id), execution=args.execution))
    elif cmd == "export":
        text = (
            store.export_user_view(tenant, args.thread_id)
            if args.user_view
            else store.export_thread(tenant, args.thread_id)
        )
        sys.stdout.write(text)
        sys.stdout.flush()
    elif cmd == "import":
        th = store.import_thread(tenant, document, new_id=args.new_id)
        out.print(f"thread_id={th.id}")
    elif cmd == "redact":
        r = store.redact(
            tenant, args.thread_id, args.message_id, actor=args.actor, reason=args.reason
        )
        out.print(
            f"redaction_id={r.redaction_id} messages={len(r.message_ids)} "
            f"model_inputs={len(r.turn_ids)} derived={len(r.derived_ids)} "
            f"attachments_removed={r.attachments_removed}"
        )
    elif cmd == "delete":
        d = store.delete_thread(tenant, args.thread_id)
        out.print(
            f"deleted thread_id={d.thread_id} messages={d.messages} model_inputs={d.turns} "
            f"derived={d.derived} attachments_removed={d.attachments_removed}"
        )
    elif cmd == "sweep":
        from rich.progress import Progress

        scope = None if args.all_tenants else tenant
        now = datetime.now(timezone.utc)
        plan = store.sweep(scope, dry_run=True, now=now)
        for ten, tid in plan.expired:
            out.print(f"expired {ten} {tid}")
        out.print(f"{len(plan.expired)} expired, {plan.held} on legal hold")
        if args.apply and plan.expired:
            with Progress(console=err, transient=True) as bar:
                task = bar.add_task("deleting", total=len(plan.expired))
                done = store.sweep(
                    scope,
                    dry_run=False,
                    now=now,
                    progress=lambda i, n: bar.update(task, completed=i),
                )
            out.print(f"deleted {len(done.expired)}")
        elif not args.apply:
            out.print("dry run: add --apply to delete")
    elif cmd == "search":
        for hit in store.search(tenant, args.query, thread_id=args.thread, limit=args.limit):
            out.print(f"{hit.thread_id} #{hit.seq} {hit.message_id}: {escape(_short(hit.text))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m convmem.transcript.cli threads ...``)."""
    parser = argparse.ArgumentParser(prog="convmem")
    add_threads_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
