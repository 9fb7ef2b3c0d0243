"""The protocol's schema (protocol.json) and the numeric bounds (bounds.json) as the engine reads them.

Owns: loading both files, the op table's columns (role, streams, every, thread),
and checking a JSON value against a schema node of protocol.json: a missing
field, a null where none is allowed, a value of the wrong type or out of its
bounds is a WireError whose message names the op and the field's path
(`train_step: missing field loss_config.epsilon`, `generate: field top_p must
be a finite number in (0, 1] (got 2.0)`). An optional field may be absent or
null, both meaning "none" (so is an unknown key whose value is null); nothing here fills a default. Replies are checked
with the same code (`check_reply`, which the engine's tests apply to every
frame), so both directions of the wire are held to the one schema.

Refuses to know: dataclasses and tensors (wire.py builds them from a checked
request), checks that need a loaded base, threads and replies (server.py).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str) -> dict:
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return json.load(f)


PROTOCOL = _load("protocol.json")
BOUNDS = _load("bounds.json")
DEFS: dict[str, dict] = PROTOCOL["$defs"]
OPS: dict[str, dict] = PROTOCOL["ops"]
SAMPLING_BOUNDS: dict[str, dict] = BOUNDS["sampling"]
ADAPTER_WEIGHT_MAX_ABS = float(BOUNDS["adapter_weight_max_abs"]["value"])
GREEDY_TEMPERATURE_BELOW = float(BOUNDS["greedy_temperature_below"]["value"])
# What a generate request's sampling fields mean when a caller leaves them out (the client sends them all).
GENERATE_DEFAULTS: dict[str, Any] = {
    name: node["default"] for name, node in OPS["generate"]["request"]["properties"].items() if "default" in node
}


class WireError(ValueError):
    """A request the protocol does not allow; answered as bad_request with this message."""


def ref(name: str) -> dict:
    """The schema node of one of protocol.json's $defs."""
    return DEFS[name]


def enum(name: str) -> tuple:
    """The values of an enum of $defs (a list the engine's tables must agree with)."""
    node = DEFS[name]
    return tuple(node["enum"]) if "enum" in node else tuple(resolve(DEFS[node["x-keyof"]])["properties"])


def resolve(node: dict) -> dict:
    """The node a `$ref` names (with the referring node's own keywords, e.g. a description, laid over it)."""
    while "$ref" in node:
        target = DEFS[node["$ref"].rsplit("/", 1)[1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def check_request(op: str, msg: Any) -> dict:
    """The request `msg` of `op` (its id and op fields aside), checked against the op's request schema."""
    if not isinstance(msg, dict):
        raise WireError(f"{op}: the request must be an object")
    Checker(op).check(msg, OPS[op]["request"], "")
    return msg


def check_reply(op: str, payload: dict, done: bool = True) -> None:
    """A reply of `op` (its final reply, or an interim event of a streaming op when `done` is false). Strict: a
    field the schema does not declare is an error too, so the engine cannot send what the server's types lack."""
    node = OPS[op]["reply"] if done else OPS[op]["x-event"]
    Checker(f"{op} reply", strict=True).check(payload, node, "")


# --- the checker --------------------------------------------------------------

_JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}
_ARTICLE = {
    "string": "a string",
    "integer": "an integer",
    "number": "a finite number",
    "boolean": "a boolean",
    "object": "an object",
    "array": "a list",
    "null": "null",
}
_PLURAL = {
    "string": "strings",
    "integer": "integers",
    "number": "finite numbers",
    "boolean": "booleans",
    "object": "objects",
    "array": "lists",
    "null": "nulls",
}


def _types(node: dict) -> list[str]:
    t = node.get("type")
    if t is None:
        return []
    return list(t) if isinstance(t, list) else [t]


def _bounds(node: dict) -> dict:
    """minimum/maximum keywords of a node, its x-bound (bounds.json) included."""
    if "x-bound" not in node:
        return node
    b = SAMPLING_BOUNDS[node["x-bound"]]
    key = "exclusiveMinimum" if b.get("min_exclusive") else "minimum"
    return {**node, key: b["min"], "maximum": b["max"], **({"type": "integer"} if b.get("integer") else {})}


def _interval(node: dict) -> str:
    lo = node.get("exclusiveMinimum", node.get("minimum"))
    hi = node.get("exclusiveMaximum", node.get("maximum"))
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f", {'greater than' if 'exclusiveMinimum' in node else 'at least'} {lo}"
    if lo is None:
        return f", {'less than' if 'exclusiveMaximum' in node else 'at most'} {hi}"
    left = "(" if "exclusiveMinimum" in node else "["
    right = ")" if "exclusiveMaximum" in node else "]"
    return f" in {left}{lo}, {hi}{right}"


def describe(node: dict, plural: bool = False) -> str:
    """What a value of this node must be, in words ("a non-empty list of integers")."""
    node = _bounds(resolve(node))
    if "enum" in node or "const" in node:
        values = node.get("enum", [node.get("const")])
        words = [
            json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v) for v in values
        ]
        return words[0] if len(words) == 1 else f"one of {', '.join(words)}" if not plural else " or ".join(words)
    if "x-keyof" in node:
        return f"one of {', '.join(resolve(DEFS[node['x-keyof']])['properties'])}"
    if "oneOf" in node:
        return " or ".join(describe(branch, plural) for branch in node["oneOf"])
    parts = []
    for t in _types(node):
        if t == "array":
            parts.append(_describe_array(node, plural))
        elif t == "string" and node.get("minLength"):
            parts.append("non-empty strings" if plural else "a non-empty string")
        elif t == "boolean" and len(_types(node)) == 1:
            parts.append("booleans" if plural else "true or false")
        else:
            parts.append((_PLURAL if plural else _ARTICLE)[t] + ("" if t == "null" else _interval(node)))
    return " or ".join(parts) or "any JSON value"


def _describe_array(node: dict, plural: bool) -> str:
    if "prefixItems" in node:
        items = ", ".join(describe(item) for item in node["prefixItems"])
        return f"{'lists' if plural else 'a list'} of {len(node['prefixItems'])} ({items})"
    head = ("non-empty " if node.get("minItems") else "") + ("lists" if plural else "list")
    head = head if plural else f"a {head}"
    if "items" in node:
        return f"{head} of {describe(node['items'], plural=True)}"
    return head


def _simple(node: dict) -> bool:
    """A node whose errors read best at its own path: a primitive, or a list of them (one per token, say)."""
    node = resolve(node)
    if "prefixItems" in node:
        return True
    if "items" in node and _types(node) and "array" in _types(node):
        return _simple(node["items"])
    return not ({"object"} & set(_types(node))) and "oneOf" not in node and "properties" not in node


class Checker:
    """Checks values against schema nodes; every error names `op` and the field's path."""

    def __init__(self, op: str, strict: bool = False):
        self.op, self.strict = op, strict  # strict: undeclared fields are errors (replies), else ignored (requests)
        self.whole = "the reply" if strict else "the request"

    def fail(self, path: str, node: dict, value: Any, detail: str = "") -> WireError:
        got = "" if detail else _got(node, value)
        where = f"field {path}" if path else self.whole
        return WireError(f"{self.op}: {where} must be {describe(node)}{got}{detail}")

    def check(self, value: Any, node: dict, path: str) -> None:
        node = _bounds(resolve(node))
        if "oneOf" in node:
            return self._one_of(value, node, path)
        if value is None:
            if "null" in _types(node):
                return None
            raise WireError(f"{self.op}: field {path} must be given (it is null)")
        if "const" in node or "enum" in node:
            values = node.get("enum", [node.get("const")])
            if isinstance(value, bool) != isinstance(values[0], bool) or value not in values:
                raise self.fail(path, node, value)
            return None
        if "x-keyof" in node:
            keys = resolve(DEFS[node["x-keyof"]])["properties"]
            if value not in keys:
                raise WireError(f"{self.op}: unknown {path} {value!r}; known: {', '.join(keys)}")
            return None
        types = _types(node)
        kind = next((t for t in types if t != "null" and _JSON_TYPES[t](value)), None)
        if types and kind is None:
            raise self.fail(path, node, value)
        if kind in ("integer", "number"):
            self._number(value, node, path)
        elif kind == "string" and len(value) < node.get("minLength", 0):
            raise self.fail(path, node, value)
        elif kind == "array":
            self._array(value, node, path)
        elif kind == "object":
            self._object(value, node, path)
        return None

    def _one_of(self, value: Any, node: dict, path: str) -> None:
        errors = []
        for branch in node["oneOf"]:
            try:
                return self.check(value, branch, path)
            except WireError as e:
                errors.append(e)
        nullable = [b for b in node["oneOf"] if resolve(b).get("type") != "null"]
        if len(nullable) == 1 and value is not None:
            raise errors[node["oneOf"].index(nullable[0])]
        raise self.fail(path, node, value)

    def _number(self, value, node: dict, path: str) -> None:
        too_low = ("minimum" in node and value < node["minimum"]) or (
            "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]
        )
        too_high = ("maximum" in node and value > node["maximum"]) or (
            "exclusiveMaximum" in node and value >= node["exclusiveMaximum"]
        )
        if too_low or too_high:
            raise self.fail(path, node, value)

    def _array(self, value: list, node: dict, path: str) -> None:
        if len(value) < node.get("minItems", 0):
            raise self.fail(path, node, value)
        prefix = node.get("prefixItems")
        if prefix is not None:
            if node.get("items") is False and len(value) > len(prefix):
                raise self.fail(path, node, value)
            pairs = list(zip(prefix, value))
        else:
            items = node.get("items")
            if items is None:
                return None
            if _fast_items(value, resolve(items)):
                return None
            pairs = [(items, v) for v in value]
        whole = _simple(node)
        for i, (item_node, item) in enumerate(pairs):
            try:
                self.check(item, item_node, f"{path}[{i}]")
            except WireError:
                if not whole:
                    raise
                raise self.fail(path, node, value, f" (has {item!r} at [{i}])") from None
        return None

    def _object(self, value: dict, node: dict, path: str) -> None:
        props = node.get("properties", {})
        at = (lambda name: f"{path}.{name}") if path else (lambda name: name)
        for name in node.get("required", ()):
            if name not in value:
                raise WireError(f"{self.op}: missing field {at(name)}")
        for name, sub in props.items():
            if name in value and (value[name] is not None or name in node.get("required", ())):
                self.check(value[name], sub, at(name))
        extra = node.get("additionalProperties", not (self.strict and "properties" in node))
        if extra is False:
            unknown = sorted(k for k, v in value.items() if k not in props and (v is not None or self.strict))
            if unknown:
                where = f"field {path}" if path else self.whole
                raise WireError(f"{self.op}: {where} has unknown keys: {', '.join(unknown)}")
        elif isinstance(extra, dict):
            for name, v in value.items():
                if name not in props:
                    self.check(v, extra, at(name))


def _fast_items(value: list, items: dict) -> bool:
    """True when every item of a (long) list of plain numbers passes, checked in one tight loop; False sends the
    list through the item-by-item check, which finds and names the first that does not."""
    kinds = items.get("type")
    if kinds not in ("integer", "number", ["number", "null"]) or any(
        k in items for k in ("exclusiveMinimum", "exclusiveMaximum", "x-bound")
    ):
        return False
    lo, hi = items.get("minimum", -math.inf), items.get("maximum", math.inf)
    if kinds == "integer":
        return all(type(v) is int and lo <= v <= hi for v in value)
    nullable = kinds != "number"
    return all(
        (v is None and nullable) or (type(v) in (int, float) and lo <= v <= hi and math.isfinite(v)) for v in value
    )


def _got(node: dict, value: Any) -> str:
    """` (got 2.0)` for a number out of its bounds; nothing otherwise."""
    node = _bounds(resolve(node))
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f" (got {value})" if numeric and _interval(node) and "enum" not in node else ""


def op_table() -> dict[str, tuple[str, bool, bool, str]]:
    """op -> (role, streams, every, thread), protocol.json's op table."""
    return {name: (op["role"], op["streams"], bool(op.get("every")), op["thread"]) for name, op in OPS.items()}
