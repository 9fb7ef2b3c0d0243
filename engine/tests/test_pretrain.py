"""engine.pretrain: packing, the schedule, full-weight training on masked targets, and the CLI end to end."""

import io
import json
import os
import tempfile
import unittest
from contextlib import redirect_stdout

import torch

from engine import pretrain as P
from engine import weights as W
from engine.model import Transformer
from engine.tests.helpers import make_checkpoint


class PackTest(unittest.TestCase):
    def test_first_fit_rows_keep_sequences_whole_and_apart(self):
        examples = [([5, 6, 7], [0, 1, 1]), ([8, 9], [0, 1]), ([3, 4, 5, 6], [0, 0, 1, 1])]
        tokens, seg, mask = P.pack(examples, [0, 1, 2], row_tokens=6, pad_id=0)
        self.assertEqual(tokens.tolist(), [[5, 6, 7, 8, 9, 0], [3, 4, 5, 6, 0, 0]])
        self.assertEqual(seg.tolist(), [[0, 0, 0, 1, 1, -1], [0, 0, 0, 0, -1, -1]])
        self.assertEqual(mask.tolist(), [[0, 1, 1, 0, 1, 0], [0, 0, 1, 1, 0, 0]])

    def test_batches_are_deterministic_and_cover_every_example_each_epoch(self):
        examples = [([i, i + 1], [0, 1]) for i in range(1, 40)]
        take = lambda: [b[0].tolist() for _, b in zip(range(12), P.batches(examples, 3, 16, [8], 0))]  # noqa: E731
        self.assertEqual(take(), take())
        first_epoch = [b for _, b in zip(range(5), P.batches(examples, 3, 16, [8], 0))]
        firsts = sorted(
            t
            for tokens, seg, _ in first_epoch
            for row_t, row_s in zip(tokens.tolist(), seg.tolist(), strict=True)
            for t, s, prev in zip(row_t, row_s, [None] + row_s[:-1], strict=True)
            if s >= 0 and s != prev
        )
        self.assertEqual(firsts, list(range(1, 40)))


class ScheduleTest(unittest.TestCase):
    def test_warmup_then_cosine_to_the_floor(self):
        self.assertAlmostEqual(P.lr_at(0, 100, 1.0, 10, 0.1), 0.1)
        self.assertAlmostEqual(P.lr_at(9, 100, 1.0, 10, 0.1), 1.0)
        self.assertAlmostEqual(P.lr_at(10, 100, 1.0, 10, 0.1), 1.0)
        self.assertAlmostEqual(P.lr_at(100, 100, 1.0, 10, 0.1), 0.1)


class TrainTest(unittest.TestCase):
    def test_learns_the_masked_targets_and_ignores_the_rest(self):
        with tempfile.TemporaryDirectory() as d:
            model = Transformer.from_pretrained(make_checkpoint(d, "llama", tied=True), torch.float32, "cpu")
            # The answer after prompt [10+k, 11] is 20+k; the prompt tokens themselves are not targets.
            examples = [([10 + k, 11, 20 + k, 2], [0, 0, 1, 1]) for k in range(8)]
            summary = P.train(
                model,
                examples,
                steps=60,
                seed=0,
                lr=1e-2,
                warmup=5,
                min_lr_ratio=0.1,
                weight_decay=0.0,
                batch_tokens=32,
                row_lengths=[8],
                pad_id=0,
                quiet=True,
            )
            self.assertLess(summary["final_loss"], summary["first_loss"] / 4)
            out = P.generate(model, [[10 + k, 11] for k in range(8)], [2] * 8, 0.0, 1, 0)
            self.assertEqual([o[0] for o in out], [[20 + k, 2] for k in range(8)])

    def test_cli_trains_saves_rounded_weights_and_evaluates(self):
        with tempfile.TemporaryDirectory() as d:
            folder = make_checkpoint(os.path.join(d, "m"), "llama", tied=True)
            data = os.path.join(d, "data.jsonl")
            with open(data, "w") as f:
                for k in range(6):
                    f.write(json.dumps({"ids": [10 + k, 11, 20 + k, 2], "mask": [0, 0, 1, 1]}) + "\n")
            evals = os.path.join(d, "eval.jsonl")
            with open(evals, "w") as f:
                f.write(json.dumps({"prompt": [10, 11], "max_tokens": 3}) + "\n")
            out = os.path.join(d, "eval-out.json")
            stdout = io.StringIO()
            threads = torch.get_num_threads()
            self.addCleanup(torch.set_num_threads, threads)
            self.addCleanup(torch.use_deterministic_algorithms, False)  # main() sets both for the process
            with redirect_stdout(stdout):
                P.main(
                    [
                        "--model",
                        folder,
                        "--data",
                        data,
                        "--steps",
                        "40",
                        "--lr",
                        "1e-2",
                        "--warmup",
                        "4",
                        "--batch-tokens",
                        "32",
                        "--row-tokens",
                        "8",
                        "--save-dtype",
                        "f16",
                        "--eval",
                        evals,
                        "--eval-out",
                        out,
                        "--eval-samples",
                        "2",
                        "--quiet",
                    ]
                )
            summary = json.loads(stdout.getvalue().strip().splitlines()[-1])
            self.assertEqual(summary["sequences"], 6)
            self.assertLess(summary["final_loss"], summary["first_loss"])
            saved = W.load_file(os.path.join(folder, "model.safetensors"))
            self.assertTrue(all(t.dtype == torch.float16 for t in saved.values()))
            with open(out) as f:
                generated = json.load(f)
            self.assertEqual(generated["greedy"], [[20, 2]])  # the eval runs on the rounded weights
            self.assertEqual(len(generated["sampled"][0]), 2)

    def test_refuses_data_that_cannot_be_trained(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "data.jsonl")
            for line, message in [
                ({"ids": [1, 2], "mask": [1, 1]}, "first token"),
                ({"ids": [1, 2, 3], "mask": [0, 1]}, "equal length"),
                ({"ids": [1, 500], "mask": [0, 1]}, "vocabulary"),
                ({"ids": list(range(20)), "mask": [0] * 20}, "longest row"),
            ]:
                with open(path, "w") as f:
                    f.write(json.dumps(line) + "\n")
                with self.assertRaisesRegex(ValueError, message):
                    P.read_examples(path, vocab=101, max_tokens=16)


if __name__ == "__main__":
    unittest.main()
