"""Resolving a question before retrieval: what it names, filters, asks for, and means.

A resolver reads the question against the domain and the current state and returns a
``Resolution``; it decides nothing about the state (that is ``convmem.policy``). The
package keeps apart what other modules read from what produces it:

    resolution   the ``Resolution`` record, the ``Resolver`` protocol, ``label_text``
    cues         the domain terms in a text (filters, clears, format cues) and their spans
    references   typed references (spec §10): which entity "she" or "that invoice" means
    rules        ``RuleResolver``: catalog lookups, phrase rules, a substituting rewrite
    structured   ``StructuredResolver``: the LLM prompt, its JSON schema, validation, fallback

Both resolvers are written once as flows that yield their catalog lookups
(``convmem.effects``): ``resolve`` runs them with the catalog's ``find``, ``aresolve``
with ``afind``. Every name below is imported on first use (PEP 562), so importing the
``Resolution`` record loads neither the rules nor the prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem._lazy import lazy_names

if TYPE_CHECKING:
    from convmem.resolve.cues import TOPIC_FREE_WORDS
    from convmem.resolve.references import DETERMINERS
    from convmem.resolve.resolution import Resolution, Resolver, carry_focus, label_text
    from convmem.resolve.rules import RuleResolver
    from convmem.resolve.structured import RESOLUTION_SCHEMA, StructuredResolver

#: The public names each submodule defines.
_HOMES = {
    ".cues": ("TOPIC_FREE_WORDS",),
    ".references": ("DETERMINERS",),
    ".resolution": ("Resolution", "Resolver", "carry_focus", "label_text"),
    ".rules": ("RuleResolver",),
    ".structured": ("RESOLUTION_SCHEMA", "StructuredResolver"),
}

__all__ = [
    "DETERMINERS",
    "RESOLUTION_SCHEMA",
    "TOPIC_FREE_WORDS",
    "Resolution",
    "Resolver",
    "RuleResolver",
    "StructuredResolver",
    "carry_focus",
    "label_text",
]


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
