"""convmem: session state instead of history replay, and a durable conversation record.

The core is framework-free and imports neither redis, LangChain nor LlamaIndex:
a domain (``Domain``, ``load_domain``), the state (``SessionState``) and its rendering
(``render``), the resolver and policy, and the façade every adapter uses
(``SessionMemory``). Stores live in ``convmem.stores``; conformance suites in
``convmem.testing``.

Every name below is imported on first use (PEP 562), so ``import convmem`` and the
``convmem`` command stay fast; ``from convmem import SessionMemory`` works as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem._lazy import lazy_names

# ``render`` is also a submodule's name: importing ``convmem.render`` (session does)
# would rebind ``convmem.render`` to the module, so the function is bound eagerly.
from convmem.render import render

if TYPE_CHECKING:
    from convmem.catalog import Catalog, InMemoryCatalog, Mention
    from convmem.domain import (
        Domain,
        Entity,
        PeriodFilter,
        ToolFocusRule,
        ToolRule,
        VocabFilter,
        load_domain,
    )
    from convmem.errors import (
        ConfigError,
        ConvMemError,
        CorruptState,
        NotFound,
        ResolverError,
        StateUnavailable,
        TranscriptUnavailable,
        VersionConflict,
    )
    from convmem.policy import PolicyConfig
    from convmem.resolve import (
        RESOLUTION_SCHEMA,
        Resolution,
        Resolver,
        RuleResolver,
        StructuredResolver,
    )
    from convmem.session import (
        Clarification,
        ModelCall,
        RecallHit,
        SessionMemory,
        SessionStats,
        TurnContext,
    )
    from convmem.state import FilterValue, Focus, Option, PendingClarification, SessionState
    from convmem.stores import InMemorySessionStateStore, SessionStateStore
    from convmem.tokens import count_message_tokens, count_tokens
    from convmem.tools import ToolResult
    from convmem.topic import TopicDetector, topic_changed

#: The public names each submodule defines.
_HOMES = {
    ".catalog": ("Catalog", "InMemoryCatalog", "Mention"),
    ".domain": (
        "Domain",
        "Entity",
        "PeriodFilter",
        "ToolFocusRule",
        "ToolRule",
        "VocabFilter",
        "load_domain",
    ),
    ".errors": (
        "ConfigError",
        "ConvMemError",
        "CorruptState",
        "NotFound",
        "ResolverError",
        "StateUnavailable",
        "TranscriptUnavailable",
        "VersionConflict",
    ),
    ".policy": ("PolicyConfig",),
    ".resolve": (
        "RESOLUTION_SCHEMA",
        "Resolution",
        "Resolver",
        "RuleResolver",
        "StructuredResolver",
    ),
    ".session": (
        "Clarification",
        "ModelCall",
        "RecallHit",
        "SessionMemory",
        "SessionStats",
        "TurnContext",
    ),
    ".state": ("FilterValue", "Focus", "Option", "PendingClarification", "SessionState"),
    ".stores": ("InMemorySessionStateStore", "SessionStateStore"),
    ".tokens": ("count_message_tokens", "count_tokens"),
    ".tools": ("ToolResult",),
    ".topic": ("TopicDetector", "topic_changed"),
}

__version__ = "0.1.0"

__all__ = [
    "RESOLUTION_SCHEMA",
    "Catalog",
    "Clarification",
    "ConfigError",
    "ConvMemError",
    "CorruptState",
    "Domain",
    "Entity",
    "FilterValue",
    "Focus",
    "InMemoryCatalog",
    "InMemorySessionStateStore",
    "Mention",
    "ModelCall",
    "NotFound",
    "Option",
    "PendingClarification",
    "PeriodFilter",
    "PolicyConfig",
    "RecallHit",
    "Resolution",
    "Resolver",
    "ResolverError",
    "RuleResolver",
    "SessionMemory",
    "SessionState",
    "SessionStateStore",
    "SessionStats",
    "StateUnavailable",
    "StructuredResolver",
    "ToolFocusRule",
    "ToolResult",
    "ToolRule",
    "TopicDetector",
    "TranscriptUnavailable",
    "TurnContext",
    "VersionConflict",
    "VocabFilter",
    "count_message_tokens",
    "count_tokens",
    "load_domain",
    "render",
    "topic_changed",
]


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
