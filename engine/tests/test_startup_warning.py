"""The slow-matmul warning at engine start: it states the measurement, and blames a busy machine before a library
whenever torch carries an optimized BLAS of its own."""

import unittest
from unittest import mock

import torch

from engine import machine


class SlowMatmulWarning(unittest.TestCase):
    def test_names_the_measurement(self):
        text = machine.slow_matmul_warning(2.6, torch.device("cpu"))
        self.assertIn("2.6 GFLOP/s", text)
        self.assertIn(f"{machine.MATMUL_SIZE}x{machine.MATMUL_SIZE}", text)
        self.assertIn(f"{torch.get_num_threads()} threads", text)
        self.assertIn("load average", text)

    def test_optimized_blas_blames_the_load_not_a_library(self):
        with mock.patch.object(machine, "torch_blas", return_value="mkl"):
            text = machine.slow_matmul_warning(2.6, torch.device("cpu"))
        self.assertIn("busy machine", text)
        self.assertNotIn("libopenblas", text)

    def test_unknown_blas_names_both_causes(self):
        with mock.patch.object(machine, "torch_blas", return_value="generic"):
            text = machine.slow_matmul_warning(2.6, torch.device("cpu"))
        self.assertIn("busy machine", text)
        self.assertIn("libopenblas0-pthread", text)

    def test_reads_torchs_build_configuration(self):
        self.assertRegex(machine.torch_blas(), r"^\S+$")


if __name__ == "__main__":
    unittest.main()
