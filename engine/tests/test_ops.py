"""The engine's op table (server.OPS) against the op table of docs/engine-protocol.md: the same ops, each on the
thread the doc names, each with a parser of wire.py. test/engine-ops.test.ts holds the TypeScript side to the same doc."""

import os
import re
import unittest

from engine import server, wire

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "engine-protocol.md")


def doc_table() -> dict:
    """op -> its row's cells (role, streams, every, thread)."""
    with open(DOC, encoding="utf-8") as f:
        rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \| (\w+) \| (\w+) \|$", f.read(), re.MULTILINE)
    return {op: cells for op, *cells in rows}


class OpTableTest(unittest.TestCase):
    def test_ops_and_threads_match_the_doc(self):
        table = doc_table()
        self.assertGreater(len(table), 10)
        self.assertEqual(sorted(server.OPS), sorted(table))
        for name, op in server.OPS.items():
            self.assertEqual(op.thread, table[name][3], name)

    def test_every_parser_is_wires(self):
        for name, op in server.OPS.items():
            self.assertIs(op.parse, getattr(wire, "parse_" + name), name)


if __name__ == "__main__":
    unittest.main()
