"""The update rules: pure functions from (state, input, domain, config) to a new state.

One user turn (spec §3): ``start_turn`` (count the turn, decay filters), then, if a
clarification is open, ``match_option``; the façade resolves the question; then
``apply_resolution`` updates focus, filters, format and recent questions — or returns
a clarification when the focus is ambiguous (§4: the only thing worth asking about).
``apply_tool`` applies a domain tool rule after each tool call (§3 step 6). Every focus
change goes through ``move_focus``, which keeps ``salient`` (§10: the last focus of each
other type, most recent first) in a domain that declares ``types``. Nothing here does
I/O; every threshold lives in ``PolicyConfig`` with the seed's value.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convmem.catalog import Mention
from convmem.domain import Domain, Entity, PeriodFilter, ToolRule, VocabFilter
from convmem.periods import is_period_value
from convmem.resolve.resolution import Resolution, label_text
from convmem.state import (
    FilterValue,
    Focus,
    Option,
    PendingClarification,
    SessionState,
)
from convmem.text import stem, stopwords, tokenize
from convmem.tools import ToolResult
from convmem.topic import DEFAULT_OVERLAP_THRESHOLD, topic_changed

log = logging.getLogger("convmem.policy")

MAX_OPTIONS = 10
MAX_OPTION_ATTRS = 6  # kept to match an answer; Option.describe shows the first two


@dataclass(frozen=True)
class PolicyConfig:
    """Every threshold of the policy, defaulting to the seed chapter's values."""

    filter_turns: int = 2  # spec §3.2: a filter set at t0 lives through t0 + 2
    recent_questions: int = 3  # the seed's recentQuestions: last 3, text only
    overlap_threshold: float = DEFAULT_OVERLAP_THRESHOLD  # the seed's 0.12
    topic_detector: Callable[[str, Sequence[str]], bool] | None = None  # None = topic_changed

    def detect_topic_change(self, question: str, recent: Sequence[str]) -> bool:
        if self.topic_detector is not None:
            return self.topic_detector(question, recent)
        return topic_changed(question, recent, threshold=self.overlap_threshold)


@dataclass(frozen=True)
class Clarify:
    """The turn asks which entity was meant; ``state`` is the state to save."""

    state: SessionState
    pending: PendingClarification


@dataclass(frozen=True)
class Proceed:
    state: SessionState
    notes: tuple[str, ...] = field(default=())


Outcome = Clarify | Proceed


# --------------------------------------------------------------------------- focus and salient


def move_focus(
    focus: Focus | None, salient: tuple[Focus, ...], new: Focus, size: int
) -> tuple[Focus, tuple[Focus, ...]]:
    """The focus becomes ``new``; ``salient`` follows spec §10.

    Same entity or same type: the focus is replaced and ``salient`` is unchanged (as
    before §10). Another type T: every salient entry of type T leaves, the previous
    focus enters at the front, and past ``size`` entries the oldest leaves. A domain
    without ``types`` has ``size`` 0, so ``salient`` stays empty.
    """
    if focus is None or focus.type == new.type:
        return new, tuple(s for s in salient if s.type != new.type)[:size]
    rest = tuple(s for s in salient if s.type != new.type)
    return new, (focus, *rest)[:size]


# --------------------------------------------------------------------------- turn start


def start_turn(state: SessionState, config: PolicyConfig) -> SessionState:
    """Count the turn and decay filters (spec §3.2; §8: decay runs on every turn)."""
    turn = state.turn + 1
    kept = {k: v for k, v in state.filters.items() if turn <= v.set_at_turn + config.filter_turns}
    return state.evolve(turn=turn, filters=kept, open_turn=None)


# --------------------------------------------------------------------------- clarification answers

_ORDINALS = {
    "first": 0, "1st": 0, "second": 1, "2nd": 1, "third": 2, "3rd": 2, "fourth": 3, "4th": 3,
    "fifth": 4, "5th": 4, "sixth": 5, "6th": 5, "seventh": 6, "eighth": 7, "ninth": 8, "tenth": 9,
}
_NUMBER = re.compile(r"^\s*(?:#|no\.?\s*|number\s+|option\s+)?(\d{1,2})\s*[.)!]?\s*$", re.I)


def _answer_words(text: str) -> list[str]:
    """Lower-case words with hyphenated ones also split ("Toronto-based" → toronto-based,
    toronto, based), so an attribute inside a longer phrase still matches."""
    out: list[str] = []
    for t in tokenize(text):
        out.append(t.norm)
        parts = [p for p in re.split(r"[-'’]", t.norm) if p]
        if len(parts) > 1:
            out += parts
    return out


def _phrase_in(phrase: str, text: str) -> bool:
    words = " ".join(_answer_words(phrase))
    return bool(words) and f" {words} " in text


#: Words after which (within ``_NEGATION_WINDOW`` words of the same clause) an answer
#: excludes an option. "No" is not one: "No, the Chicago one" picks Chicago.
_NEGATORS = frozenset({"not", "isn't", "wasn't", "never", "except", "excluding", "nor"})
_NEGATION_WINDOW = 3
_CLAUSE = re.compile(r"[,.;:!?()\u2013\u2014]+|\s-\s")


def _split_negated(message: str) -> tuple[list[str], list[str]]:
    """The answer's words, and the words a negation covers ("not the Toronto one")."""
    kept: list[str] = []
    negated: list[str] = []
    for clause in _CLAUSE.split(message):
        words = _answer_words(clause)
        covered = {j for i, w in enumerate(words) if w in _NEGATORS
                   for j in range(i + 1, min(i + 1 + _NEGATION_WINDOW, len(words)))}
        kept += [w for j, w in enumerate(words) if j not in covered]
        negated += [w for j, w in enumerate(words) if j in covered]
    return kept, negated


def _describing_scores(options: Sequence[Option], toks: Sequence[str]) -> list[int]:
    """Scores for what the words describe: a label only one option has 10 + its length,
    a distinguishing attr value 5, and 2 for each word of a label or attr value that
    only one option has ("the Labs one", "the logistics company")."""
    text = " " + " ".join(toks) + " "
    scores = [0] * len(options)
    labels = [" " + " ".join(t.norm for t in tokenize(o.label)) + " " for o in options]
    for i, label in enumerate(labels):
        if labels.count(label) == 1 and label.strip() and label in text:
            scores[i] += 10 + len(label)
    for i, opt in enumerate(options):
        for key, value in opt.attrs.items():
            if _phrase_in(value, text) and sum(1 for o in options if o.attrs.get(key) == value) == 1:
                scores[i] += 5
    stems = {stem(w) for w in toks if len(w) > 2 and w not in stopwords()}
    owners: dict[str, set[int]] = {}
    for i, opt in enumerate(options):
        for phrase in (opt.label, *opt.attrs.values()):
            for w in _answer_words(phrase):
                if len(w) > 2 and w not in stopwords():
                    owners.setdefault(stem(w), set()).add(i)
    for word, who in owners.items():
        if len(who) == 1 and word in stems:
            scores[next(iter(who))] += 2
    return scores


def match_option(pending: PendingClarification, message: str) -> Option | None:
    """Spec §3.1: pick an option by id, ordinal, a distinguishing attr, or label.

    Scores, best unique score wins: id 100, ordinal 50, then what the words describe
    (``_describing_scores``). Words within three of a negation in the same clause ("not
    the Toronto one")
    describe options the answer excludes: an excluded option never wins, and when the
    answer excludes all options but one and describes nothing else, that one wins.
    """
    options = pending.options
    toks = _answer_words(message)
    text = " " + " ".join(toks) + " "
    scores = [0] * len(options)
    for i, opt in enumerate(options):
        if f" {opt.id.lower()} " in text:
            scores[i] += 100
    ordinal = next((_ORDINALS[t] for t in toks if t in _ORDINALS), None)
    if ordinal is None and "last" in toks and ("one" in toks or len(toks) <= 3):
        ordinal = len(options) - 1
    m = _NUMBER.match(message)
    if m:
        ordinal = int(m.group(1)) - 1
    if ordinal is not None and 0 <= ordinal < len(options):
        scores[ordinal] += 50
    kept, negated = _split_negated(message)
    excluded = {i for i, sc in enumerate(_describing_scores(options, negated)) if sc > 0}
    for i, sc in enumerate(_describing_scores(options, kept)):
        scores[i] += sc
    for i in excluded:
        scores[i] = min(scores[i], 0)
    best = max(scores, default=0)
    if best <= 0 and excluded and len(options) - len(excluded) == 1:
        return next(o for i, o in enumerate(options) if i not in excluded)
    if best <= 0 or scores.count(best) != 1:
        return None
    return options[scores.index(best)]


def _distinguishing_attrs(records: Sequence[Mapping[str, str]]) -> list[str]:
    keys: list[str] = []
    for key in dict.fromkeys(k for r in records for k in r):
        values = [r.get(key) for r in records]
        if len(set(values)) > 1 and all(v is not None for v in values):
            keys.append(key)
    return keys[:MAX_OPTION_ATTRS]


def options_for(entities: Sequence[Entity]) -> tuple[Option, ...]:
    """Options for an ambiguous name, in catalog order (§8), told apart by their attrs."""
    keys = _distinguishing_attrs([e.attrs for e in entities])
    return tuple(
        Option(e.type, e.id, e.label, {k: e.attrs[k] for k in keys}) for e in entities[:MAX_OPTIONS]
    )


def clarification_prompt(mention: str | None, options: Sequence[Option]) -> str:
    types = {o.type for o in options}
    noun = f"{next(iter(types))}s" if len(types) == 1 else "matches"
    count = len(options)
    number = ["", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten"]
    lead = number[count] if count < len(number) else str(count)
    if mention:
        return f'{lead} {noun} match "{mention}". Which one?'
    return f"I found {lead.lower()} {noun}. Which one?"


# --------------------------------------------------------------------------- the question


def _is_focus(mention: Mention, focus: Focus | None) -> bool:
    return focus is not None and any(
        e.id == focus.id and e.type == focus.type for e in mention.candidates
    )


def _promoted(base: SessionState, resolution: Resolution) -> Focus | None:
    """The salient entity the question's first reference resolves to (§10), if any."""
    ref = resolution.refers_to_salient
    if ref is None:
        return None
    return next((s for s in base.salient if (s.type, s.id) == (ref.type, ref.id)), None)


def apply_resolution(
    base: SessionState,
    resolution: Resolution,
    config: PolicyConfig,
    *,
    confirmed: Option | None = None,
    salient_size: int = 0,
) -> Outcome:
    """Spec §3 steps 4–5 on the state after ``start_turn``.

    ``salient_size`` is ``Domain.salient_size``: 0 (no ``types``) keeps ``salient``
    empty. A first reference to a salient entity makes it the focus (keeping its
    source) before any named entity is applied, so a name in the same question still
    wins (§8) and ``salient`` lists the referenced entity before older ones (§10).
    """
    focus, salient = base.focus, base.salient
    promoted = _promoted(base, resolution) if salient_size else None
    if promoted is not None:
        focus, salient = move_focus(focus, salient, promoted, salient_size)
    if confirmed is not None:
        focus, salient = move_focus(
            focus, salient, Focus(confirmed.type, confirmed.id, confirmed.label, "confirmed"),
            salient_size,
        )
        mentions = [m for m in resolution.mentions if confirmed.id not in {e.id for e in m.candidates}]
    else:
        mentions = list(resolution.mentions)
    # spec §9: two entities named → the first one that is not the current focus
    other = next((m for m in mentions if not _is_focus(m, focus)), None)
    if other is not None and confirmed is None:
        if other.ambiguous:
            options = options_for(other.candidates)
            pending = PendingClarification(
                question=resolution.question,
                prompt=clarification_prompt(other.text, options),
                options=options,
                origin="name",
                mention=other.text,
            )
            return Clarify(base.evolve(pending=None), pending)  # §10: salient unchanged too
        e = other.candidates[0]
        focus, salient = move_focus(focus, salient, Focus(e.type, e.id, e.label, "user"), salient_size)
    elif not mentions and confirmed is None and focus is not None and not resolution.refers_back:
        if config.detect_topic_change(resolution.residual, base.recent_questions):
            focus, salient = None, ()  # spec §3.4: fail toward dropping state; §10: salient too
    filters = dict(base.filters)
    for key in resolution.clears:
        filters.pop(key, None)
    for key, value in resolution.filters.items():
        filters[key] = FilterValue(value, base.turn)
    recent = (*base.recent_questions, resolution.question)[-config.recent_questions:]
    return Proceed(
        base.evolve(
            focus=focus,
            salient=salient,
            filters=filters,
            format=resolution.format or base.format,
            recent_questions=recent,
            pending=None,
            last_rewrite=resolution.core_rewrite or resolution.rewritten,
        )
    )


def answer_rewrite(resolution: Resolution, pending: PendingClarification, chosen: Option) -> str:
    """Spec §9: the original question with the ambiguous name replaced by the chosen
    label (inert and bounded: it comes from the catalog or a tool, not the user)."""
    text = resolution.core_rewrite or resolution.rewritten
    label = label_text(chosen.label)
    if pending.mention and pending.mention in text:
        return text.replace(pending.mention, label, 1)
    return f"{text.rstrip()} — {label}"


# --------------------------------------------------------------------------- tools


def _valid_filter(domain: Domain, key: str, value: Any) -> str | None:
    spec = domain.filters.get(key)
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return None
    text = str(value)
    if isinstance(spec, PeriodFilter):
        return text if is_period_value(text) else None
    if isinstance(spec, VocabFilter):
        return text if spec.accepts(text) else None
    return None


def _record_option(record: Mapping[str, Any], rule_type: str, id_field: str, label_field: str,
                   attr_keys: Sequence[str]) -> Option:
    rid = str(record[id_field])
    label = record.get(label_field)
    return Option(
        rule_type,
        rid,
        str(label) if isinstance(label, (str, int)) and str(label).strip() else rid,
        {k: str(record[k]) for k in attr_keys if isinstance(record.get(k), (str, int, float))},
    )


def apply_tool(
    state: SessionState,
    base: SessionState,
    domain: Domain,
    name: str,
    args: Mapping[str, Any],
    result: ToolResult,
) -> Outcome:
    """Spec §3 step 6 for one tool call; ``base`` is the state the turn started from."""
    rule: ToolRule | None = domain.tools.get(name)
    if rule is None or not result.ok:
        return Proceed(state)
    filters = dict(state.filters)
    notes: list[str] = []
    for key, arg in rule.filters.items():
        if arg not in args or args[arg] is None:
            continue
        value = _valid_filter(domain, key, args[arg])
        if value is None:
            notes.append(f"ignored {name}.{arg}={args[arg]!r}: not a valid {key} value")
            log.info("tool %s: argument %s=%r is not a valid %s value; ignored", name, arg, args[arg], key)
            continue
        filters[key] = FilterValue(value, state.turn)
    new = state.evolve(filters=filters)
    if rule.focus is None:
        return Proceed(new, tuple(notes))
    fr = rule.focus
    data = result.data
    records: list[Mapping[str, Any]]
    if isinstance(data, Mapping):
        records = [data]
    elif isinstance(data, list):
        records = [r for r in data if isinstance(r, Mapping)]
    else:
        records = []
    records = [r for r in records if isinstance(r.get(fr.id_field), (str, int))
               and not isinstance(r.get(fr.id_field), bool) and str(r.get(fr.id_field)).strip()]
    if not records:
        return Proceed(new, tuple(notes))
    if len(records) == 1:
        opt = _record_option(records[0], fr.type, fr.id_field, fr.label_field, ())
        focus, salient = move_focus(state.focus, state.salient,
                                    Focus(opt.type, opt.id, opt.label, "tool"), domain.salient_size)
        return Proceed(new.evolve(focus=focus, salient=salient), tuple(notes))
    # several candidates: clarify, and the turn's cues go with it (spec §9)
    cleaned = [{k: str(v) for k, v in r.items()
                if k not in (fr.id_field, fr.label_field) and isinstance(v, (str, int, float))}
               for r in records[:MAX_OPTIONS]]
    keys = _distinguishing_attrs(cleaned)
    options = tuple(_record_option(r, fr.type, fr.id_field, fr.label_field, keys)
                    for r in records[:MAX_OPTIONS])
    question = state.open_turn.resolved_question if state.open_turn else ""
    pending = PendingClarification(
        question=question,
        prompt=clarification_prompt(None, options),
        options=options,
        origin="tool",
    )
    return Clarify(base.evolve(pending=None), pending)
