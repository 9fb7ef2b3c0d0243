"""The engine's ops against protocol.json, their one home: every op has a handler in server.py and no handler
lacks an op; every parser wire.py keeps is for an op; every op's example request parses; the op table of
docs/engine-protocol.md is the schema's (scripts/engine-protocol.ts writes it, test/engine-ops.test.ts checks
the TypeScript side)."""

import os
import re
import unittest

from engine import schema, server, wire

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "engine-protocol.md")


def doc_table() -> dict:
    """op -> its row's cells (role, streams, every, thread)."""
    with open(DOC, encoding="utf-8") as f:
        rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \| (\w+) \| (\w+) \|", f.read(), re.MULTILINE)
    return {op: tuple(cells) for op, *cells in rows}


class OpTableTest(unittest.TestCase):
    def test_every_op_has_a_handler_and_every_handler_an_op(self):
        self.assertGreater(len(schema.OPS), 10)
        self.assertEqual(sorted(server.HANDLERS), sorted(schema.OPS))
        self.assertLessEqual(set(wire.PARSERS), set(schema.OPS))
        self.assertEqual(set(server.THREADS.values()), {server.READER, server.COMPUTE, server.TRAINING})

    def test_the_docs_op_table_is_the_schemas(self):
        yes = {True: "yes", False: "no"}
        expected = {
            op: (role, yes[streams], yes[every], thread)
            for op, (role, streams, every, thread) in schema.op_table().items()
        }
        self.assertEqual(doc_table(), expected)

    def test_every_example_request_parses(self):
        for op, spec in schema.OPS.items():
            with self.subTest(op=op):
                self.assertTrue(spec.get("examples"), f"{op} has an example request in protocol.json")
                for example in spec["examples"]:
                    wire.parse(op, example)


if __name__ == "__main__":
    unittest.main()
