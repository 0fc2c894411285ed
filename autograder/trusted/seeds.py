"""Seeds for the random inputs of hidden checks: new for every submission, the same on a regrade.

A student who learns a check's inputs (by printing them from the code the
check runs) must gain nothing by resubmitting: the class autograder gives the
check run a secret that is new for each submission (derived from the course's
key and the submission's digest), and every check draws its inputs from
:func:`seed`.  Regrading the same file draws the same inputs; any change to the
file draws new ones.  Without a secret (plain ``nbgrader autograde``, the
tests) the seeds are fixed.
"""

from __future__ import annotations

import hashlib

__all__ = ["seed", "set_secret"]

_secret: bytes | None = None


def set_secret(secret: bytes | str | None) -> None:
    """The submission's secret (the check run sets it from its job), or None for fixed seeds."""
    global _secret
    _secret = secret.encode() if isinstance(secret, str) else secret


def seed(*names: object) -> int:
    """A 48-bit seed for the case named by ``names``."""
    material = (_secret if _secret is not None else b"fixed") + b"\0" + "\0".join(map(str, names)).encode()
    return int.from_bytes(hashlib.sha256(material).digest()[:6], "big")
