"""Continuous-batching generation over one base model and its preallocated KV cache.

Owns: GenRequest / Sequence state, the waiting queue, the running batch (the
sequence in running[i] always lives in cache slot i, so a decode step attends
to a view of the first B slots: no gathers), admission with a chunked prefill
shared by the `n` samples of a request (its KV is copied to their slots),
one decode step over every running row (rows may use different adapters, or
none, via LoraBatch), stop rules, cancellation, and the replies a request
streams (as dicts handed to the request's `emit`). Rows stay isolated: a
request whose logits are not finite fails alone before any of its tokens is
sampled, and a departing sequence's cache positions are zeroed before another
sequence's attention can span them.

Refuses to know: frames, threads and request ids on the wire (server.py),
how logits become tokens (sampling.py), adapter storage (lora.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .constraints import MASK_GRACE_S, Compiled, Guide, ready_rows, step_masks
from .lora import Adapter, LoraBatch, NonFinite, StackCache
from .model import ForwardContext, KVCache, Transformer
from .sampling import SamplingParams, SeqSampler, prompt_logprob_entries, prompt_mask, sample_step, static_bias


class Cancelled(Exception):
    pass


@dataclass
class GenRequest:
    id: str
    prompt: list[int]
    params: SamplingParams
    emit: Callable[[dict], None]  # non-final replies (done: false)
    finish: Callable[[dict], None]  # the final reply (done: true), or an error
    adapter: Adapter | None = None
    cancelled: bool = False  # set from another thread; read between steps
    live: int = 0  # sequences not yet finished
    on_release: Callable[[GenRequest], None] | None = None
    constraint: Compiled | None = None  # every sequence decodes only what its grammar allows
    cached: int = 0  # prompt tokens whose KV came from the prefix cache


@dataclass
class Sequence:
    req: GenRequest
    index: int
    sampler: SeqSampler
    length: int  # tokens whose keys are in the cache
    last: int  # the latest sampled token, fed at the next decode step
    slot: int = -1
    generated: int = 0
    guide: Guide | None = None


@dataclass
class SchedulerConfig:
    max_batch: int = 32  # running sequences (cache slots)
    max_len: int = 4096  # tokens per sequence, prompt included
    prefill_chunk: int = 512  # bounds attention memory of long prompts
    prefill_budget: int = 2048  # prompt tokens admitted between two decode steps
    prefix_cache_tokens: int = 0  # KV positions kept of recent prompts for reuse (0: no prefix cache)


class PrefixCache:
    """The KV of recent prompts, so a request sharing a prompt prefix prefills only the rest.

    Keyed by adapter (uid, version: KV depends on the adapter, and a trained adapter's version moves),
    least recently used first, bounded in KV positions. Prompts shorter than `min_tokens` are not kept.
    """

    def __init__(self, max_tokens: int, min_tokens: int = 32):
        self.max_tokens, self.min_tokens, self.tokens = max_tokens, min_tokens, 0
        self._items: OrderedDict[tuple, tuple[list[int], tuple]] = OrderedDict()  # (prompt, KVCache.read_prefix)

    @staticmethod
    def _owner(adapter: Adapter | None) -> tuple:
        return (adapter.uid, adapter.version) if adapter is not None else (None, None)

    def lookup(self, adapter: Adapter | None, prompt: list[int]):
        """(kv, L): the longest kept prefix of `prompt` (at most all but its last token), or None."""
        owner, best, best_len = self._owner(adapter), None, 0
        for key, (tokens, _) in self._items.items():
            if key[0] != owner:
                continue
            n = _common_prefix(tokens, prompt, len(prompt) - 1)
            if n > best_len:
                best, best_len = key, n
        if best is None or best_len < self.min_tokens:
            return None
        self._items.move_to_end(best)
        return self._items[best][1], best_len

    def store(self, adapter: Adapter | None, prompt: list[int], read: Callable[[], tuple]) -> None:
        """Keeps the prompt's KV (`read()` copies it out of the cache) unless the prompt is too short or too long."""
        if len(prompt) < self.min_tokens or len(prompt) > self.max_tokens:
            return
        key = (self._owner(adapter), tuple(prompt))
        if key in self._items:
            self._items.move_to_end(key)
            return
        self._items[key] = (list(prompt), read())
        self.tokens += len(prompt)
        while self.tokens > self.max_tokens:
            self.tokens -= len(self._items.popitem(last=False)[1][0])


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Scheduler:
    def __init__(self, model: Transformer, eos_ids: list[int], config: SchedulerConfig):
        self.model, self.config = model, config
        self.eos_ids = list(eos_ids)
        self.eos_set = set(eos_ids)
        self.window = model.args.sliding_window
        self.cache = KVCache(
            model.args,
            model.dtype,
            model.device,
            slots=min(4, config.max_batch),
            length=min(256, config.max_len),
            max_slots=config.max_batch,
            max_length=config.max_len,
        )
        self.waiting: deque[GenRequest] = deque()
        self.running: list[Sequence] = []
        self.stacks = StackCache()
        self.prefix = PrefixCache(config.prefix_cache_tokens) if config.prefix_cache_tokens > 0 else None
        self._rate: deque = deque()  # (time, tokens) of recent steps

    # --- queue --------------------------------------------------------------

    def submit(self, req: GenRequest) -> None:
        if not req.prompt:
            raise ValueError("prompt is empty")
        if len(req.prompt) >= self.config.max_len:
            raise ValueError(
                f"prompt of {len(req.prompt)} tokens leaves no room in the context of {self.config.max_len}"
            )
        if req.params.n > self.config.max_batch:
            raise ValueError(f"n={req.params.n} exceeds the batch size {self.config.max_batch}")
        vocab = self.model.args.vocab_size
        if any(not (0 <= t < vocab) for t in req.prompt):
            raise ValueError(f"prompt has a token id outside the vocabulary (size {vocab})")
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def counts(self) -> tuple:
        """(running sequences, waiting sequences)."""
        return len(self.running), sum(r.params.n for r in list(self.waiting))

    def memory(self) -> dict:
        """Bytes held by the KV cache (every slot, as allocated) and by the prefix cache's copies."""
        kv = self.cache.k.numel() * self.cache.k.element_size() * 2
        per_position = kv // max(1, self.cache.slots * self.cache.length)
        return {"kv_cache_bytes": kv, "prefix_cache_bytes": (self.prefix.tokens if self.prefix else 0) * per_position}

    def tokens_per_second(self) -> float:
        """Tokens generated over the last 10 s (called from the reader thread: reads a snapshot)."""
        now = time.monotonic()
        recent = [(t, n) for t, n in list(self._rate) if now - t <= 10.0]
        if not recent:
            return 0.0
        return sum(n for _, n in recent) / max(now - recent[0][0], 1e-3)

    # --- one iteration ------------------------------------------------------

    @torch.no_grad()
    def step(self) -> None:
        """Drop cancelled work, admit waiting requests, then decode one token for every running row."""
        self._reap_cancelled()
        budget = self.config.prefill_budget
        while self.waiting and budget > 0:
            req = self.waiting[0]
            if len(self.running) + req.params.n > self.config.max_batch:
                break
            self.waiting.popleft()
            group = [req] + self._twins(req)
            budget -= len(req.prompt)
            try:
                budget += self._admit(group)  # a reused prefix and the twins' prompts cost nothing
            except Exception as e:  # a bad request must not take the batch down
                for r in group:
                    self._drop_request(r)
                    r.finish({"error": e})
        if self.running:
            self._decode()

    def fail_all(self, error: Exception) -> None:
        reqs = {id(s.req): s.req for s in self.running}
        self.running.clear()
        self.cache.clear_all()
        for req in list(self.waiting) + list(reqs.values()):
            self._drop_request(req)
            req.finish({"error": error})
        self.waiting.clear()

    def _reap_cancelled(self) -> None:
        for req in [r for r in self.waiting if r.cancelled]:
            self.waiting.remove(req)
            self._drop_request(req)
            req.finish({"error": Cancelled("cancelled")})
        gone = {}
        for seq in [s for s in self.running if s.req.cancelled]:
            self._remove(seq)
            gone[id(seq.req)] = seq.req
        for req in gone.values():
            self._drop_request(req)
            req.finish({"error": Cancelled("cancelled")})

    def _drop_request(self, req: GenRequest) -> None:
        if req.on_release is not None:
            req.on_release(req)
            req.on_release = None

    # --- prefill ------------------------------------------------------------

    def _twins(self, req: GenRequest) -> list[GenRequest]:
        """Waiting requests with req's exact prompt and adapter, taken out of the queue to share its prefill.

        A group of identical rollouts arrives together and waits together; prefilling each alone repeats the
        same forward (the full weights read once per request) for the same logits. Requests that want prompt
        logprobs keep their own prefill; twins are taken only while their samples fit the batch.
        """
        if req.params.prompt_logprobs is not None:
            return []
        room = self.config.max_batch - len(self.running) - req.params.n
        twins = []
        for other in list(self.waiting):
            if (
                other.adapter is req.adapter
                and other.params.prompt_logprobs is None
                and other.params.n <= room
                and not other.cancelled
                and other.prompt == req.prompt
            ):
                self.waiting.remove(other)
                twins.append(other)
                room -= other.params.n
        return twins

    def _admit(self, group: list[GenRequest]) -> int:
        """Prefills the first request's prompt (after any cached prefix) once for the whole group of identical
        prompts, samples every sequence's first token from it, and gives cache slots only to the sequences that
        go on (the prefill's slot to the first, copies to the rest). Answers the prompt tokens reused."""
        req = group[0]
        params, prompt = req.params, req.prompt
        model = self.model
        slot = len(self.running)
        self.cache.ensure(slot + 1, len(prompt) + 1)  # the other slots once it is known who needs one
        lora = LoraBatch([req.adapter], model.dtype, model.device, self.stacks) if req.adapter else None
        tokens = torch.tensor(prompt, device=model.device)
        want_prompt_lp = params.prompt_logprobs is not None
        reused = self.prefix.lookup(req.adapter, prompt) if self.prefix is not None and not want_prompt_lp else None
        begin = 0
        if reused is not None:
            kv, begin = reused
            self.cache.write_prefix(slot, kv, begin)
        req.cached = begin
        entries: list[dict | None] = [None]
        last_logits, finite = None, True
        chunk = self.config.prefill_chunk
        for start in range(begin, len(prompt), chunk):
            piece = tokens[start : start + chunk]
            ctx = ForwardContext.cached(self.cache, slot, [start], piece.shape[0], self.window)
            h = model(piece[None, :], ctx, lora)[0]
            if want_prompt_lp:
                logits = model.logits(h)
                finite = finite and bool(torch.isfinite(logits).all())
                entries += prompt_logprob_entries(
                    logits, prompt[start + 1 : start + 1 + piece.shape[0]], params.prompt_logprobs
                )
                last_logits = logits[-1:]
            elif start + chunk >= len(prompt):
                last_logits = model.logits(h[-1:])
        if not (finite and bool(torch.isfinite(last_logits).all())):
            self.cache.clear(slot, 0, len(prompt))
            raise _non_finite(req)
        if want_prompt_lp:
            req.emit({"type": "prompt", "prompt_logprobs": entries[: len(prompt)]})
        if self.prefix is not None:
            self.prefix.store(req.adapter, prompt, lambda: self.cache.read_prefix(slot, len(prompt)))
        for twin in group[1:]:
            twin.cached = len(prompt) - 1  # as a prefix-cache hit reports an identical prompt
        self._start(group, last_logits, slot)
        return begin + sum(len(r.prompt) for r in group[1:])

    def _start(self, group: list[GenRequest], last_logits, slot: int) -> None:
        """The group's sequences sample their first token; those that go on take slots from `slot`, whose KV
        (the prefill's) is copied to the others. A sequence done after one token never costs a copy."""
        vocab, device, length = self.model.args.vocab_size, self.model.device, len(group[0].prompt)
        seqs = []
        for req in group:
            params = req.params
            bias = static_bias(params, vocab, device)
            pmask = prompt_mask(params, req.prompt, vocab, device)
            seqs += [
                Sequence(
                    req=req,
                    index=i,
                    sampler=SeqSampler(params, req.prompt, i, vocab, bias, pmask, device),
                    length=length,
                    last=-1,
                    guide=Guide(req.constraint) if req.constraint else None,
                )
                for i in range(params.n)
            ]
            req.live = params.n
        masks = step_masks([s.guide for s in seqs], device)  # the grammar's start: computed when it compiled
        result = sample_step(last_logits.expand(len(seqs), vocab), [s.sampler for s in seqs], self.eos_ids, masks)
        finished = {id(s) for s in self._record(seqs, result)}
        going_on = [s for s in seqs if id(s) not in finished]
        self.cache.ensure(slot + len(going_on), length + 1)
        for k, seq in enumerate(going_on):
            if k > 0:
                self.cache.copy_slot(slot, slot + k, length)
            seq.slot = slot + k
            self.running.append(seq)

    # --- decode -------------------------------------------------------------

    def _decode(self) -> None:
        model = self.model
        seqs = list(self.running)
        B = len(seqs)
        starts = [s.length for s in seqs]
        self.cache.ensure(B, max(starts) + 1)
        tokens_B1 = torch.tensor([[s.last] for s in seqs], device=model.device)
        ctx = ForwardContext.cached(self.cache, 0, starts, 1, self.window)
        adapters = [s.req.adapter for s in seqs]
        lora = (
            LoraBatch(adapters, model.dtype, model.device, self.stacks)
            if any(a is not None for a in adapters)
            else None
        )
        started = time.monotonic()
        logits_BV = model.logits(model(tokens_B1, ctx, lora)[:, 0])
        # A row whose mask is still being computed sits this step out: its next forward rewrites the same position.
        ready = ready_rows([s.guide for s in seqs], max(MASK_GRACE_S, time.monotonic() - started))
        broken = self._broken_requests(seqs, logits_BV, ready)
        keep = [b for b in range(B) if ready[b] and id(seqs[b].req) not in broken]
        if len(keep) < B:
            seqs, logits_BV = (
                [seqs[b] for b in keep],
                logits_BV[torch.tensor(keep, dtype=torch.long, device=logits_BV.device)],
            )
        if seqs:
            masks = step_masks([s.guide for s in seqs], model.device)
            result = sample_step(logits_BV, [s.sampler for s in seqs], self.eos_ids, masks)
            for s in seqs:
                s.length += 1
            self._record(seqs, result)
        for req, error in broken.values():  # a request whose grammar broke or whose logits are not finite ends
            self._fail_request(req, error)  # with its error, all its rows, before any of them emits a token

    def _broken_requests(self, seqs: list[Sequence], logits_BV: torch.Tensor, ready: list[bool]) -> dict:
        """The requests that must end now, by id: any row of non-finite logits (nothing of it may be sampled) or a
        ready row whose grammar failed."""
        broken = {
            id(s.req): (s.req, s.guide.error())
            for b, s in enumerate(seqs)
            if ready[b] and s.guide is not None and s.guide.error()
        }
        bad_B = ~torch.isfinite(logits_BV).all(dim=-1)
        if bool(bad_B.any()):
            for b in bad_B.nonzero().flatten().tolist():
                broken[id(seqs[b].req)] = (seqs[b].req, _non_finite(seqs[b].req))
        return broken

    def _record(self, seqs: list[Sequence], result) -> list[Sequence]:
        """Emit each row's new token; finish rows that hit a stop rule (answered)."""
        now = time.monotonic()
        self._rate.append((now, len(seqs)))
        while now - self._rate[0][0] > 10.0:
            self._rate.popleft()
        finished = []
        for b, seq in enumerate(seqs):
            tok = result.tokens[b]
            if seq.guide is not None:
                seq.guide.advance(tok)
            seq.sampler.append(tok)
            seq.generated += 1
            seq.last = tok
            p = seq.req.params
            msg = {"type": "tokens", "seq": seq.index, "tokens": [tok]}
            if p.logprobs is not None:
                msg["logprobs"] = [result.logprobs[b]]
                if p.logprobs > 0:
                    msg["top_logprobs"] = [result.top[b]]
            seq.req.emit(msg)
            reason, stop_id = None, None
            if tok in p.stop_token_ids:
                reason, stop_id = "stop", tok
            elif tok in self.eos_set and (not p.ignore_eos or seq.guide is not None):
                reason = "stop"  # a constraint allows EOS only once its text is complete: nothing may follow
            elif (p.max_tokens is not None and seq.generated >= p.max_tokens) or seq.length + 1 >= self.config.max_len:
                reason = "length"
            if reason is not None:
                seq.req.emit({"type": "finish", "seq": seq.index, "finish_reason": reason, "stop_token_id": stop_id})
                finished.append(seq)
        for seq in finished:
            self._finish_seq(seq)
        return finished

    def _finish_seq(self, seq: Sequence) -> None:
        self._remove(seq)
        req = seq.req
        req.live -= 1
        if req.live == 0:
            self._drop_request(req)
            # A cancel that raced with the last token still ends the request as cancelled.
            req.finish(
                {"error": Cancelled("cancelled")}
                if req.cancelled
                else {"prompt_tokens": len(req.prompt), "cached_tokens": req.cached}
            )

    def _fail_request(self, req: GenRequest, error: Exception) -> None:
        """Every running sequence of the request leaves the batch, and the request ends with the error."""
        for seq in [s for s in self.running if s.req is req]:
            self._remove(seq)
        req.live = 0
        self._drop_request(req)
        req.finish({"error": error})

    def _remove(self, seq: Sequence) -> None:
        """Take a sequence out of the batch; the last slot's sequence moves into its slot. What either left
        behind is zeroed, so no later sequence's attention spans another's values."""
        i = seq.slot
        if i < 0 or i >= len(self.running) or self.running[i] is not seq:
            return
        last = self.running.pop()
        # Position `length` counts as used: the last forward wrote it even for a row that sat the step out or failed.
        vacated, used = i, seq.length + 1
        if last is not seq:
            self.running[i] = last
            self.cache.copy_slot(last.slot, i, last.length)
            self.cache.clear(i, last.length, seq.length + 1)
            vacated, used = last.slot, last.length + 1
            last.slot = i
        self.cache.clear(vacated, 0, used)
        seq.slot = -1


def _non_finite(req: GenRequest) -> NonFinite:
    whose = f"adapter {req.adapter.key!r}" if req.adapter is not None else "the base model"
    return NonFinite(
        f"generate: the logits of this request are not finite (NaN or infinity), so the weights of "
        f"{whose} are broken; no token was sampled from them"
    )
