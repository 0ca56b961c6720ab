"""The one error of this package: a constraint the host cannot evaluate, said in one line."""

from __future__ import annotations


class ConstraintError(ValueError):
    """A constraint (query expression, structured form or metadata_condition) the host refuses.

    The message is one line that names the construct and where it is (a character offset in a
    query string, or a JSON path in a structured form), so a client can fix the request without
    reading our code. The HTTP edge answers it with a 400 (RAGFlow's dialect: code 101).
    """
