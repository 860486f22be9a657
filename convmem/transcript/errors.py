"""Errors specific to the durable record (subclasses of the ``convmem.errors`` tree).

ConfigError
├── ThreadExists     an id or key is already taken in this tenant (import: ``--new-id``)
└── ThreadNotFound   no such thread *in this tenant* (another tenant's thread looks absent)
"""

from __future__ import annotations

from convmem.errors import ConfigError


class ThreadExists(ConfigError):
    """A thread with this id or key already exists for the tenant."""


class ThreadNotFound(ConfigError, LookupError):
    """The thread (or a message in it) does not exist for this tenant.

    Cross-tenant access raises this too, so a caller cannot learn that another
    tenant's thread exists.
    """
