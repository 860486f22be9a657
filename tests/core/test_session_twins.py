"""``SessionMemory``'s twins kept by hand, checked here: every public method that does I/O
has an ``a``-prefixed async twin with the same signature, and both say what they are."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from convmem import SessionMemory

#: Public methods with no I/O, hence no async twin.
NO_IO = {"for_tenant", "state_only", "offering_recall"}


def public_methods() -> dict[str, Callable[..., object]]:
    return {
        name: member
        for name, member in vars(SessionMemory).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


def test_every_public_method_has_its_twin_with_the_same_signature_and_a_docstring() -> None:
    methods = public_methods()
    sync = {n for n, m in methods.items() if not inspect.iscoroutinefunction(m)}
    asynchronous = {n for n, m in methods.items() if inspect.iscoroutinefunction(m)}
    assert {f"a{n}" for n in sync - NO_IO} == asynchronous
    assert len(asynchronous) >= 12  # the façade's I/O surface, all of it found
    for name in sorted(sync - NO_IO):
        twin = methods[f"a{name}"]
        assert inspect.signature(methods[name]) == inspect.signature(twin), name
        assert inspect.getdoc(methods[name]), f"{name} has no docstring"
        doc = inspect.getdoc(twin)
        assert doc and f"``{name}``" in doc, f"a{name}'s docstring does not name {name}"
    for name in NO_IO:
        assert inspect.getdoc(methods[name]), f"{name} has no docstring"


def test_the_session_steps_no_generator_of_its_own() -> None:
    """Flows run only through ``convmem.effects`` (``perform``/``aperform``): nothing in
    the package sends into a generator, throws into one or catches ``StopIteration``."""
    import ast
    from pathlib import Path

    import convmem.session

    package = Path(convmem.session.__file__).parent
    found = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ExceptHandler) and "StopIteration" in ast.unparse(node.type or node):
                found.append(f"{path.name}:{node.lineno} except StopIteration")
            if isinstance(node, ast.Attribute) and node.attr in ("send", "throw"):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert len(list(package.glob("*.py"))) >= 5 and found == []
