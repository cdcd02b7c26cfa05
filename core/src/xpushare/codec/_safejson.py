"""Defensive JSON for annotation values: parse anything, fail only with a precise CodecError.

Why not ``json.loads`` and pydantic directly: annotation values are written by other
processes (older or newer xpushare, HAMi, a person with kubectl), and the standard tools
let through what a wire format must refuse or fail with exceptions other than CodecError:
``NaN`` and ``Infinity`` tokens, ``1e999`` (parsed as infinity), integers of thousands of
digits (ValueError), nesting deep enough to exhaust the recursion limit (RecursionError),
JSON-escaped lone surrogates that later cannot be encoded back to UTF-8, and pydantic's lax
mode turning ``"5"`` into ``5``. Every reader of the codec goes through here.
"""

import json
import math
import re
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError

from xpushare.codec.keys import HANDOFF_KEY, KUBERNETES_ANNOTATIONS_LIMIT_BYTES, MAX_VALUE_BYTES
from xpushare.errors import CodecError

#: The JSON format version of every xpushare annotation this core writes and reads.
FORMAT_VERSION = 1

# Our formats nest four levels (inventory → devices → device → partitions → profile); HAMi's
# custominfo is free-form but flat in practice. 32 leaves room and keeps every walk cheap.
MAX_JSON_DEPTH = 32

# JSON integers are bounded to int64, the widest integer Kubernetes itself serialises.
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

M = TypeVar("M", bound=BaseModel)

# Node annotations that name a pod.
_NODE_KEYS = frozenset({HANDOFF_KEY})

_SURROGATE = re.compile("[\ud800-\udfff]")
_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def describe(key: str, *, node: str | None = None, pod: str | None = None) -> str:
    """How an error names an annotation: its key, and the pod and node involved.

    Reads "of pod P on node N" for pod annotations and "of node N (pod P)" for the node
    annotations that name a pod (the handoff).
    """
    where = f"annotation {key!r}"
    if pod and key in _NODE_KEYS:
        return where + (f" of node {node!r}" if node else "") + f" (pod {pod!r})"
    if pod:
        where += f" of pod {pod!r}"
        return where + (f" on node {node!r}" if node else "")
    return where + (f" of node {node!r}" if node else "")


def fail(what: str, problem: str, hint: str) -> NoReturn:
    raise CodecError(f"{what}: {problem}; {hint}")


def short(value: object, limit: int = 60) -> str:
    """A repr short enough for a log line, whatever the input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def check_text(value: object, what: str, hint: str) -> str:
    """Refuse what cannot be an annotation value: a non-string, too long, invalid UTF-8."""
    if not isinstance(value, str):
        fail(what, f"value must be a string, got {type(value).__name__}", hint)
    if len(value) > KUBERNETES_ANNOTATIONS_LIMIT_BYTES:
        fail(what, f"{len(value)} characters is longer than Kubernetes allows", hint)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        fail(what, f"not valid UTF-8 (lone surrogate at character {exc.start})", hint)
    if size > KUBERNETES_ANNOTATIONS_LIMIT_BYTES:
        fail(what, f"{size} bytes is longer than Kubernetes allows", hint)
    return value


class _NotJson(ValueError):
    """A token Python's parser accepts and JSON does not."""


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number")


def load_json(value: object, what: str, hint: str) -> Any:
    """Parse *value* as JSON and check the whole tree; any defect is a CodecError."""
    text = check_text(value, what, hint)
    if not text.strip():
        fail(what, "empty value", hint)
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        fail(what, f"invalid JSON at character {exc.pos}: {exc.msg}", hint)
    except _NotJson as exc:
        fail(what, f"invalid JSON: {exc}", hint)
    except ValueError:  # Python's int() refuses numbers past sys.get_int_max_str_digits()
        fail(what, "invalid JSON: a number has thousands of digits", hint)
    except RecursionError:
        fail(what, "invalid JSON: nested too deeply", hint)
    problem = scan(data)
    if problem is not None:
        fail(what, problem, hint)
    return data


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _SIMPLE_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{short(key, 40)}]"


def scan(data: Any) -> str | None:
    """What is wrong with a parsed JSON tree, or None: depth, numbers, strings.

    Iterative, so a pathological tree cannot exhaust the stack. A tree found clean by
    :func:`_clean` is not walked again; only a tree with a problem is, to name where.
    """
    if _clean(data):
        return None
    return _problem(data)


def _clean(data: Any) -> bool:
    """True when :func:`_problem` would find nothing; False when it might (it decides).

    Why a second walk: every annotation read or written passes here (each bind's assignment
    and handoff, each node's inventory at a list), and the walk that names the path built a
    path string for every value and matched every key with a pattern: 40 µs of an
    assignment's 130 µs encoding here (2026-12-03). Most strings are ASCII, which cannot
    hold a surrogate; exact types only, anything else is left to :func:`_problem`.
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        kind = type(node)
        if kind is str:
            if not node.isascii() and _SURROGATE.search(node):
                return False
        elif kind is dict:
            if depth >= MAX_JSON_DEPTH:
                return False
            for key, item in node.items():
                if type(key) is not str or (not key.isascii() and _SURROGATE.search(key)):
                    return False
                push((item, depth + 1))
        elif kind is list:
            if depth >= MAX_JSON_DEPTH:
                return False
            for item in node:
                push((item, depth + 1))
        elif kind is int:
            if not _INT64_MIN <= node <= _INT64_MAX:
                return False
        elif kind is float:
            if not math.isfinite(node):
                return False
        elif node is not None and kind is not bool:
            return False
    return True


def _problem(data: Any) -> str | None:
    """:func:`scan`'s answer, naming where the problem is."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        at = f" at {path}" if path else ""
        if isinstance(node, dict | list):
            if depth >= MAX_JSON_DEPTH:
                return f"JSON nested deeper than {MAX_JSON_DEPTH} levels{at}"
            if isinstance(node, dict):
                for key, item in node.items():
                    if _SURROGATE.search(key):
                        return f"object key{at} is not valid UTF-8 (lone surrogate)"
                    stack.append((item, _child(path, key), depth + 1))
            else:
                stack.extend((item, _child(path, i), depth + 1) for i, item in enumerate(node))
        elif isinstance(node, str):
            if _SURROGATE.search(node):
                return f"string{at} is not valid UTF-8 (lone surrogate)"
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if not _INT64_MIN <= node <= _INT64_MAX:
                return f"number{at} does not fit in 64 bits"
        elif isinstance(node, float) and not math.isfinite(node):
            return f"number{at} is too large"
    return None


def dump_json(data: Any) -> str:
    """Compact and deterministic: no spaces, UTF-8 kept as is, no NaN."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def write(data: Any, what: str, hint: str) -> str:
    """Encode *data* compactly, refusing what a reader here would refuse.

    The same checks as :func:`load_json` (plus the size limit of :data:`MAX_VALUE_BYTES`), so
    whatever xpushare writes, xpushare reads back.
    """
    problem = scan(data)
    if problem is not None:
        fail(what, f"refusing to write it: {problem}", hint)
    return check_size(dump_json(data), what, hint)


def check_size(text: str, what: str, hint: str) -> str:
    """Refuse to write a value past :data:`MAX_VALUE_BYTES`."""
    size = len(text.encode("utf-8"))  # scan() refused lone surrogates already
    if size > MAX_VALUE_BYTES:
        fail(
            what,
            f"refusing to write {size} bytes: one annotation may take at most "
            f"{MAX_VALUE_BYTES} bytes (Kubernetes allows {KUBERNETES_ANNOTATIONS_LIMIT_BYTES} "
            "for all annotations of an object together)",
            hint,
        )
    return text


def _loc(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path = _child(path, part)
    return path


def validation_problem(exc: ValidationError, limit: int = 3) -> str:
    """A pydantic error as one line: where, and what is wrong, for the first few problems."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = []
    for err in errors[:limit]:
        msg = str(err["msg"]).removeprefix("Value error, ")
        where = _loc(tuple(err["loc"]))
        parts.append(f"{where}: {msg}" if where else msg)
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more problems")
    return "; ".join(parts)


def split_version(data: Any, what: str, hint: str) -> dict[str, Any]:
    """Check the ``v`` field of one of our annotations and return the other fields."""
    if not isinstance(data, dict):
        fail(what, f"expected a JSON object, got {json_type(data)}", hint)
    if "v" not in data:
        fail(what, "no format version field 'v': not an xpushare annotation", hint)
    version = data["v"]
    if isinstance(version, bool) or not isinstance(version, int):
        fail(what, f"format version 'v' must be an integer, got {short(version)}", hint)
    if version > FORMAT_VERSION:
        raise CodecError(
            f"{what}: written in format version {version} by a newer xpushare, and this "
            f"xpushare reads format version {FORMAT_VERSION} only; upgrade this component "
            "to the release that wrote it"
        )
    if version < 1:
        fail(what, f"unknown format version {version}", hint)
    return {k: v for k, v in data.items() if k != "v"}


def validate(model: type[M], fields: dict[str, Any], what: str, hint: str) -> M:
    """Validate already-scanned JSON fields against *model* with JSON's strict types."""
    try:
        return model.model_validate_json(dump_json(fields), strict=True)
    except ValidationError as exc:
        fail(what, validation_problem(exc), hint)
