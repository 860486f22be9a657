"""What both conformance suites share: every test that takes ``api`` runs once through
the store's sync methods and once through its async ones."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:  # the transcript driver imports this module without pytest
    import pytest

Mode = Literal["sync", "async"]
MODES: tuple[Mode, ...] = ("sync", "async")


class EveryMode:
    """Base of a conformance suite: parametrizes its ``api`` fixture (indirectly) by
    ``MODES``, test ids prefixed by the subclass's ``backend_id``."""

    backend_id: ClassVar[str] = ""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "api" in metafunc.fixturenames:
            ids = [f"{self.backend_id}-{m}" if self.backend_id else m for m in MODES]
            metafunc.parametrize("api", MODES, ids=ids, indirect=True)
