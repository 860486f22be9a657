"""One way to do I/O: every flow in the tree runs on ``convmem.effects`` (issue 14).

Flows (the façade's turns, the Redis stores' commands, the transcript's statements,
both adapters' calls) are generators stepped only by ``convmem.effects``'s drivers,
and their async calls are typed effects (``effects.call(x, ax, ...)``), not methods
looked up by name. So this scan of every module of the three packages fails on what
would be a second driver or a second way in: ``except StopIteration``, ``.send(`` /
``.throw(`` (stepping a generator by hand), and an ``a``-prefixed name built from a
string (``"a" + name``, ``f"a{name}"``), which mypy cannot check.
"""

from __future__ import annotations

import ast
import itertools
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("convmem", "langchain_convmem", "llamaindex_convmem")

#: The one module allowed to step generators and catch their ``StopIteration``.
DRIVER = "convmem/effects.py"

#: Anything else found, with why it is not a flow: (module, finding) -> (count, reason).
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("convmem/transcript/reader.py", ".send("): (
        1,
        "pushes bytes into ijson's push parser (basic_parse_coro), a coroutine that "
        "yields nothing back: a parser fed by the document reader, not a flow",
    ),
}


def findings(source: str) -> list[tuple[int, str]]:
    """(line, finding) for every hand-stepped generator or name-built twin in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            if any(ast.unparse(c).split(".")[-1] == "StopIteration" for c in caught):
                found.append((node.lineno, "except StopIteration"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("send", "throw"):
                found.append((node.lineno, f".{node.func.attr}("))
        elif a_prefixed(node):
            found.append((getattr(node, "lineno", 0), '"a" + name'))
    return found


def a_prefixed(node: ast.AST) -> bool:
    """``"a" + name`` or ``f"a{name}"``: a twin's name built from a string."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return isinstance(node.left, ast.Constant) and node.left.value == "a"
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        head, tail = node.values
        return isinstance(head, ast.Constant) and head.value == "a" and isinstance(
            tail, ast.FormattedValue
        )
    return False


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_scan_sees_each_kind_of_hand_stepping_and_name_dispatch() -> None:
    source = (
        "def drive(flow):\n"
        "    try:\n"
        "        step = flow.send(None)\n"
        "        flow.throw(ValueError())\n"
        "    except (KeyError, StopIteration):\n"
        "        pass\n"
        "    getattr(x, 'a' + name)\n"
        "    getattr(x, f'a{name}')\n"
        "    f'a{name} and more'\n"
    )
    assert sorted(kind for _, kind in findings(source)) == sorted(
        [".send(", ".throw(", "except StopIteration", '"a" + name', '"a" + name']
    )


def test_nothing_but_the_effects_module_steps_a_flow_or_dispatches_by_name() -> None:
    paths = modules()
    assert len(paths) > 60  # the three packages, all of them found
    unexpected: list[str] = []
    counted: Counter[tuple[str, str]] = Counter()
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        if rel == DRIVER:
            continue
        for line, kind in findings(path.read_text("utf-8")):
            if (rel, kind) in ALLOWED:
                counted[(rel, kind)] += 1
            else:
                unexpected.append(f"{rel}:{line}: {kind}")
    assert unexpected == [], "step flows with convmem.effects; build twins with effects.call"
    assert dict(counted) == {key: count for key, (count, _) in ALLOWED.items()}


def test_the_effects_module_is_where_flows_are_stepped() -> None:
    kinds = {kind for _, kind in findings((ROOT / DRIVER).read_text("utf-8"))}
    assert {"except StopIteration", ".send(", ".throw("} <= kinds


def pair_takers(trees: list[ast.Module]) -> dict[str, int]:
    """Functions taking a twin pair (parameters ``sync, async_``): name -> the pair's index
    among the positional arguments of a call (``self`` not counted)."""
    found = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.posonlyargs + node.args.args]
                names = names[1:] if names[:1] == ["self"] else names
                for i, (first, second) in enumerate(itertools.pairwise(names)):
                    if (first, second) == ("sync", "async_"):
                        found[node.name] = i
    return found


def mismatched_pairs(tree: ast.Module, takers: dict[str, int]) -> tuple[int, list[str]]:
    """(pairs checked, pairs that are not ``x.name, x.aname``) among the calls of ``tree``."""
    checked, wrong = 0, []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name not in takers or len(node.args) < takers[name] + 2:
            continue
        sync, async_ = node.args[takers[name] : takers[name] + 2]
        if not (isinstance(sync, ast.Attribute) and isinstance(async_, ast.Attribute)):
            continue  # a pair passed on from the caller's own parameters
        checked += 1
        if ast.unparse(sync.value) != ast.unparse(async_.value) or async_.attr != "a" + sync.attr:
            wrong.append(f"{node.lineno}: {ast.unparse(sync)}, {ast.unparse(async_)}")
    return checked, wrong


def test_every_effect_pairs_a_method_with_its_own_async_twin() -> None:
    """mypy solves ``call(sync, async_, ...)``'s arguments from both forms at once and so
    accepts two unrelated methods that happen to agree; this pins each pair written out
    as ``x.name, x.aname`` (the same object, the twin's name)."""
    trees = {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text("utf-8")) for p in modules()}
    takers = pair_takers(list(trees.values()))
    assert {"call", "ask", "ask_on"} <= set(takers)
    total, wrong = 0, []
    for rel, tree in trees.items():
        checked, bad = mismatched_pairs(tree, takers)
        total += checked
        wrong += [f"{rel}:{line}" for line in bad]
    assert wrong == []
    assert total > 40  # the façade's, the adapters' and the flows' effects, all seen


def test_the_pair_check_sees_a_method_beside_another_methods_twin() -> None:
    tree = ast.parse("call(s.tree, s.asearch, t)\ncall(s.tree, s.atree, t)\ncall(a.x, b.ax)\n")
    assert mismatched_pairs(tree, {"call": 0}) == (3, ["1: s.tree, s.asearch", "3: a.x, b.ax"])
