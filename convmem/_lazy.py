"""Public names imported on first use (PEP 562), for the packages' ``__init__`` modules.

A package lists the names each of its modules defines and binds the two module hooks:

    __getattr__, __dir__ = lazy_names(__name__, {".module": ("Name", ...), ...}, __all__)

so ``import package`` loads none of those modules, ``from package import Name`` loads
one, and ``dir(package)`` still shows every public name. A name, once loaded, is
cached in the package's namespace, so the hook runs once per name.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from importlib import import_module


def lazy_names(
    package: str, homes: Mapping[str, Iterable[str]], public: Iterable[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``homes`` maps a module (absolute, or
    relative to ``package`` when it starts with ``.``) to the names it defines."""
    home_of = {name: module for module, names in homes.items() for name in names}
    listed = frozenset(public)

    def __getattr__(name: str) -> object:
        home = home_of.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | listed)

    return __getattr__, __dir__
