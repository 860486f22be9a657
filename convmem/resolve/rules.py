"""``RuleResolver``: the deterministic resolver — catalog lookups, phrase rules, and a
rewrite that substitutes rather than appends.

It reads the question against the domain and the current state and returns a
``Resolution``: entity mentions (through the catalog), explicit filter values and
clears, a format cue, whether the question refers back (pronouns, one-anaphora,
elliptical openers, filter- or format-only messages: spec §8–9), the residual text the
topic detector sees, and a rewrite ("Who's their rep?" → "Who's Brightwater Farms's
rep?"; "And Pinecrest Clinics?" → the previous question with the new name and every
filter in effect named). In a domain that declares ``types`` references are typed
(``convmem.resolve.references``). It decides nothing about the state: that is the
policy's job (``convmem.policy``).

The resolution is written once, as a flow (``convmem.effects``) that yields its
catalog lookups — the question's, and for an elliptical repeat the previous
question's. ``resolve`` runs it with the catalog's ``find``, ``aresolve`` with
``afind``, so a catalog backed by a database or an API never blocks the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date

from convmem.catalog import Mention
from convmem.domain import Domain
from convmem.effects import Flow, aperform, call, do, perform
from convmem.resolve.cues import Cues, is_cue_only, overlaps, residual, scan
from convmem.resolve.references import (
    Reference,
    find_references,
    resolve_references,
    substitute_references,
    type_index,
)
from convmem.resolve.resolution import Resolution, carry_focus, label_text
from convmem.state import Focus, SessionState
from convmem.text import (
    PERSONAL_PRONOUNS,
    contraction_after,
    elliptical_opener,
    is_possessive,
    pronoun_view,
    reference_tokens,
    tokenize,
)

__all__ = ["RuleResolver"]


def find_mentions(domain: Domain, text: str) -> Flow[list[Mention]]:
    """The catalog's mentions in ``text``: one lookup, ``find`` or ``afind`` by driver
    (the structured resolver's too)."""
    catalog = domain.catalog
    return (yield from do(call(catalog.find, catalog.afind, text)))


@dataclass(frozen=True, slots=True)
class _Reading:
    """What a rewrite works from: the question, the state and domain it is read
    against, and what ``RuleResolver._flow`` found in it."""

    question: str
    state: SessionState
    domain: Domain
    today: date
    cues: Cues
    ellipsis: tuple[str, str] | None
    cue_only: bool


class RuleResolver:
    """The deterministic resolver: catalog lookups, phrase rules and a substituting rewrite."""

    def resolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        return perform(self._flow(question, state, domain, today))

    async def aresolve(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Resolution:
        return await aperform(self._flow(question, state, domain, today))

    def _flow(
        self, question: str, state: SessionState, domain: Domain, today: date
    ) -> Flow[Resolution]:
        """The resolution, yielding its catalog lookups (``convmem.effects``)."""
        mentions = yield from find_mentions(domain, question)
        cues = scan(question, mentions, domain, today)
        refs = [t for t in reference_tokens(question) if not overlaps(t.start, t.end, cues.taken)]
        ellipsis = elliptical_opener(question)
        cue_only = not mentions and is_cue_only(question, cues)
        typed: list[Reference] = []
        if domain.types:
            index = type_index(domain)
            typed = resolve_references(find_references(question, index, cues.taken), state, index)
        resolved = [r for r in typed if r.target is not None]
        first = typed[0].target if typed else None
        salient_ref = first if first is not None and first != state.focus else None
        refers_back = bool(refs) or bool(resolved) or ellipsis is not None or cue_only
        in_effect = {k: v.value for k, v in state.filters.items() if k not in cues.clears}
        in_effect.update(cues.filters)
        reading = _Reading(question, state, domain, today, cues, ellipsis, cue_only)
        if domain.types:
            core = yield from self._typed_rewrite(reading, typed, salient_ref)
        else:
            core = yield from self._rewrite(reading)
        return Resolution(
            question=question,
            rewritten=core + (_filter_note(in_effect, core) if ellipsis else ""),
            mentions=tuple(mentions),
            filters=dict(cues.filters),
            clears=frozenset(cues.clears),
            format=cues.format,
            refers_back=refers_back,
            cue_only=cue_only,
            residual=residual(question, cues.taken),
            core_rewrite=core,
            refers_to_salient=salient_ref,
        )

    def _typed_rewrite(
        self, reading: _Reading, refs: Sequence[Reference], salient_ref: Focus | None
    ) -> Flow[str]:
        """Spec §10's rewrite: every resolved reference substituted; a reference nothing
        declares stays as typed. An elliptical repeat is the previous question (§9)
        unless the question points at a salient entity, which that question was not about."""
        state, cues = reading.state, reading.cues
        focus = salient_ref or state.focus
        text: str | None = None
        if reading.ellipsis is not None and state.last_rewrite and salient_ref is None:
            text = yield from self._repeat(reading, state.last_rewrite)
        if text is None:
            named = {(e.type, e.id) for m in cues.mentions for e in m.candidates}
            text = substitute_references(reading.question, refs, named).strip()
        return self._about(reading, text, focus, any(r.target is not None for r in refs))

    def _about(
        self, reading: _Reading, text: str, focus: Focus | None, typed_refs: bool = False
    ) -> str:
        """Name the focus when the question refers back to it without its label in the text."""
        if (
            focus is not None
            and not reading.cues.mentions
            and (
                reading.ellipsis is not None
                or reading.cue_only
                or typed_refs
                or reference_tokens(reading.question)
            )
        ):
            return carry_focus(text, focus)
        return text

    def _rewrite(self, reading: _Reading) -> Flow[str]:
        state, cues = reading.state, reading.cues
        focus = state.focus
        text = reading.question.strip()
        repeated = None
        if reading.ellipsis is not None and state.last_rewrite:
            repeated = yield from self._repeat(reading, state.last_rewrite)
        if repeated is not None:
            text = repeated
        elif focus is not None and not reading.cue_only:
            named_focus = any(focus.id in {e.id for e in m.candidates} for m in cues.mentions)
            if not named_focus:
                text = _substitute_pronoun(text, focus.label, cues.cue_spans) or text
        return self._about(reading, text, focus)

    def _repeat(self, reading: _Reading, previous: str) -> Flow[str | None]:
        """Spec §9 elliptical repeat: the previous question with X substituted."""
        domain, cues = reading.domain, reading.cues
        if cues.mentions:
            new = cues.mentions[0]
            prev_mentions = yield from find_mentions(domain, previous)
            focus = reading.state.focus
            target = next(
                (m for m in prev_mentions if focus is not None and focus.id in {e.id for e in m.candidates}),
                None,
            ) or next(
                (m for m in prev_mentions
                 if {e.type for e in m.candidates} & {e.type for e in new.candidates}),
                None,
            )
            if target is not None:
                return _replace_span(previous, target.start, target.end, new.text)
            return f"{previous.rstrip()} — {new.text}"
        changed = list(cues.filters) + sorted(cues.clears)
        if not changed:
            return None
        prev_cues = scan(previous, (yield from find_mentions(domain, previous)), domain, reading.today)
        text = previous
        spans: list[tuple[int, int, str]] = []
        extra: list[str] = []
        for key in changed:
            new_spans = cues.filter_spans.get(key, [])
            phrase = reading.question[new_spans[-1][0]:new_spans[-1][1]] if new_spans else ""
            old = prev_cues.filter_spans.get(key)
            if old:
                spans.append((old[-1][0], old[-1][1], phrase))
            else:
                extra.append(phrase)
        for s, e, new_text in sorted(spans, reverse=True):
            text = _replace_span(text, s, e, new_text)
        text = " ".join(text.split()).replace(" ?", "?").replace(" .", ".")
        extra = [x for x in extra if x]
        if extra:
            text = f"{text.rstrip()} ({', '.join(extra)})"
        return text


def _substitute_pronoun(text: str, label: str, skip: Sequence[tuple[int, int]]) -> str | None:
    """Replace the first personal pronoun outside ``skip`` by ``label`` (possessive kept)."""
    toks = pronoun_view(tokenize(text))
    for i, tok in enumerate(toks):
        if tok.norm not in PERSONAL_PRONOUNS or overlaps(tok.start, tok.end, skip):
            continue
        repl = label_text(label, possessive=is_possessive(toks, i))
        cut, expansion = contraction_after(text, tok.end, word=tok.norm)
        return text[: tok.start] + repl + expansion + text[tok.end + cut:]
    return None


def _filter_note(filters: Mapping[str, str], text: str) -> str:
    """The filters in effect that the rewrite does not name, as " (region EMEA, …)"."""
    missing = [f"{k} {v}" for k, v in sorted(filters.items()) if v.lower() not in text.lower()]
    return f" ({', '.join(missing)})" if missing else ""


def _replace_span(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]
