"""JSON written byte for byte as Go's encoding/json writes it.

Two peers of this node read JSON that Go wrote: yggdrasil nodes compare
NodeInfo bytes, and `yggdrasilctl` prints parts of the admin socket's
answer exactly as they arrived. So what this node writes follows Go's
rules (encoding/json, Go 1.22 and later):
- map keys sorted; struct fields in the order given (a dict's order here);
- `<`, `>`, `&`, U+2028 and U+2029 escaped as `\\u003c` and so on;
- floats as Go formats them: no `.0` on whole numbers, an exponent only
  below 1e-6 or from 1e21 on (`1e-7`, `1e+21`);
- `Indent` as `json.Encoder.SetIndent("", "  ")` lays a document out.

`Raw` is JSON text kept as it came (Go's json.RawMessage): a remote
node's NodeInfo is passed on with its keys and numbers as that node wrote
them.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

_HTML_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                 ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
# A JSON document's tokens: strings, punctuation, other scalars, and the
# white space between them.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+|\s+', re.S)


class Raw(str):
    """Compact JSON text, written as it is."""


def dumps(value: Any, *, sort_keys: bool = True) -> str:
    """`value` as Go's json.Marshal writes it (compact); dict keys sorted
    unless `sort_keys` is false (a Go struct: fields in the dict's order)."""
    return "".join(_encode(value, sort_keys))


def go_json(value: Any) -> bytes:
    """`dumps` of a map, as bytes: what Go puts on the wire."""
    return dumps(value).encode()


def _encode(value: Any, sort_keys: bool) -> list[str]:
    if isinstance(value, Raw):
        return [value]
    if isinstance(value, str):
        return [_string(value)]
    if value is None or isinstance(value, bool):
        return [json.dumps(value)]
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, float):
        return [go_float(value)]
    if isinstance(value, dict):
        items = sorted(value.items()) if sort_keys else value.items()
        parts = ["{"]
        for index, (key, item) in enumerate(items):
            parts.append(("," if index else "") + _string(str(key)) + ":")
            parts.extend(_encode(item, sort_keys))
        parts.append("}")
        return parts
    if isinstance(value, (list, tuple)):
        parts = ["["]
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            parts.extend(_encode(item, sort_keys))
        parts.append("]")
        return parts
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _string(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    for char, escaped in _HTML_ESCAPES:
        if char in encoded:
            encoded = encoded.replace(char, escaped)
    return encoded


def go_float(value: float) -> str:
    """A float64 as Go's encoding/json writes it."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"unsupported value: {value!r}")
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        text = repr(value)  # the shortest digits, with an exponent
        mantissa, _, exponent = text.partition("e")
        return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0')}"  # Go writes e-7, not e-07
    return format(Decimal(repr(value)).normalize(), "f")


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_json(text: str | bytes, **options: Any) -> Any:
    """json.loads whose one error is ValueError. `json` raises RecursionError
    for arrays or objects nested deeper than the interpreter follows; the
    decoders that read JSON from a peer, a client or a file catch ValueError,
    and a deep document must be refused by them like any other bad one."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def loads(text: str | bytes, **options: Any) -> Any:
    """`read_json` without the NaN and Infinity that Go (and JSON) refuse."""
    return read_json(text, parse_constant=_not_json, **options)


def compact(text: str | bytes) -> Raw:
    """Valid JSON text without its white space, with Go's escapes: what
    json.Marshal makes of a json.RawMessage. ValueError if it is not JSON."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise ValueError("not UTF-8") from None
    loads(text)  # raises ValueError (JSONDecodeError) when it is not one JSON value
    parts = []
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token[0] == '"':
            for char, escaped in _HTML_ESCAPES:
                if char in token:
                    token = token.replace(char, escaped)
        elif token.isspace():
            continue
        parts.append(token)
    return Raw("".join(parts))


def indent(text: str, step: str = "  ") -> str:
    """Compact JSON `text` laid out as Go's json.Indent does with prefix ""
    and `step`: one element per line, `{}` and `[]` when empty, `": "`
    after keys."""
    out: list[str] = []
    depth = 0
    opened = False  # the last token opened an object or array
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token.isspace():
            continue
        if opened and token not in ("}", "]"):
            out.append("\n" + step * depth)
        if token in ("{", "["):
            out.append(token)
            depth += 1
            opened = True
            continue
        if token in ("}", "]"):
            depth -= 1
            if not opened:
                out.append("\n" + step * depth)
            out.append(token)
        elif token == ",":
            out.append(",\n" + step * depth)
        elif token == ":":
            out.append(": ")
        else:
            out.append(token)
        opened = False
    return "".join(out)
