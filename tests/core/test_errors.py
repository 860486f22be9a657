"""The exception tree: drawn once in ``convmem.errors``, and the drawing is the code's.

Each line of the drawing names a class and, by its indentation, its parent; the test
reads the drawing back and checks it against every error class convmem defines (core
and transcript), so a new error or a moved one cannot leave the picture stale.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import convmem.errors
import convmem.transcript.errors
from convmem.errors import ConfigError, ConvMemError, NotFound
from convmem.transcript import RetentionPolicy, ThreadDeleted, ThreadNotFound, TranscriptStore

#: One node of the drawing: the root at the margin, or a branch after its indentation.
_NODE = re.compile(r"^ {4}(?:(?P<indent>[ │]*)[├└]── )?(?P<name>[A-Z]\w+)")


def _drawn() -> dict[str, str | None]:
    """class name -> parent name as the root docstring draws them (None for the root)."""
    doc = convmem.errors.__doc__ or ""
    block = doc.split("\n\n")[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = _NODE.match(line)
        if match is None:
            continue  # a description's continuation line
        depth = 0 if match["indent"] is None else len(match["indent"]) // 4 + 1
        name = match["name"]
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((depth, name))
    return parents


def _defined() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in (convmem.errors, convmem.transcript.errors):
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, ConvMemError) and obj.__module__ == module.__name__:
                found[name] = obj
    return found


def test_the_drawing_names_every_error_under_its_convmem_parent() -> None:
    drawn, defined = _drawn(), _defined()
    assert set(drawn) == set(defined)
    for name, cls in defined.items():
        parent = drawn[name]
        if parent is None:
            assert cls is ConvMemError
            continue
        convmem_bases = [b.__name__ for b in cls.__bases__ if issubclass(b, ConvMemError)]
        assert convmem_bases[0] == parent, (name, convmem_bases)


def test_the_drawing_says_which_builtin_each_error_also_is() -> None:
    doc = convmem.errors.__doc__ or ""
    for name, cls in _defined().items():
        line = next(x for x in doc.splitlines() if re.search(rf"\b{name}\b", x))
        builtins = [b.__name__ for b in cls.__bases__ if not issubclass(b, ConvMemError)
                    and b is not Exception]
        for builtin in builtins:
            assert f"({builtin})" in line, (name, line)


def test_a_missing_thread_is_a_lookup_error_not_a_configuration_error() -> None:
    assert issubclass(ThreadNotFound, NotFound) and issubclass(ThreadNotFound, LookupError)
    assert not issubclass(ThreadNotFound, ConfigError)
    assert not issubclass(ThreadNotFound, ValueError)
    assert issubclass(ThreadDeleted, ThreadNotFound)


def test_a_store_read_of_a_missing_thread_is_caught_as_lookup_error(tmp_path: Path) -> None:
    store = TranscriptStore(f"sqlite:///{tmp_path / 'r.db'}",
                            retention=RetentionPolicy(max_age=None, owner="test"))
    try:
        store.migrate()
        with pytest.raises(LookupError, match="not found") as info:
            store.get_thread("acme", "no-such-thread")
        assert not isinstance(info.value, ConfigError)
        thread = store.create_thread("acme")
        with pytest.raises(NotFound):
            store.get_thread("other-tenant", thread.id)  # another tenant's thread looks absent
    finally:
        store.close()
