"""Replaying labelled sessions (spec §6) through the public API, and scoring them.

A turn is fully correct when focus (``{type, id}`` or null), filters (key → value),
format, clarify and — when clarify is true — the options as an *ordered* list all
match, every ``rewritten_contains`` string appears (case-insensitively) in the
rewrite made before tools run, and — when the turn states it — ``salient`` matches as
an ordered list of ``{type, id}`` (spec §10). ``per_slot`` scores ``salient`` over the
turns that state it (None when none does); a turn's ``tags`` are scored in ``per_tag``.
Replay order (§8): the user text is resolved first; if it clarifies, the turn has no
tools; then the listed tool calls apply in order.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from convmem.domain import Domain, load_domain
from convmem.errors import ConfigError
from convmem.resolve import Resolver
from convmem.session import Clarification, SessionMemory
from convmem.state import SessionState

SLOTS = ("focus", "filters", "format", "clarify", "options", "rewrite", "salient")


@dataclass
class TurnResult:
    session: str
    domain: str
    turn: int
    user: str
    expected: Mapping[str, Any]
    actual: dict[str, Any]
    slots: dict[str, bool]  # "salient" only when the turn states it
    tags: tuple[str, ...] = ()

    @property
    def correct(self) -> bool:
        return all(self.slots.values())


@dataclass
class EvalReport:
    turns: list[TurnResult] = field(default_factory=list)

    def summary(self, *, per_turn: bool = False) -> dict[str, Any]:
        def slot_score(rows: list[TurnResult], slot: str) -> float | None:
            scored = [r.slots[slot] for r in rows if slot in r.slots]
            if not scored:
                return None if slot == "salient" else 0.0
            return round(sum(scored) / len(scored), 4)

        def score(rows: list[TurnResult]) -> dict[str, Any]:
            n = len(rows)
            sessions = {r.session for r in rows}
            clarified = {r.session for r in rows if r.actual["clarify"]}
            return {
                "turns": n,
                "turns_fully_correct": sum(r.correct for r in rows),
                "accuracy": round(sum(r.correct for r in rows) / n, 4) if n else 0.0,
                "per_slot": {s: slot_score(rows, s) for s in SLOTS},
                "clarify_rate": {
                    "turns": round(sum(r.actual["clarify"] for r in rows) / n, 4) if n else 0.0,
                    "sessions": round(len(clarified) / len(sessions), 4) if sessions else 0.0,
                },
            }

        by_domain: dict[str, list[TurnResult]] = defaultdict(list)
        for r in self.turns:
            by_domain[r.domain].append(r)
        by_tag: dict[str, list[TurnResult]] = defaultdict(list)
        for r in self.turns:
            for tag in r.tags:
                by_tag[tag].append(r)
        out = score(self.turns)
        out["per_domain"] = {d: score(rows) for d, rows in sorted(by_domain.items())}
        out["per_tag"] = {t: {"turns": len(rows), "turns_fully_correct": sum(r.correct for r in rows),
                              "accuracy": round(sum(r.correct for r in rows) / len(rows), 4)}
                          for t, rows in sorted(by_tag.items())}
        out["failures"] = [
            {"session": r.session, "turn": r.turn, "user": r.user,
             "wrong": [s for s, ok in r.slots.items() if not ok],
             "expected": dict(r.expected), "actual": r.actual}
            for r in self.turns if not r.correct
        ]
        if per_turn:
            out["per_turn"] = [
                {"session": r.session, "turn": r.turn, "user": r.user, "actual": r.actual,
                 "correct": r.correct}
                for r in self.turns
            ]
        return out


def read_sessions(path: str | Path) -> list[dict[str, Any]]:
    """Labelled sessions, one JSON object per line; a bad line is a ``ConfigError``."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read sessions file ({exc.strerror})") from exc
    try:
        lines = raw.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        where = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{p}:{where}: not UTF-8 text (byte {exc.start})") from exc
    sessions = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            s = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{p}:{n}: not valid JSON ({exc})") from exc
        except RecursionError as exc:  # json's parser recurses once per nesting level
            raise ConfigError(f"{p}:{n}: nested too deeply to be a labelled session") from exc
        check_session(s, f"{p}:{n}")
        sessions.append(s)
    return sessions


def check_session(s: Any, where: str) -> None:
    """The §6 shape ``replay`` relies on; a turn without ``expect`` cannot be scored."""
    if not isinstance(s, dict) or not isinstance(s.get("turns"), list):
        raise ConfigError(f"{where}: expected an object with a 'turns' array")
    for key in ("id", "domain"):
        if not isinstance(s.get(key), str):
            raise ConfigError(f"{where}: $.{key}: expected a string")
    for i, turn in enumerate(s["turns"]):
        path = f"$.turns[{i}]"
        if not isinstance(turn, dict) or not isinstance(turn.get("user"), str):
            raise ConfigError(f"{where}: {path}.user: expected the user's text")
        if not isinstance(turn.get("expect"), dict):
            raise ConfigError(
                f"{where}: {path}.expect: expected an object (the labelled state after the "
                "turn); an unlabelled turn cannot be scored, so it is not counted as correct"
            )
        tools = [] if turn.get("tools") is None else turn["tools"]
        if not isinstance(tools, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) for c in tools
        ):
            raise ConfigError(f"{where}: {path}.tools: expected an array of {{name, args, result}}")
        salient = turn["expect"].get("salient")
        if salient is not None and (not isinstance(salient, list) or not all(
            isinstance(e, dict) and isinstance(e.get("type"), str) and isinstance(e.get("id"), str)
            for e in salient
        )):
            raise ConfigError(
                f"{where}: {path}.expect.salient: expected a list of {{type, id}} objects, "
                f"got {json.dumps(salient)[:60]}"
            )
        tags = turn.get("tags")
        if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
            raise ConfigError(f"{where}: {path}.tags: expected a list of strings")


def _actual(state: SessionState | None, clar: Clarification | None, rewrite: str) -> dict[str, Any]:
    st = state or SessionState()
    return {
        "focus": None if st.focus is None else {"type": st.focus.type, "id": st.focus.id},
        "filters": st.filter_values(),
        "format": st.format,
        "clarify": clar is not None,
        "options": [] if clar is None else [o.id for o in clar.options],
        "rewritten": rewrite,
        "salient": [{"type": f.type, "id": f.id} for f in st.salient],
    }


def _compare(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> dict[str, bool]:
    ef = expected.get("focus")
    slots = {
        "focus": (ef is None and actual["focus"] is None)
        or (ef is not None and actual["focus"] == {"type": ef.get("type"), "id": ef.get("id")}),
        "filters": dict(expected.get("filters") or {}) == actual["filters"],
        "format": expected.get("format") == actual["format"],
        "clarify": bool(expected.get("clarify")) == actual["clarify"],
        "options": not expected.get("clarify")
        or list(expected.get("options") or []) == actual["options"],
        "rewrite": all(s.lower() in actual["rewritten"].lower()
                       for s in expected.get("rewritten_contains") or []),
    }
    if expected.get("salient") is not None:  # spec §10: ordered, most recent first
        slots["salient"] = [
            {"type": e.get("type"), "id": e.get("id")} for e in expected["salient"]
        ] == actual["salient"]
    return slots


def replay(
    sessions: Iterable[Mapping[str, Any]],
    domains: Callable[[str], Domain],
    *,
    resolver: Resolver | None = None,
) -> EvalReport:
    """Run every labelled turn through ``SessionMemory`` and score it."""
    report = EvalReport()
    memories: dict[str, SessionMemory] = {}
    for s in sessions:
        check_session(s, f"session {s.get('id')!r}" if isinstance(s, dict) else "session")
        dname = s["domain"]
        if dname not in memories:
            memories[dname] = SessionMemory(domains(dname), resolver=resolver, tenant="eval")
        mem = memories[dname]
        today = date.fromisoformat(s["today"]) if s.get("today") else None
        thread = f"eval:{s['id']}"
        mem.reset(thread)
        for i, turn in enumerate(s["turns"], 1):
            clar: Clarification | None = None
            rewrite = ""
            started = mem.begin_turn(thread, turn["user"], today=today)
            if isinstance(started, Clarification):
                clar = started
            else:
                rewrite = started.rewritten
                for call in turn.get("tools") or []:
                    c = mem.record_tool(thread, call["name"], call.get("args") or {}, call.get("result"))
                    if c is not None:
                        clar = c
                        break
            mem.end_turn(thread)
            actual = _actual(mem.get_state(thread), clar, rewrite)
            expected = turn["expect"]
            tags = turn.get("tags") or []
            report.turns.append(TurnResult(s["id"], dname, i, turn["user"], expected, actual,
                                           _compare(expected, actual),
                                           tuple(tags)))
    return report


def domain_loader(directory: str | Path | None) -> Callable[[str], Domain]:
    """Domains read from ``DIR/<name>.json`` (``None``: the bundled examples), each loaded once."""
    cache: dict[str, Domain] = {}
    if directory is None:
        from convmem import examples

        def bundled(name: str) -> Domain:
            if not examples.is_name(name):
                raise ConfigError(
                    f"no bundled example domain {name!r} (examples: {', '.join(examples.names())}); "
                    "give --domains DIR"
                )
            if name not in cache:
                cache[name] = load_domain(name)
            return cache[name]

        return bundled
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"{root}: not a directory of <domain>.json files")

    def load(name: str) -> Domain:
        if name not in cache:
            path = root / f"{name}.json"
            if not path.exists():
                raise ConfigError(f"{path}: no domain file for domain {name!r}")
            cache[name] = load_domain(path)
        return cache[name]

    return load
