"""wire.py: every field a request needs is named when it is missing or wrongly typed; optional ones may be absent."""

import re
import unittest

from engine import wire
from engine.tests.helpers import INIT, SAMPLING, train_request

ROW = {
    "tokens": [1, 2, 3],
    "segment_ids": [0, 0, 0],
    "mask": [0, 1, 1],
    "weights": [1, 1, 1],
    "advantages": [0, 1, 1],
    "logprobs": [None, -1.0, None],
}

# op -> (parser, a complete request, the fields it may leave out)
COMPLETE = {
    "load_base": (wire.parse_load_base, {"base": "b", "path": "/m", "dtype": "float32"}, {"dtype"}),
    "ensure_adapter": (wire.parse_ensure_adapter, {"base": "b", "adapter": "a", "init": INIT}, set()),
    "save_adapter": (wire.parse_save_adapter, {"adapter": "a", "path": "/p"}, set()),
    "drop_adapter": (wire.parse_drop_adapter, {"adapter": "a"}, set()),
    "cancel": (wire.parse_cancel, {"target": "g"}, set()),
    "check_constraint": (
        wire.parse_check_constraint,
        {"base": "b", "constraint": {"choice": ["a", "b"]}},
        {"constraint.choice"},
    ),
    "generate": (wire.parse_generate, {"base": "b", "adapter": None, "prompt": [1, 2], **SAMPLING}, set()),
    "forward": (
        wire.parse_forward,
        {"base": "b", "adapter": "a", "rows": [{"tokens": [1, 2], "segment_ids": [0, 0]}]},
        set(),
    ),
    "train_step": (wire.parse_train_step, train_request([ROW], "rl"), set()),
}


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
        for op, (parse, msg, _) in COMPLETE.items():
            with self.subTest(op=op):
                parse(copy(msg))

    def test_every_missing_field_is_named(self):
        for op, (parse, msg, optional) in COMPLETE.items():
            for path, _, _ in list(leaves(msg)):
                if path in optional:
                    continue
                broken = copy(msg)
                parent, key = next((p, k) for at, p, k in leaves(broken) if at == path)
                del parent[key]
                with (
                    self.subTest(op=op, field=path),
                    self.assertRaisesRegex(wire.WireError, f"^{op}: missing field {re.escape(path)}( |$)"),
                ):
                    parse(broken)

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
            parse, msg, _ = COMPLETE[op]
            broken = copy(msg)
            parent, key = next((p, k) for at, p, k in leaves(broken) if at == path)
            parent[key] = value
            with (
                self.subTest(op=op, field=path),
                self.assertRaisesRegex(wire.WireError, f"^{op}: field {re.escape(path)} must be"),
            ):
                parse(broken)

    def test_constraint_fields_are_named(self):
        generate = COMPLETE["generate"][1]
        for constraint, field in [
            ({"regex": 5}, "constraint.regex"),
            ({"structural_tag": {"triggers": ["<"]}}, "constraint.structural_tag.structures"),
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
        self.assertIsNone(wire.parse_load_base({"base": "b", "path": "/m"}).dtype)
        sft = wire.parse_train_step(train_request([ROW], "sft"))
        self.assertIsNone(sft.loss_config)  # the sft loss has no knobs


if __name__ == "__main__":
    unittest.main()
