"""``convmem threads``: the durable record from a shell.

``add_threads_parser(subparsers)`` registers
``threads --db URL --tenant T {list,show,export,import,redact,delete,sweep,search,index,
migrate,purge-physical}``
on the application's argparse tree (``CONVMEM_DATABASE_URL`` and ``CONVMEM_TENANT``
are the defaults) and sets ``func`` to ``run_threads``, which returns the exit code.
``export`` writes the canonical JSON to stdout byte for byte, so ``cmp`` can compare
two exports; ``show`` draws the branch tree with the active path marked; ``sweep``
is a dry run unless ``--apply`` and always needs the default policy spelled out;
``delete`` asks first unless ``--yes``; ``purge-physical`` rewrites the record's files
so that erased content leaves the disk too (database-wide: no tenant).

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
import shlex
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convmem.cli import add_thread_action, database_url, env_default, max_age_days, positive_int
from convmem.errors import ConfigError, ConvMemError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.tree import Tree

    from convmem.transcript.records import Message, ThreadTree
    from convmem.transcript.store import TranscriptStore


_THREAD = "id of the thread"


def add_threads_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``threads`` on an ``add_subparsers()`` object; returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "threads",
        help="inspect, export, redact and delete conversation records",
        description="The durable conversation record: list, show, export, import, redact, "
        "delete, sweep and search threads, index queued search text, and create or upgrade "
        "the schema.",
    )
    p.add_argument(
        "--db",
        type=database_url,
        default=env_default("CONVMEM_DATABASE_URL"),
        help="database URL (sqlite:///file.db or postgresql://...); env CONVMEM_DATABASE_URL",
    )
    p.add_argument(
        "--tenant",
        default=env_default("CONVMEM_TENANT"),
        help="tenant whose threads are addressed; env CONVMEM_TENANT",
    )
    sub = p.add_subparsers(dest="threads_command", required=True, metavar="ACTION")
    ls = sub.add_parser("list", help="threads of the tenant, most recent first",
                        description="List the tenant's threads, most recent first.")
    ls.add_argument("--limit", type=positive_int, default=50,
                    help="at most this many threads (default 50)")
    show = add_thread_action(sub, "show", "draw the branch tree, active path marked",
                             "Draw a thread's branch tree; the active path is marked.", _THREAD)
    show.add_argument("--execution", action="store_true", help="include the execution log")
    exp = add_thread_action(sub, "export", "canonical JSON of the whole thread to stdout",
                            "Write the thread's canonical JSON export to stdout.", _THREAD)
    exp.add_argument("--user-view", action="store_true", help="only what the user saw")
    imp = sub.add_parser("import", help="load an export (file or - for stdin)",
                         description="Load a thread export into the tenant.")
    imp.add_argument("file", help="an export written by `convmem threads export`, or - for stdin")
    imp.add_argument("--new-id", action="store_true", help="give the thread fresh ids")
    red = add_thread_action(sub, "redact", "remove a message's content everywhere it reached",
                            "Redact a message: its content, every copy and everything "
                            "derived from it.", _THREAD)
    red.add_argument("message_id", help="id of the message (see `show`)")
    red.add_argument("--actor", required=True, help="who asks for the redaction (recorded)")
    red.add_argument("--reason", required=True, help="why (recorded), e.g. 'GDPR art. 17'")
    dele = add_thread_action(sub, "delete", "delete a thread and everything of it",
                             "Delete a thread, its derived rows and attachments. "
                             "Asks for confirmation unless --yes.", _THREAD)
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
    ix = sub.add_parser("index", help="move queued search text into the full-text index",
                        description="Index the search text a store with search_index="
                        "'deferred' queued (searches index their own first; this keeps "
                        "the index from lagging).")
    ix.add_argument("--all-tenants", action="store_true", help="ignore --tenant")
    ix.add_argument("--batch", type=positive_int, default=500,
                    help="rows per transaction (default 500)")
    sub.add_parser("migrate", help="create or upgrade the schema",
                   description="Create or upgrade the record's schema (safe to run again).")
    sub.add_parser(
        "purge-physical", help="rewrite the record's files so erased content leaves the disk",
        description="Rewrite the record's tables, indexes and statistics so that what "
        "redactions and deletions removed leaves the database files too (PostgreSQL: VACUUM "
        "FULL, which locks each table while it runs, and CHECKPOINT if permitted; SQLite: "
        "VACUUM). The WAL, archives, replicas and backups are out of its reach.",
    )
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


#: Deeper branch points than this are drawn without further indentation (a note says
#: so): a 1,500-deep edit chain still fits a terminal.
MAX_INDENT = 8


def render_tree(tree: ThreadTree, *, execution: bool = True) -> Tree:
    """The branch tree as a ``rich`` tree; the active path is marked ●.

    A run of messages without alternatives is one node of several lines, so the
    tree only indents where a thread branches (an edit, a regeneration, a fork
    point); hidden execution-log messages pass their children up. Walked with
    explicit stacks, never recursion: a 2,000-message tool chain or a 1,500-deep edit
    chain draws like a short one, and branch points deeper than ``MAX_INDENT`` go on
    at that indentation.
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
        """Visible children, hidden execution messages replaced by theirs (iterative)."""
        out: list[Message] = []
        todo = list(reversed(children.get(parent_id, [])))
        seen: set[str] = set()
        while todo:
            child = todo.pop()
            if child.id in seen:
                continue  # a loop in stored links (``tree`` refuses those; stay finite)
            seen.add(child.id)
            if not execution and child.visibility == "execution":
                todo.extend(reversed(children.get(child.id, [])))
            else:
                out.append(child)
        return out

    drawn: set[str] = set()
    stack: list[tuple[Tree, str | None, int]] = [(root, None, 0)]
    while stack:
        node, parent_id, depth = stack.pop()
        pending: list[tuple[Tree, str | None, int]] = []
        for child in shown(parent_id):
            if child.id in drawn:
                continue
            run = [child]
            drawn.add(child.id)
            while len(following := shown(run[-1].id)) == 1 and following[0].id not in drawn:
                run.append(following[0])
                drawn.add(following[0].id)
            text = "\n".join(_label(m, m.id in active) for m in run)
            if depth >= MAX_INDENT:  # go on at this indentation
                node.add(f"[dim]↳ (more than {MAX_INDENT} branch points deep)[/]\n{text}")
                pending.append((node, run[-1].id, depth))
            else:
                pending.append((node.add(text), run[-1].id, depth + 1))
        stack.extend(reversed(pending))
    return root


def _read_export(file: str) -> Any:
    """The import document as the store reads it (a path, or standard input, which the
    store spools): checked here only for being readable, so a missing file is one
    line of error, exit 2. Its content is the store's to judge, as it reads it
    (``ImportRefused``, also one line and exit 2)."""
    if file == "-":
        return sys.stdin.buffer
    path = Path(file)
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read ({exc.strerror})") from exc
    return path


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
    from convmem.transcript.errors import ImportRefused
    from convmem.transcript.records import RetentionPolicy
    from convmem.transcript.store import TranscriptStore

    err = Console(stderr=True, highlight=False)  # progress bars; messages are plain lines
    cmd = args.threads_command
    try:
        if not args.db:
            raise ConfigError("give --db URL or set CONVMEM_DATABASE_URL")
        if cmd not in ("migrate", "sweep", "index", "purge-physical") and not args.tenant:
            raise ConfigError("give --tenant T or set CONVMEM_TENANT")
        if cmd == "index" and not args.all_tenants and not args.tenant:
            raise ConfigError("give --tenant T or --all-tenants")
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
    except ImportRefused as exc:  # a bad file: like an unreadable one
        name = "standard input" if args.file == "-" else args.file
        print(f"convmem threads {cmd}: error: {name}: {exc}", file=sys.stderr)
        return 2
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
    elif cmd == "purge-physical":
        for line in store.purge_physical():
            out.print(line, markup=False, highlight=False, soft_wrap=True)
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
        sys.stdout.flush()
        if args.user_view:
            sys.stdout.write(store.export_user_view(tenant, args.thread_id))
        else:  # streamed: a page of the thread in memory at a time
            store.export_thread_to(tenant, args.thread_id, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        sys.stdout.flush()
    elif cmd == "import":  # read incrementally, validated whole before any write
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
        for ten, tid, why in plan.skipped:
            out.print(f"skipped {ten} {tid}: {escape(why)}")
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
    elif cmd == "index":
        scope = None if args.all_tenants else tenant
        out.print(f"indexed {store.index_pending(scope, batch=args.batch)}")
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
