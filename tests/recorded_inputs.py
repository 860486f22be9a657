"""What the record says each turn's model received: shared by the adapter tests that
compare it with what their fake models captured."""

from __future__ import annotations

from convmem.session import SessionMemory
from convmem.transcript import Message, ReconstructedInput

Record = tuple[list[ReconstructedInput], list[Message]]


def record(memory: SessionMemory, thread: str) -> Record:
    """Every recorded model input on the thread's active path, in order, and the path."""
    store = memory.transcript
    assert store is not None
    tid = memory.transcript_thread_id(thread)
    path = store.active_path(memory.tenant, tid)
    ids = [m.turn_id for m in path if m.role == "user" and m.turn_id is not None]
    return [store.reconstruct_model_input(memory.tenant, tid, t) for t in ids], path


async def arecord(memory: SessionMemory, thread: str) -> Record:
    """``record`` through the async twins."""
    store = memory.transcript
    assert store is not None
    tid = await memory.atranscript_thread_id(thread)
    path = await store.aactive_path(memory.tenant, tid)
    ids = [m.turn_id for m in path if m.role == "user" and m.turn_id is not None]
    return [await store.areconstruct_model_input(memory.tenant, tid, t) for t in ids], path
