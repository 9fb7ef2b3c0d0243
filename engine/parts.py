"""Which part of a request's rows each rank of a trainer computes, and in which micro-batches.

Owns: cutting the rows at segment boundaries into one contiguous share of about equal tokens per rank (a cut never
parts tokens of one segment id, which attend to each other, so a part's logprobs and token losses are those its whole
row gives there), grouping a rank's parts into micro-batches of at most the longest row's tokens (one forward and one
backward each, as a single rank runs one row at a time), the lockstep that gives every rank as many micro-batches (FSDP
gathers every block at each forward and backward: collectives all ranks must take alike, so a rank with fewer parts runs
empty batches), and a batch packed as one row (each part's segments renumbered apart) with where each part lies in it.

Refuses to know: what a row holds besides its tokens and segment ids (it slices every tensor field alike), models,
losses and collectives (group.py cuts the shares).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .group import Group

EMPTY_TOKENS = 2  # an empty batch still runs the model (and its gathers) on this many tokens, with nothing trained


@dataclass
class Part:
    row: int  # the whole row's index in the request
    begin: int  # its tokens in that row: [begin, end)
    end: int
    data: Any  # the row cut to those tokens (the row itself when whole)


def segments(ids: list[int]) -> list[tuple[int, int]]:
    """[begin, end) of a row's runs of segment ids, merged where an id comes back after another."""
    last = {sid: t for t, sid in enumerate(ids)}
    spans, begin, reach = [], 0, -1
    for t, sid in enumerate(ids):
        reach = max(reach, last[sid])
        if reach == t:
            spans.append((begin, t + 1))
            begin = t + 1
    return spans


def whole(row) -> list[tuple[int, int]]:
    """A row that is one sequence (Tinker's datum): never cut."""
    return [(0, int(row.tokens_T.shape[0]))]


def of_segments(row) -> list[tuple[int, int]]:
    return segments(row.segment_ids_T.tolist())


def plan(rows: Sequence, group: Group, cuts: Callable = of_segments) -> list[list[Part]]:
    """This rank's parts of `rows` (cut where `cuts` allows) in lockstep micro-batches."""
    spans = [(r, a, b) for r, row in enumerate(rows) for a, b in cuts(row)]
    limit = max((int(row.tokens_T.shape[0]) for row in rows), default=1)
    shares = group.spans([b - a for _, a, b in spans])
    batches = [_batched(_parts(rows, spans[lo:hi]), limit) for lo, hi in shares]
    mine = batches[group.rank]
    return mine + [[] for _ in range(max(len(b) for b in batches) - len(mine))]


def _parts(rows: Sequence, spans: list[tuple[int, int, int]]) -> list[Part]:
    merged: dict[int, list[int]] = {}
    for r, a, b in spans:
        merged.setdefault(r, [a, b])[1] = b
    return [Part(r, a, b, _cut(rows[r], a, b)) for r, (a, b) in merged.items()]


def _cut(row, a: int, b: int):
    if a == 0 and b == row.tokens_T.shape[0]:
        return row
    cut = {f.name: getattr(row, f.name)[a:b] for f in dataclasses.fields(row) if torch.is_tensor(getattr(row, f.name))}
    return dataclasses.replace(row, **cut)


def _batched(parts: list[Part], limit: int) -> list[list[Part]]:
    batches: list[list[Part]] = []
    size = 0
    for part in parts:
        n = part.end - part.begin
        if not batches or size + n > limit:
            batches.append([])
            size = 0
        batches[-1].append(part)
        size += n
    return batches


def packed(batch: list[Part], device) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
    """(tokens_T, segment_ids_T, each part's [begin, end) in them) of a batch as one row; an empty batch is
    EMPTY_TOKENS tokens of id 0 in one segment."""
    if not batch:
        zeros = torch.zeros(EMPTY_TOKENS, dtype=torch.long, device=device)
        return zeros, zeros, []
    tokens, ids, spans, offset, next_id = [], [], [], 0, 0
    for part in batch:
        tokens.append(part.data.tokens_T)
        seg = getattr(part.data, "segment_ids_T", None)
        seg = torch.zeros_like(part.data.tokens_T) if seg is None else seg
        _, dense = torch.unique(seg, return_inverse=True)
        ids.append(dense + next_id)
        next_id += int(dense.max()) + 1
        spans.append((offset, offset + seg.shape[0]))
        offset += seg.shape[0]
    return torch.cat(tokens).to(device), torch.cat(ids).to(device), spans
