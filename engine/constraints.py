"""Constrained decoding: the server's byte-level automata applied to a base's vocabulary.

Owns: TokenTable (each token's bytes, sent once per base with load_base's
`token_bytes`), Automaton (the DFA of generate's `constraint`: byte classes, a
transition table, accepting states), the allowed-token mask of each automaton
state (every token's bytes walked through the table at once, then cached),
Guide (one sequence's current state), ConstraintStore (automata by base and
id, least recently used first out), and the per-row masks of a batch step.

EOS is never text: it is allowed exactly in accepting states, and it is the
only choice in an accepting state with nowhere left to go.

Refuses to know: how automata are compiled (the server's src/chat/constraints/),
their wire form (wire.py decodes it and the token bytes),
sampling (sampling.py applies the masks), scheduling (generate.py).
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

import torch

from .wire import Constraint, ConstraintRef, parse_constraint

DEAD = -1
MASK_CACHE_BYTES = 32 << 20  # per automaton; masks are one bool per vocabulary entry
MIN_CACHED_MASKS = 256


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} engine: {msg}\n")
    sys.stderr.flush()


class TokenTable:
    """Token bytes by id, sorted longest first so that position l of the walk touches a prefix of rows."""

    def __init__(self, token_bytes: List[Optional[bytes]], vocab_size: int, device: torch.device):
        if len(token_bytes) > vocab_size:
            raise ValueError(f"token_bytes must have at most vocab_size={vocab_size} entries")
        pieces: List[Optional[bytes]] = [p or None for p in token_bytes]
        pieces += [None] * (vocab_size - len(pieces))
        self.vocab_size, self.device, self.pieces = vocab_size, device, pieces
        ids = sorted((i for i, p in enumerate(pieces) if p), key=lambda i: -len(pieces[i]))
        longest = len(pieces[ids[0]]) if ids else 0
        # Byte l of every token as one contiguous row (zero past a token's end: never read).
        columns = bytearray(longest * len(ids))
        for row, i in enumerate(ids):
            for pos, byte in enumerate(pieces[i]):
                columns[pos * len(ids) + row] = byte
        self.ids_T = torch.tensor(ids, dtype=torch.long, device=device)
        self.bytes_LT = torch.frombuffer(columns, dtype=torch.uint8).reshape(longest, len(ids)).to(device) \
            if columns else torch.zeros(0, 0, dtype=torch.uint8, device=device)
        # Rows still walking at byte l: the tokens longer than l, a prefix of the rows thanks to the sort.
        longer = [0] * (longest + 1)
        for i in ids:
            longer[len(pieces[i]) - 1] += 1
        for pos in range(longest - 1, 0, -1):
            longer[pos - 1] += longer[pos]
        self.rows_at = longer[:longest]


class Automaton:
    """One constraint's DFA over bytes, with its masks over one vocabulary."""

    def __init__(self, c: Constraint, tokens: TokenTable, eos_ids: Sequence[int]):
        states, classes, start, class_of, table, accepting = c.states, c.classes, c.start, c.class_of, c.table, c.accepting
        if states <= 0 or not 0 < classes <= 256 or not 0 <= start < states:
            raise ValueError("constraint: states, classes or start out of range")
        if len(class_of) != 256 or max(class_of) >= classes:
            raise ValueError("constraint.class_of must be 256 class ids below classes")
        if len(table) != 4 * states * classes:
            raise ValueError("constraint.table must hold states * classes int32 entries")
        if any(not 0 <= s < states for s in accepting):
            raise ValueError("constraint.accepting names a state out of range")
        next_SC = torch.frombuffer(bytearray(table), dtype=torch.int32).reshape(states, classes).long()
        if bool(((next_SC < DEAD) | (next_SC >= states)).any()):
            raise ValueError("constraint.table has a transition out of range")
        self.id = c.id
        self.start = start
        self.tokens = tokens
        self.eos_ids = [t for t in eos_ids if 0 <= t < tokens.vocab_size]
        self.accepting = set(accepting)
        # Python lists for stepping one sampled token; a tensor with an absorbing dead row for whole-vocabulary walks.
        self.class_of = list(class_of)
        self.next = next_SC.tolist()
        dead = states
        table_SC = torch.cat([next_SC.masked_fill(next_SC == DEAD, dead), torch.full((1, classes), dead, dtype=torch.long)])
        self.table_SC = table_SC.to(tokens.device)
        self.class_of_256 = torch.tensor(list(class_of), dtype=torch.long, device=tokens.device)
        self.dead = dead
        self.cached: "OrderedDict[int, torch.Tensor]" = OrderedDict()  # by state, least recently used first
        self.max_masks = max(MIN_CACHED_MASKS, MASK_CACHE_BYTES // max(1, tokens.vocab_size))

    def masks(self, states: Sequence[int]) -> List[torch.Tensor]:
        """Bool [V] per state: the tokens allowed there. States seen for the first time are walked together
        (one pass over the token bytes for all of them), then cached."""
        missing = [s for s in dict.fromkeys(states) if s not in self.cached]
        if missing:
            self._build(missing)
        for s in set(states):
            self.cached.move_to_end(s)
        found = [self.cached[s] for s in states]
        while len(self.cached) > self.max_masks:
            self.cached.popitem(last=False)
        return found

    def _build(self, states: List[int]) -> None:
        tokens = self.tokens
        K, T = len(states), tokens.ids_T.shape[0]
        start_K = torch.tensor([self.dead if s == DEAD else s for s in states], dtype=torch.long, device=tokens.device)
        at_KT = start_K[:, None].expand(K, T).clone()
        for pos, rows in enumerate(tokens.rows_at):
            classes = self.class_of_256[tokens.bytes_LT[pos, :rows].long()]
            at_KT[:, :rows] = self.table_SC[at_KT[:, :rows], classes[None, :].expand(K, rows)]
        mask_KV = torch.zeros(K, tokens.vocab_size, dtype=torch.bool, device=tokens.device)
        mask_KV[:, tokens.ids_T] = at_KT != self.dead
        accepting = [k for k, s in enumerate(states) if s in self.accepting]
        if accepting and self.eos_ids:
            mask_KV[torch.tensor(accepting, device=tokens.device)[:, None], torch.tensor(self.eos_ids, device=tokens.device)] = True
        empty = (~mask_KV.any(dim=-1)).nonzero().flatten().tolist()
        for k in empty:
            # Only a vocabulary that cannot spell some byte gets here; ending beats writing outside the constraint.
            log(f"constraint {self.id}: no token continues state {states[k]}; allowing only EOS")
            mask_KV[k, self.eos_ids] = True
        for k, s in enumerate(states):
            self.cached[s] = mask_KV[k].clone()  # a row of its own: the cache bound counts whole masks

    def mask(self, state: int) -> torch.Tensor:
        return self.masks([state])[0]

    def step(self, state: int, token: int) -> int:
        piece = self.tokens.pieces[token] if 0 <= token < self.tokens.vocab_size else None
        if state == DEAD or piece is None:
            return DEAD  # EOS (which ends the sequence) or a token the mask did not allow
        for byte in piece:
            state = self.next[state][self.class_of[byte]]
            if state == DEAD:
                return DEAD
        return state


class Guide:
    """One sequence's position in its automaton."""

    __slots__ = ("automaton", "state")

    def __init__(self, automaton: Automaton):
        self.automaton, self.state = automaton, automaton.start

    def mask(self) -> torch.Tensor:
        return self.automaton.mask(self.state)

    def advance(self, token: int) -> None:
        self.state = self.automaton.step(self.state, token)


def step_masks(guides: Sequence[Optional[Guide]]) -> Optional[List[Optional[torch.Tensor]]]:
    """Per row: the allowed-token mask, or None for an unconstrained row; None when no row is constrained.
    Rows of one automaton get their masks in one call, so that new states are built in one walk."""
    rows_of: Dict[int, List[int]] = {}
    for b, g in enumerate(guides):
        if g is not None:
            rows_of.setdefault(id(g.automaton), []).append(b)
    if not rows_of:
        return None
    result: List[Optional[torch.Tensor]] = [None] * len(guides)
    for rows in rows_of.values():
        automaton = guides[rows[0]].automaton
        for b, mask in zip(rows, automaton.masks([guides[b].state for b in rows])):
            result[b] = mask
    return result


class ConstraintStore:
    """Automata by (base, id): a constraint sent again reuses its table and masks."""

    def __init__(self, max_automata: int = 32):
        self.max_automata = max_automata
        self.automata: "OrderedDict[tuple, Automaton]" = OrderedDict()

    def get(self, base: str, tokens: TokenTable, ref: ConstraintRef, eos_ids: Sequence[int]) -> Automaton:
        """The automaton `ref` names, built (its table decoded by wire.py) only when this base has not got it."""
        key = (base, ref.id)
        automaton = self.automata.get(key)
        if automaton is None or automaton.tokens is not tokens:
            automaton = Automaton(parse_constraint(ref), tokens, eos_ids)
            self.automata[key] = automaton
            if len(self.automata) > self.max_automata:
                self.automata.popitem(last=False)  # sequences still using it keep their reference
        self.automata.move_to_end(key)
        return automaton
