"""Example domains shipped with convmem, loadable by name: ``load_domain("crm")``.

Each example is a §7 domain file in this package (``<name>.json``): ``crm`` (sales
operations: customers, orders, products, reps; the domain of the labelled dev set),
``crm_typed`` (the same with ``types`` declared: typed references, spec §10),
``helpdesk`` (an IT service desk: devices, employees, tickets, applications) and
``starter`` (the commented file ``convmem init`` writes). They are data, read
through ``importlib.resources`` so they load from a wheel, a zip or a checkout alike.
A name is a bare word (no path separator, no ``.json``); ``"./crm"`` is a path.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from convmem.errors import ConfigError

__all__ = ["is_name", "looks_like_name", "names", "read_bytes", "source"]

_SUFFIX = ".json"


def looks_like_name(text: str) -> bool:
    """A bare word that ``load_domain`` would look up among the examples, not on disk."""
    return bool(text) and not any(sep in text for sep in "/\\") and not text.endswith(_SUFFIX)


@cache
def names() -> tuple[str, ...]:
    """The bundled examples, sorted."""
    found = (entry.name for entry in resources.files(__name__).iterdir())
    return tuple(sorted(n[: -len(_SUFFIX)] for n in found if n.endswith(_SUFFIX)))


def is_name(text: str) -> bool:
    return looks_like_name(text) and text in names()


def source(name: str) -> str:
    """How errors and ``convmem domain check`` name an example."""
    return f"{__name__}/{name}{_SUFFIX}"


def read_bytes(name: str) -> bytes:
    """The example's file, byte for byte (``convmem init`` copies ``starter``)."""
    if not is_name(name):
        raise ConfigError(f"no bundled example domain {name!r}; examples: {', '.join(names())}")
    return resources.files(__name__).joinpath(name + _SUFFIX).read_bytes()
