"""``SessionMemory``: the façade adapters code against.

One identifier, the *thread id* (any string the application uses, unique per tenant):
the session state is the live, expiring view of a thread. A turn is
``begin_turn`` → ``record_tool`` per tool call → ``end_turn``.

The turn logic is written once, as flows that *yield* their I/O as typed effects
(``convmem.effects``: load, resolve, save, each transcript call) and receive the
results; ``perform`` runs them with the sync methods and ``aperform`` with the async
ones, so the sync and async twins share every rule and differ only in how I/O is
awaited. A compare-and-set conflict is thrown back into the
generator, which reloads and re-applies the turn (at most three tries, then it goes on
with the freshest state and logs).

With a ``TranscriptStore`` (``transcript=``) the façade also keeps the durable record of
each turn, at two commit points. (1) Right before the model is called: the user's
message and what the model receives (``ModelCall``: system prompt, the session block,
the state snapshot, the ids of earlier messages sent, tool schemas, model and
parameters) in one transaction, written by ``begin_turn(..., model_call=...)`` or, when
the adapter learns those only later, by ``record_model_input``. Only the *first* model
call of a turn is recorded: the later calls of a tool loop receive the same input plus
this turn's tool calls and results, which commit point 2 records in order. (2) In
``end_turn``: the tool calls and results ``record_tool`` saw and the answer, in one
transaction linked to (1). A turn that never calls the model (a clarification) records
the user's message and the clarifying answer together in ``end_turn``, with no model
input. If (1) cannot be written the call raises ``TranscriptUnavailable`` before the
model is called; ``on_transcript_error="degrade"`` logs a WARNING, counts it in
``stats.transcript_failures`` and lets the turn go on. The application's thread id is
the transcript thread's *key* (``get_or_create_thread``), so every ``SessionMemory`` of
the tenant (two devices, two workers) appends to one thread. A turn binds to that
thread's incarnation when it begins (one read, ``TranscriptStore.bind_turn``) and its
commit points write only there: a turn that began before ``delete_thread`` fails its
commit point with ``ThreadDeleted`` and writes nothing, so an erased thread never
comes back. Its model input lists the recorded questions its block quotes, the links
redaction follows. The turn in progress is
remembered in-process between the commit points (recovered from the session state's
open turn when another process began it; its tool calls are then not recorded).
``edit_turn`` asks an edited question as a new turn beside the original, from the
state restored out of the original's model-input record; ``regenerate`` records a new
answer to a turn.

Layout: ``records`` (the public records), ``turns`` (state-only turn flows),
``recording`` (the commit points, edit, regenerate, redact, delete), ``questions`` (a
question's forms in the record and the state), ``recall`` (recall on demand: the hit,
its snippet, the text the model reads) and ``memory`` (the ``SessionMemory`` façade and
its two drivers).
"""

from __future__ import annotations

from convmem.session.memory import SessionMemory
from convmem.session.questions import question_provenance, without_questions
from convmem.session.recall import RECALL_TOOL, RecallHit, recall_text
from convmem.session.records import (
    MAX_QUESTION_CHARS,
    Clarification,
    ModelCall,
    OnTranscriptError,
    SessionStats,
    TurnContext,
)
from convmem.session.turns import block_for

__all__ = [
    "MAX_QUESTION_CHARS",
    "RECALL_TOOL",
    "Clarification",
    "ModelCall",
    "OnTranscriptError",
    "RecallHit",
    "SessionMemory",
    "SessionStats",
    "TurnContext",
    "block_for",
    "question_provenance",
    "recall_text",
    "without_questions",
]
