"""wire.py: every field a request needs is named when it is missing or wrongly typed; optional ones may be absent."""

import re
import unittest

from engine import schema, wire
from engine.tests.helpers import INIT, SAMPLING, train_request

ROW = {
    "tokens": [1, 2, 3],
    "segment_ids": [0, 0, 0],
    "mask": [0, 1, 1],
    "weights": [1, 1, 1],
    "advantages": [0, 1, 1],
    "logprobs": [None, -1.0, None],
}

# op -> a complete request: protocol.json's example of each op, with the test helpers' for the training ops.
COMPLETE = {op: spec["examples"][0] for op, spec in schema.OPS.items()}
COMPLETE["generate"] = {"base": "b", "adapter": None, "prompt": [1, 2], **SAMPLING}
COMPLETE["train_step"] = train_request([ROW], "rl")
COMPLETE["ensure_adapter"] = {"base": "b", "adapter": "a", "init": INIT}


def required(op: str, path: str) -> bool:
    """Whether protocol.json requires the field at `path` (e.g. `rows[0].mask`) of op's request."""
    node = schema.OPS[op]["request"]
    *parents, name = re.sub(r"\[\d+\]", "", path).split(".")
    for parent in parents:
        node = schema.resolve(schema.resolve(node)["properties"][parent])
        if "items" in node:
            node = schema.resolve(node["items"])
    return name in schema.resolve(node).get("required", ())


def leaves(obj, path=""):
    """(path, parent, key) of every field of a request, nested objects and row objects included."""
    for key, value in obj.items():
        at = f"{path}.{key}" if path else key
        yield at, obj, key
        if isinstance(value, dict) and key != "logit_bias":
            yield from leaves(value, at)
        elif key == "rows":
            for i, row in enumerate(value):
                yield from leaves(row, f"{at}[{i}]")


def copy(obj):
    if isinstance(obj, dict):
        return {k: copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [copy(v) for v in obj]
    return obj


class TestWire(unittest.TestCase):
    def test_complete_requests_parse(self):
        for op, msg in COMPLETE.items():
            with self.subTest(op=op):
                wire.parse(op, copy(msg))

    def test_every_missing_field_is_named(self):
        for op, msg in COMPLETE.items():
            for path, _, _ in list(leaves(msg)):
                if not required(op, path):
                    continue
                broken = copy(msg)
                parent, key = next((p, k) for at, p, k in leaves(broken) if at == path)
                del parent[key]
                with (
                    self.subTest(op=op, field=path),
                    self.assertRaisesRegex(wire.WireError, f"^{op}: missing field {re.escape(path)}( |$)"),
                ):
                    wire.parse(op, broken)

    def test_wrong_types_and_nulls_are_named(self):
        cases = [
            ("generate", "temperature", "hot"),
            ("generate", "n", 1.5),
            ("generate", "ignore_eos", 0),
            ("generate", "stop_token_ids", [1, True]),
            ("generate", "top_p", None),
            ("generate", "logit_bias", []),
            ("train_step", "loss_config.epsilon", None),
            ("train_step", "optimizer.betas", [0.9]),
            ("train_step", "optimizer.learning_rate", "1e-3"),
            ("train_step", "rows[0].mask", [0, 1]),
            ("train_step", "rows[0].advantages", [0, 1, "x"]),
            ("train_step", "loss", "dpo"),
            ("ensure_adapter", "init.rank", 0),
            ("ensure_adapter", "init.target_modules", []),
            ("forward", "rows[0].segment_ids", [0]),
        ]
        for op, path, value in cases:
            broken = copy(COMPLETE[op])
            parent, key = next((p, k) for at, p, k in leaves(broken) if at == path)
            parent[key] = value
            with (
                self.subTest(op=op, field=path),
                self.assertRaisesRegex(wire.WireError, f"^{op}: field {re.escape(path)} must be"),
            ):
                wire.parse(op, broken)

    def test_constraint_fields_are_named(self):
        generate = COMPLETE["generate"]
        for constraint, field in [
            ({"regex": 5}, "constraint.regex"),
            ({"json": {}, "disable_any_whitespace": "yes"}, "constraint.disable_any_whitespace"),
        ]:
            with (
                self.subTest(constraint=constraint),
                self.assertRaisesRegex(wire.WireError, f"^generate: (missing )?field {re.escape(field)}"),
            ):
                wire.parse_generate({**generate, "constraint": constraint})
        parsed = wire.parse_generate(
            {**generate, "constraint": {"json": {"type": "object"}, "disable_any_whitespace": True}}
        ).constraint
        self.assertEqual(
            (parsed.kind, parsed.value, parsed.disable_any_whitespace, parsed.disable_additional_properties),
            ("json", {"type": "object"}, True, False),
        )

    def test_optional_fields_mean_none_not_a_default(self):
        req = wire.parse_train_step(train_request([ROW], "rl"))
        self.assertEqual((req.reference.key, req.reference.path, req.rows[0].original_T), (None, None, None))
        self.assertIsNone(wire.parse("load_base", {"base": "b", "path": "/m"}).dtype)
        sft = wire.parse_train_step(train_request([ROW], "sft"))
        self.assertIsNone(sft.loss_config)  # the sft loss has no knobs


if __name__ == "__main__":
    unittest.main()
