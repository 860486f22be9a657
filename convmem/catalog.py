"""Finding entity mentions in a question.

``Catalog`` is the seam an application plugs its database or API into: given a
question, return the entity mentions in it with their spans and candidates.
``InMemoryCatalog`` answers from indexes built once, so the cost per question does
not grow with the catalog (spec §9's matching rules):

* exact names: a dict from token tuples to entities (labels, aliases, ids); the
  longest match wins and a full label beats a shorter alias shared by several;
* small typos: a symmetric-delete index over label *words* (SymSpell's idea) proposes
  candidate labels; RapidFuzz's Levenshtein confirms them against the whole label
  (first letter right; distance ≤ 1, ≤ 2 for labels of 16+ characters); a tie between
  labels is an ambiguous name. Typos are matched only against labels, and only where
  no exact name covers the same words — except that the longest match wins: a typo of
  a whole label that *extends* a shorter exact name ("Harbor Helth Partners" around the
  alias "Harbor") replaces it, so a typo inside a multi-word name is not lost to the
  alias its first word happens to be. Candidate labels come from any word of the span.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from rapidfuzz.distance import Levenshtein

from convmem.domain import Entity
from convmem.text import Token, stopwords, tokenize

MatchKind = Literal["label", "alias", "id", "typo"]


@dataclass(frozen=True, slots=True)
class Mention:
    """Text in the question that names one entity (or several, when ambiguous)."""

    start: int
    end: int
    text: str
    candidates: tuple[Entity, ...]
    kind: MatchKind = "label"

    @property
    def ambiguous(self) -> bool:
        return len(self.candidates) > 1


@runtime_checkable
class Catalog(Protocol):
    """Where entity names are resolved. ``find`` returns mentions in text order."""

    def find(self, text: str) -> list[Mention]: ...

    async def afind(self, text: str) -> list[Mention]: ...


def _key(name: str) -> tuple[str, ...]:
    return tuple(t.norm for t in tokenize(name))


def _deletes(word: str) -> set[str]:
    return {word[:i] + word[i + 1:] for i in range(len(word))}


class InMemoryCatalog:
    """An indexed catalog over a fixed list of entities (order kept for clarifications)."""

    _MIN_TYPO_WORD = 4
    _NEAR_CACHE = 4096

    def __init__(self, entities: Iterable[Entity]) -> None:
        self.entities: tuple[Entity, ...] = tuple(entities)
        stops = stopwords()
        self._by_id: dict[tuple[str, str], Entity] = {}
        # key -> kind -> entity positions (catalog order)
        self._exact: dict[tuple[str, ...], dict[MatchKind, list[int]]] = defaultdict(dict)
        self._labels: list[tuple[str, ...]] = []
        self._label_words: dict[str, set[int]] = defaultdict(set)
        self._word_deletes: dict[str, set[str]] = defaultdict(set)
        self._max_len = 1
        self._near: dict[str, frozenset[int]] = {}  # word -> _candidate_labels(word)
        for pos, entity in enumerate(self.entities):
            self._by_id[(entity.type, entity.id)] = entity
            label_key = _key(entity.label)
            self._labels.append(label_key)
            names: list[tuple[MatchKind, tuple[str, ...]]] = [("label", label_key)]
            names += [("alias", _key(a)) for a in entity.aliases]
            names.append(("id", _key(entity.id)))
            for kind, key in names:
                if not key or all(w in stops for w in key):
                    continue
                bucket = self._exact[key].setdefault(kind, [])
                if pos not in bucket:
                    bucket.append(pos)
                self._max_len = max(self._max_len, len(key))
            for word in label_key:
                if len(word) >= self._MIN_TYPO_WORD and word not in stops:
                    self._label_words[word].add(pos)
                    for d in _deletes(word):
                        self._word_deletes[d].add(word)

    def __len__(self) -> int:
        return len(self.entities)

    def get(self, type_: str, id_: str) -> Entity | None:
        return self._by_id.get((type_, id_))

    async def afind(self, text: str) -> list[Mention]:
        return self.find(text)

    def find(self, text: str) -> list[Mention]:
        tokens = tokenize(text)
        exact = self._exact_mentions(text, tokens)
        spans = [self._token_span(tokens, m) for m in exact]
        typos = self._typo_mentions(text, tokens, spans)
        # spec §8 "the longest match wins": a typo span covering exact ones replaces them
        kept = [m for m in exact if not any(t.start <= m.start and m.end <= t.end for t in typos)]
        mentions = kept + typos
        mentions.sort(key=lambda m: m.start)
        return mentions

    @staticmethod
    def _token_span(tokens: Sequence[Token], m: Mention) -> tuple[int, int]:
        """Token indexes ``[a, b)`` a mention covers."""
        idx = [i for i, t in enumerate(tokens) if m.start <= t.start < m.end]
        return idx[0], idx[-1] + 1

    # ------------------------------------------------------------------ exact

    def _exact_mentions(self, text: str, tokens: Sequence[Token]) -> list[Mention]:
        out: list[Mention] = []
        norms = [t.norm for t in tokens]
        i = 0
        while i < len(tokens):
            for n in range(min(self._max_len, len(tokens) - i), 0, -1):
                hit = self._exact.get(tuple(norms[i:i + n]))
                if not hit:
                    continue
                kind: MatchKind
                # spec §8: a full label beats a shorter alias shared by several entities
                kind = "label" if "label" in hit else ("alias" if "alias" in hit else "id")
                positions = hit[kind]
                if kind == "alias" and "id" in hit:
                    positions = sorted(set(positions) | set(hit["id"]))
                start, end = tokens[i].start, tokens[i + n - 1].end
                out.append(Mention(start, end, text[start:end],
                                   tuple(self.entities[p] for p in positions), kind))
                i += n
                break
            else:
                i += 1
        return out

    # ------------------------------------------------------------------ typos

    def _typo_mentions(
        self, text: str, tokens: Sequence[Token], exact: Sequence[tuple[int, int]]
    ) -> list[Mention]:
        """Typo matches over spans that hold no exact name, or wholly contain (and so
        extend) every exact name they touch."""
        stops = stopwords()
        found: list[tuple[int, int, int, tuple[int, ...]]] = []  # (distance, -n, i, positions)
        near: dict[int, frozenset[int]] = {}  # token index -> labels with a word near it

        def labels_near(j: int) -> frozenset[int]:
            if j not in near:
                word = tokens[j].norm
                near[j] = frozenset() if word in stops else self._candidate_labels(word)
            return near[j]

        for i, first in enumerate(tokens):
            if first.norm in stops:
                continue
            candidates: set[int] = set()
            for n in range(1, min(self._max_len, len(tokens) - i) + 1):
                touched = [(a, b) for a, b in exact if a < i + n and i < b]
                if any(a < i for a, _b in touched):
                    break  # an exact name starts before this span: it cannot contain it
                candidates |= labels_near(i + n - 1)
                if any(b > i + n or (a, b) == (i, i + n) for a, b in touched):
                    continue  # not (yet) a strict extension of the exact names it touches
                if not candidates:
                    continue
                gram = " ".join(t.norm for t in tokens[i:i + n])
                best: int | None = None
                winners: list[int] = []
                for pos in candidates:
                    label = self._labels[pos]
                    if len(label) != n:
                        continue
                    target = " ".join(label)
                    if target[0] != gram[0] or target == gram:
                        continue
                    limit = 2 if len(target) >= 16 else 1
                    if len(target) < 5:
                        continue
                    d = Levenshtein.distance(gram, target, score_cutoff=limit)
                    if d > limit:
                        continue
                    if best is None or d < best:
                        best, winners = d, [pos]
                    elif d == best:
                        winners.append(pos)
                if best is not None:
                    found.append((best, -n, i, tuple(sorted(winners))))
        out: list[Mention] = []
        taken: set[int] = set()
        for _d, neg_n, i, positions in sorted(found):
            span = set(range(i, i - neg_n))
            if span & taken:
                continue
            taken |= span
            start, end = tokens[i].start, tokens[i - neg_n - 1].end
            out.append(Mention(start, end, text[start:end],
                               tuple(self.entities[p] for p in positions), "typo"))
        return out

    def _candidate_labels(self, word: str) -> frozenset[int]:
        """Labels containing a word within one symmetric delete of ``word``.

        Questions reuse the same words: the last few thousand words' answers are kept
        (the indexes never change after construction)."""
        found = self._near.get(word)
        if found is None:
            if len(self._near) >= self._NEAR_CACHE:
                self._near.clear()
            found = self._near[word] = frozenset(self._labels_near_word(word))
        return found

    def _labels_near_word(self, word: str) -> set[int]:
        if len(word) < self._MIN_TYPO_WORD - 1:
            return set()
        words: set[str] = set()
        for probe in {word} | _deletes(word):
            if probe in self._label_words:
                words.add(probe)
            words |= self._word_deletes.get(probe, set())
        positions: set[int] = set()
        for w in words:
            positions |= self._label_words[w]
        return positions
