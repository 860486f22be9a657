"""convmem: session state instead of history replay, and a durable conversation record.

The core is framework-free and imports neither redis, LangChain nor LlamaIndex:
a domain (``Domain``, ``load_domain``), the state (``SessionState``) and its rendering
(``render``), the resolver and policy, and the façade every adapter uses
(``SessionMemory``). Stores live in ``convmem.stores``; conformance suites in
``convmem.testing``.
"""

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
    StateUnavailable,
    TranscriptUnavailable,
    VersionConflict,
)
from convmem.policy import PolicyConfig
from convmem.render import render
from convmem.resolve import (
    RESOLUTION_SCHEMA,
    Resolution,
    Resolver,
    RuleResolver,
    StructuredResolver,
)
from convmem.session import Clarification, ModelCall, SessionMemory, SessionStats, TurnContext
from convmem.state import FilterValue, Focus, Option, PendingClarification, SessionState
from convmem.stores import InMemorySessionStateStore, SessionStateStore
from convmem.tokens import count_message_tokens, count_tokens
from convmem.tools import ToolResult
from convmem.topic import TopicDetector, topic_changed

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
    "Option",
    "PendingClarification",
    "PeriodFilter",
    "PolicyConfig",
    "Resolution",
    "Resolver",
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
