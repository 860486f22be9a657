"""Fixtures for the LangChain adapter tests: a memory over the CRM domain (``crm``, like
``tenant`` and ``transcript``, is ``tests/conftest.py``'s).

Coroutine tests run under the ``blockbuster`` fixture of ``convmem.testing.pytest_plugin``
(loaded by ``tests/conftest.py``); the one-off loads below happen at import, before any
event loop runs, as an application does them at start-up.
"""

from __future__ import annotations

import pytest

from convmem.domain import Domain
from convmem.session import SessionMemory
from convmem.tokens import encoding

encoding()  # the tokenizer vocabulary: read from the package once per process


@pytest.fixture
def memory(crm: Domain) -> SessionMemory:
    return SessionMemory(crm)
