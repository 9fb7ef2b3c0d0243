"""The serving limits of the command line, named as vLLM names them, and what they size per base.

Owns: each limit's default and how a KV cache budget becomes a base's longest sequence, batch and prefix cache.
Refuses to know: the caches themselves (generate.py) and the arguments that set the limits (cli.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Limits:
    """The serving limits of the command line, named as vLLM names them."""

    max_model_len: int | None = None  # tokens per sequence, prompt included (None: the model's)
    max_num_seqs: int = 32  # sequences decoding at once per base
    max_num_batched_tokens: int = 2048  # prompt tokens prefilled between two decode steps
    kv_cache_memory_bytes: int | None = None  # KV cache per base (None: what the two above need)

    def sized(self, args, dtype: torch.dtype) -> tuple:
        """(max_len, max_batch, prefix_cache_tokens) for a base.

        The KV budget caps concurrent full-length sequences, then the length: the cache holds at most
        max_batch x max_len positions, so an admitted request never grows it past the budget (requests
        beyond max_batch wait in the queue). The prefix cache keeps what the budget leaves (at most four
        full-length prompts); without a budget, one.
        """
        max_len = (
            args.max_position_embeddings
            if self.max_model_len is None
            else min(self.max_model_len, args.max_position_embeddings)
        )
        if self.kv_cache_memory_bytes is None:
            return max_len, self.max_num_seqs, max_len
        per_token = 2 * args.num_layers * args.num_kv_heads * args.head_dim * torch.finfo(dtype).bits // 8
        positions = self.kv_cache_memory_bytes // per_token
        if positions < 2:
            raise ValueError(
                f"kv_cache_memory_bytes={self.kv_cache_memory_bytes} holds less than 2 positions "
                f"({per_token} bytes each)"
            )
        max_len = min(max_len, positions)
        max_batch = max(1, min(self.max_num_seqs, positions // max_len))
        return max_len, max_batch, min(4 * max_len, positions - max_batch * max_len)

    def to_json(self, threads: int) -> dict:
        return {
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "threads": threads,
        }
