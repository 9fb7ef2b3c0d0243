"""parts.py: each rank's share of a request's rows and its lockstep micro-batches (no process group needed: a Group
of another rank answers what that rank would compute)."""

from __future__ import annotations

import unittest

import torch

from engine import parts
from engine.group import Group
from engine.tests.helpers import parse_rows


def rows_of(*segment_lengths: list[int]) -> list:
    out = []
    for lengths in segment_lengths:
        seg = [s for s, n in enumerate(lengths) for _ in range(n)]
        mask = [int(t > 0 and seg[t] == seg[t - 1]) for t in range(len(seg))]  # a segment's first token: none
        out.append({"tokens": [3 + t % 50 for t in range(len(seg))], "segment_ids": seg, "mask": mask})
    return parse_rows(out, 101, 4096, "sft")


class Parts(unittest.TestCase):
    def test_spans_split_sizes_into_contiguous_shares_of_about_equal_sums(self):
        two = Group(world_size=2)
        self.assertEqual(two.spans([42] * 24), [(0, 12), (12, 24)])
        self.assertEqual(two.spans([5]), [(0, 1), (1, 1)])  # one piece: the second rank gets none
        self.assertEqual(Group(world_size=3).spans([100, 1, 1]), [(0, 1), (1, 1), (1, 3)])
        self.assertEqual(Group().spans([3, 4]), [(0, 2)])

    def test_a_cut_never_parts_tokens_of_one_segment_id(self):
        self.assertEqual(parts.segments([0, 0, 1, 1, 2]), [(0, 2), (2, 4), (4, 5)])
        self.assertEqual(parts.segments([0, 0, 1, 1, 0, 2]), [(0, 5), (5, 6)])  # 0 comes back: 0..4 attend together

    def test_every_rank_runs_as_many_batches_and_the_parts_cover_every_token_once(self):
        rows = rows_of([9], [14], [6], [5, 8, 7])  # rank 0: [9], [14, 6]; rank 1: [5 8 7] and an empty batch
        plans = [parts.plan(rows, Group(rank=r, world_size=2)) for r in range(2)]
        self.assertEqual([len(p) for p in plans], [2, 2])
        self.assertEqual(plans[1][1], [])
        covered = sorted(
            (part.row, t) for plan in plans for batch in plan for part in batch for t in range(part.begin, part.end)
        )
        self.assertEqual(covered, [(r, t) for r, row in enumerate(rows) for t in range(row.tokens_T.shape[0])])
        for plan in plans:  # no batch beyond the longest row (one row at a time, as one rank runs them)
            for batch in plan:
                self.assertLessEqual(sum(part.end - part.begin for part in batch), 20)

    def test_a_row_cut_across_ranks_keeps_whole_segments_and_its_fields_alike(self):
        rows = rows_of([7, 9, 5, 11, 6])
        first, second = (parts.plan(rows, Group(rank=r, world_size=2))[0][0] for r in range(2))
        self.assertEqual((first.begin, first.end, second.begin, second.end), (0, 21, 21, 38))
        self.assertTrue(torch.equal(second.data.mask_T, rows[0].mask_T[21:38]))
        self.assertTrue(torch.equal(second.data.segment_ids_T, rows[0].segment_ids_T[21:38]))

    def test_a_packed_batch_keeps_its_parts_segments_apart(self):
        rows = rows_of([3], [2], [1, 4])  # rows 0 and 1 share a batch and a segment id 0: they must not attend
        batch = parts.plan(rows, Group())[0]
        tokens_T, seg_T, spans = parts.packed(batch, "cpu")
        self.assertEqual(spans, [(0, 3), (3, 5)])
        self.assertEqual(seg_T.tolist(), [0, 0, 0, 1, 1])
        self.assertEqual(tokens_T.tolist(), rows[0].tokens_T.tolist() + rows[1].tokens_T.tolist())
        tokens_T, seg_T, spans = parts.packed([], "cpu")  # an empty batch still runs the model, on two tokens
        self.assertEqual((tokens_T.shape[0], spans), (parts.EMPTY_TOKENS, []))


if __name__ == "__main__":
    unittest.main()
