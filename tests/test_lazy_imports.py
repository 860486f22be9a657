"""What each entry point imports: a package import loads no framework, the middleware no
SQL stack, the history no langgraph, the store no Alembic (only migrations need it).

Each case runs in a fresh interpreter and lists the heavy top-level modules it loaded.
Times are measured by ``python -X importtime`` or a stopwatch, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("sqlalchemy", "alembic", "langchain", "langchain_core", "langgraph", "llama_index",
         "redis", "rich", "convmem.transcript", "convmem.session")


def loaded(statement: str) -> set[str]:
    code = (
        f"import sys\n{statement}\n"
        "import json\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted(h for h in heavy if any(m == h or m.startswith(h + '.') "
        "for m in sys.modules))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True, timeout=300)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_convmem_loads_only_the_core_it_needs() -> None:
    assert loaded("import convmem") == set()
    assert "convmem.session" in loaded("from convmem import SessionMemory")


def test_the_policy_imports_the_resolution_record_not_the_resolvers() -> None:
    code = ("import sys\nimport convmem.policy\n"
            "print(sorted(m for m in sys.modules if m.startswith('convmem.resolve')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True, timeout=300)
    assert out.stdout.strip() == "['convmem.resolve', 'convmem.resolve.resolution']"


def test_the_transcript_store_needs_no_alembic_until_it_migrates() -> None:
    assert loaded("from convmem.transcript import RetentionPolicy") == {"convmem.transcript"}
    got = loaded("from convmem.transcript import TranscriptStore")
    assert "sqlalchemy" in got and "alembic" not in got


def test_langchain_adapters_load_what_they_use() -> None:
    pytest.importorskip("langchain")
    assert loaded("import langchain_convmem") == set()
    middleware = loaded("from langchain_convmem import SessionMemoryMiddleware")
    assert {"langchain", "langgraph"} <= middleware
    assert not middleware & {"sqlalchemy", "alembic", "convmem.transcript"}
    history = loaded("from langchain_convmem import ConvMemChatMessageHistory")
    assert "convmem.transcript" in history and not history & {"langgraph", "alembic"}
    runnable = loaded("from langchain_convmem import RunnableWithSessionMemory")
    assert not runnable & {"langgraph", "sqlalchemy", "convmem.transcript"}


def test_llamaindex_adapters_load_what_they_use() -> None:
    pytest.importorskip("llama_index.core")
    assert loaded("import llamaindex_convmem") == set()
    memory = loaded("from llamaindex_convmem import ConvMemMemory, ConvMemChatEngine, wrap_tools")
    assert "llama_index" in memory and not memory & {"convmem.transcript", "alembic"}


@pytest.mark.parametrize("package", ["convmem", "langchain_convmem", "llamaindex_convmem",
                                     "convmem.transcript", "convmem.resolve"])
def test_every_public_name_resolves_and_dir_lists_it(package: str) -> None:
    module = pytest.importorskip(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in dir(module)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018
