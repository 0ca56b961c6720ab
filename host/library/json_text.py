"""JSON text decoded with a one-line error for anything that is not JSON, never a crash."""

from __future__ import annotations

import json
import sys
from typing import Any


def parse_json(text: str | bytes) -> Any:
    """Decode JSON text; raises ValueError with one line for anything Python's json would choke on.

    Beyond syntax: nesting deeper than the interpreter's recursion limit, integers of more than
    4,300 digits, and the non-standard constants NaN and Infinity are all refused, never a crash.
    """
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("not valid JSON: not UTF-8 text") from None
    except json.JSONDecodeError as problem:
        raise ValueError(f"not valid JSON: {str(problem).splitlines()[0]:.200}") from None
    except ValueError as problem:
        if "integer string conversion" in str(problem):
            raise ValueError(f"not valid JSON: a number has more than {sys.get_int_max_str_digits()} digits") from None
        raise ValueError(f"not valid JSON: {str(problem).splitlines()[0]:.200}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")
