"""An index a dialect creates on a table: its name and the statement that creates it.

A value of its own, beneath both :mod:`.base` (the dialect's queue and delayed tables) and :mod:`.archive`
(the archive's mixin, which :mod:`.base` builds on), so neither of those has to import the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IndexSpec"]


@dataclass(frozen=True)
class IndexSpec:
    """An index by name, with its ``CREATE INDEX`` statement (run when provisioning finds it missing)."""

    name: str
    create: str
