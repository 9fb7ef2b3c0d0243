"""The ops of docs/engine-protocol.md and the engine's state.

Owns: the `HANDLERS` table (op -> its handler; the thread it runs on is protocol.json's) and dispatch through it,
error replies (bad_request, not_found, non_finite, diverged, cancelled, internal, unauthorized), the registry of
loaded bases and resident adapters, and the three threads: the reader answers `cancel` and `stats` itself (promptly,
even during a train step) and queues everything else for the compute thread, which runs ops in arrival order and
steps the generation schedulers between them; train_step, forward and the token-level training ops go on to the
training thread, so decoding never waits for them.

Refuses to know: the wire's fields (wire.py parses every request), the numerics (model.py, lora.py, generate.py,
train.py, steps.py), which implementation runs a base (loading.py), what the serving limits size (limits.py), how
frames travel (transport.py) and the process around it (cli.py: arguments, threads, the ready frame).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from . import hf_model, machine, peft, schema, shard, steps, wire
from . import lora as L
from .constraints import ConstraintStore
from .generate import Cancelled, GenRequest, Scheduler, SchedulerConfig
from .group import SOLO, Group
from .limits import Limits
from .loading import load_model, lora_targets
from .model import Transformer
from .train import TrainingDiverged, forward_logprobs, train_step
from .transport import log

DTYPES = wire.DTYPES


class NotFound(LookupError):
    pass


# Where an op runs (docs/engine-protocol.md, "Ordering"): answered at once by the reading thread; in arrival order
# on the compute thread, between decode steps; or checked there and then run on the training thread beside decoding.
READER, COMPUTE, TRAINING = "reader", "compute", "training"
TRAINED = "_trained"  # the compute thread's own message: a training-thread op finished
STOP = "_stop"  # rank 0's last message to its compute thread: tell the other ranks to stop, after every op before it


class Beside(NamedTuple):
    """What a training-thread op hands over: the adapter to pin meanwhile, the work, and whether it changes weights."""

    adapter: L.Adapter | None
    work: Callable[[], dict]
    trains: bool


@dataclass
class Base:
    name: str
    path: str
    model: Transformer | hf_model.HFModel
    scheduler: Scheduler | None  # None in a trainer, which never samples (and so holds no KV cache)
    max_len: int
    constraint_kinds: list[str]  # what constraints.py can apply on this base (its tokenizer.json, llguidance)


class Ticket:
    """A generate request as the reader thread sees it (for cancel)."""

    def __init__(self):
        self.cancelled = False
        self.req: GenRequest | None = None


class Engine:
    def __init__(
        self,
        device: torch.device,
        max_adapters: int = 32,
        limits: Limits | None = None,
        matmul_gflops: float = 0.0,
        dtype: torch.dtype | None = None,
        check_adapter_values: bool = True,
        group: Group | None = None,
        activation_memory_bytes: int | None = None,
        samples_only: bool = False,
    ):
        # A trainer-only engine has a group (one rank or many; its bases sharded with FSDP when torch has it); an
        # engine that samples has none. A sampler-only one refuses the trainer's ops and loads no Adam moments.
        self.group, self.trains_only = group or SOLO, group is not None
        self.samples_only = samples_only
        self.activation_memory_bytes = activation_memory_bytes  # None: models keep their own recompute threshold
        self.last_op_peak_bytes = 0  # what the last training op held above its start (activations, mostly)
        self.ranks_memory: list[dict] = []  # every rank's memory as of the last op they ran together
        self.device = device
        self.check_adapter_values = check_adapter_values  # off only for tests (--skip-adapter-value-check)
        # fp32 on CPU keeps logits within 1e-4 of fp32 references; bf16 is the CPU's speed option (--dtype).
        self.default_dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
        self.limits, self.matmul_gflops = limits or Limits(), matmul_gflops
        self.bases: dict[str, Base] = {}
        self.adapters = L.AdapterStore(max_adapters)
        self.constraints = ConstraintStore()
        self.lock = threading.Lock()
        self.tickets: dict[str, Ticket] = {}
        self.jobs: queue.Queue = queue.Queue()
        self.deferred: deque = deque()  # ops held back while the training thread works
        self.train_jobs: queue.Queue = queue.Queue()
        self.training: str | None = None  # the id of the train_step or forward on the training thread
        self.send: Callable[[dict], None] = lambda obj: None

    # --- replies -------------------------------------------------------------

    def reply(self, rid, payload: dict, done: bool = True) -> None:
        self.send({"id": rid, "done": done, **payload})

    def error(self, rid, exc: BaseException) -> None:
        code = error_code(exc)
        if code == "internal":
            log("internal error:\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        message = exc.args[0] if isinstance(exc, (KeyError, NotFound)) and exc.args else str(exc)
        message = str(message) or type(exc).__name__
        ends_group = code == "internal" and self.trains_only and self.group.world_size > 1
        if ends_group:
            message = f"the trainer's group of {self.group.world_size} ranks failed and restarts: {message}"
        self.send({"id": rid, "done": True, "error": {"code": code, "message": message}})
        if ends_group:
            # The ranks may now disagree on where they are; the group ends, and its launcher and supervisor restart
            # it whole rather than risk a rank waiting forever for a collective the others left.
            log("an unexpected error in a group of ranks: ending the group so it restarts whole")
            os._exit(70)

    # --- reader thread -------------------------------------------------------

    def handle(self, msg) -> None:
        """Called by the reader for every decoded frame."""
        rid = msg.get("id") if isinstance(msg, dict) else None
        try:
            if not isinstance(msg, dict):
                raise ValueError("a frame must hold one JSON object")
            if not isinstance(rid, str):
                raise ValueError("id must be a string")
            name = msg.get("op")
            handler = HANDLERS.get(name) if isinstance(name, str) else None
            if handler is None:
                raise ValueError(f"unknown op {name!r}")
            if self.samples_only and schema.OPS[name]["role"] == "trainer":
                raise ValueError(f"this engine is a sampler: {name} is the trainer's")
            if THREADS[name] == READER:
                result = handler.run(self, rid, wire.parse(name, msg))
                if result is not None:
                    self.reply(rid, result)
            else:
                if handler.admit is not None:
                    handler.admit(self, rid)
                self.jobs.put((name, rid, msg))
        except Exception as e:
            self.error(rid if isinstance(rid, str) else None, e)

    def admit_generate(self, rid) -> None:
        """On the reader, before queuing: a ticket, so a cancel arriving before the generate runs finds it."""
        self._refuse_sampling()
        with self.lock:
            if rid in self.tickets:
                raise ValueError(f"a generate request with id {rid!r} is still running")
            self.tickets[rid] = Ticket()

    def _refuse_sampling(self) -> None:
        if self.trains_only:
            raise ValueError("this engine is a trainer: it does not sample (its samplers do)")

    def cancel(self, target) -> bool:
        with self.lock:
            ticket = self.tickets.get(target)
            if ticket is None or ticket.cancelled:
                return False
            ticket.cancelled = True
            if ticket.req is not None:
                ticket.req.cancelled = True
            return True

    def check_constraint(self, rid, req: wire.CheckConstraint) -> None:
        """Compiles on the constraint pool (never on this thread or the compute thread); answers when it is done."""
        self._refuse_sampling()
        if req.base not in self.bases:
            raise NotFound(f"base {req.base!r} is not loaded")

        def answer(compiled) -> None:
            error = compiled.exception()
            if error is None:
                self.reply(rid, {"ok": True})
            else:
                self.error(rid, error)

        self.constraints.compile(req.base, req.constraint).add_done_callback(answer)

    def cancel_all(self) -> None:
        with self.lock:
            for ticket in self.tickets.values():
                ticket.cancelled = True
                if ticket.req is not None:
                    ticket.req.cancelled = True

    def schedulers(self) -> list[Scheduler]:
        return [b.scheduler for b in list(self.bases.values()) if b.scheduler is not None]

    def stats(self) -> dict:
        running = waiting = 0
        tps = 0.0
        for scheduler in self.schedulers():
            r, w = scheduler.counts()
            running, waiting, tps = running + r, waiting + w, tps + scheduler.tokens_per_second()
        with self.lock:  # generate requests still in the job queue are waiting too
            queued = sum(1 for t in self.tickets.values() if t.req is None and not t.cancelled)
        report = {
            "device": self.device.type,
            "dtype": str(self.default_dtype).replace("torch.", ""),
            "matmul_gflops": self.matmul_gflops,
            "bases": list(self.bases),
            "adapters": self.adapters.keys(),
            "max_adapters": self.adapters.max_adapters,
            "running": running,
            "waiting": waiting + queued,
            "tokens_per_second": tps,
            "rss_bytes": machine.rss_bytes(),
            "memory": self.memory(),
        }
        if self.trains_only:
            # This rank now; the others as of the last op the group ran (they answer nothing between ops).
            report["ranks"] = [self.rank_memory()] + self.ranks_memory[1:]
        return report

    def memory(self) -> dict:
        """Where this process's memory goes, by kind: its share of the base weights, KV and prefix caches, adapter
        weights, their optimizer moments, and what the last training op held above its start (activations, mostly);
        on CUDA the allocator's view of the device too (allocated now, peak, reserved, and the device's total)."""
        report = {
            "weights_bytes": 0,
            "kv_cache_bytes": 0,
            "prefix_cache_bytes": 0,
            "adapters_bytes": self.adapters.nbytes(),
            "optimizer_bytes": self.adapters.optimizer_nbytes(),
            "activations_peak_bytes": self.last_op_peak_bytes,
        }
        for base in list(self.bases.values()):
            report["weights_bytes"] += shard.local_nbytes(base.model)
            for key, value in (base.scheduler.memory() if base.scheduler else {}).items():
                report[key] += value
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            report.update(
                device_allocated_bytes=torch.cuda.memory_allocated(self.device),
                device_peak_bytes=torch.cuda.max_memory_allocated(self.device),
                device_reserved_bytes=torch.cuda.memory_reserved(self.device),
                device_free_bytes=free,
                device_total_bytes=total,
            )
        return report

    def share_memory(self) -> None:
        """Every rank's memory to rank 0 (all ranks call it together: at start and after each op)."""
        self.ranks_memory = self.group.gather(self.rank_memory())

    def rank_memory(self) -> dict:
        return {"rank": self.group.rank, "rss_bytes": machine.rss_bytes(), "memory": self.memory()}

    # --- compute thread ------------------------------------------------------

    def compute_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            job = self._next_job()
            if job is not None:
                self._run_job(*job)
                continue  # drain the job queue before the next decode step
            for scheduler in self.schedulers():
                if scheduler.has_work():
                    try:
                        scheduler.step()
                    except Exception as e:
                        log(f"generation step failed: {e!r}")
                        scheduler.fail_all(e)

    def _next_job(self):
        """The next op to run: held-back ops first once training is done; None when it is time to decode.

        While a train_step or forward runs on the training thread, every op but `generate` is held back
        (and so is a `generate` queued behind one), so ops still take effect in arrival order.
        """
        if self.deferred and self.training is None:
            return self.deferred.popleft()
        busy = any(scheduler.has_work() for scheduler in self.schedulers())
        while True:
            try:
                job = self.jobs.get_nowait() if busy else self.jobs.get(timeout=0.2)
            except queue.Empty:
                return None
            if job[0] == TRAINED or self.training is None or (job[0] == "generate" and not self.deferred):
                return job
            self.deferred.append(job)
            if not busy:
                return None

    def _run_job(self, name: str, rid, msg) -> None:
        try:
            if name == TRAINED:
                result = self._trained(msg)
            elif name == STOP:
                self.group.broadcast(None)
                msg.set()
                result = None
            else:
                if self.trains_only and name in TOGETHER:
                    self.group.broadcast(msg)  # the other ranks run it too, in this order
                    result = self.together(name, rid, msg)
                else:
                    # A generate waiting for its constraint comes back parsed (generate).
                    result = HANDLERS[name].run(self, rid, wire.parse(name, msg) if isinstance(msg, dict) else msg)
                    if THREADS[name] == TRAINING:  # measured, and its freed pages handed back, in every role
                        result = result._replace(work=self._measured(result.work))
                if THREADS[name] == TRAINING:
                    self._train_beside_decode(rid, result)
                    result = None
            if result is not None:
                self.reply(rid, result)
        except Exception as e:
            with self.lock:  # a generate's ticket (no other op has one)
                self.tickets.pop(rid, None)
            self.error(rid, e)

    # --- ops every rank of a trainer runs -----------------------------------

    def together(self, name: str, rid, msg: dict):
        """Runs an op of TOGETHER as every rank of the trainer does (rank 0 broadcast `msg`): its reply, or a Beside
        whose work ends the op. Ending it frees what the allocator holds and gathers every rank's memory."""
        try:
            result = HANDLERS[name].run(self, rid, wire.parse(name, msg))
        except BaseException:
            self._op_done()
            raise
        if isinstance(result, Beside):
            return result._replace(work=self._measured(result.work))
        self._op_done()
        return result

    def _measured(self, work: Callable[[], dict]) -> Callable[[], dict]:
        """The work, then what it held above its start recorded (stats' activations_peak_bytes) and the op ended."""

        def run() -> dict:
            start = machine.start_peak(self.device)
            try:
                return work()
            finally:
                self.last_op_peak_bytes = machine.peak_since(self.device, start)
                self._op_done()

        return run

    def _op_done(self) -> None:
        machine.trim_free_memory()
        if self.trains_only:
            self.share_memory()

    # --- training thread -----------------------------------------------------

    def _train_beside_decode(self, rid, job: Beside) -> None:
        """Runs the job's work on the training thread; decode steps go on meanwhile (torch releases the GIL in its ops).

        The adapter stays pinned (an LRU insert must not evict it) until `_trained` answers on this thread.
        """
        if job.adapter is not None:
            job.adapter.pins += 1
        self.training = rid
        self.train_jobs.put((rid, job.adapter, job.work, job.trains))

    def train_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                rid, adapter, work, trains = self.train_jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                outcome = work()
            except Exception as e:  # answered as an error reply by the compute thread
                outcome = e
            self.jobs.put((TRAINED, rid, {"adapter": adapter, "outcome": outcome, "trains": trains}))

    def _trained(self, msg) -> dict | None:
        """Back on the compute thread: release the adapter, drop its stale stacks, answer."""
        self.training = None
        adapter, outcome = msg["adapter"], msg["outcome"]
        if adapter is not None:
            adapter.pins -= 1
            if msg["trains"]:
                for scheduler in self.schedulers():
                    scheduler.stacks.forget(adapter)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _base(self, name: str) -> Base:
        base = self.bases.get(name)
        if base is None:
            raise NotFound(f"base {name!r} is not loaded")
        return base

    def _adapter(self, ref: wire.AdapterRef, base: Base) -> L.Adapter | None:
        """The resident adapter `ref` names (loaded from its path first when it is not resident); None for none."""
        if ref.key is None:
            return None
        if ref.key not in self.adapters:
            if ref.path is None:
                raise NotFound(f"adapter {ref.key!r} is not resident")
            self._put(self._load_peft(ref.key, base, ref.path))
        adapter = self.adapters.get(ref.key)
        if adapter.base != base.name:
            raise ValueError(f"adapter {ref.key!r} belongs to base {adapter.base!r}, not {base.name!r}")
        return adapter

    def _load_peft(self, key: str, base: Base, path: str) -> L.Adapter:
        targets, device = base.model.lora_targets(), base.model.device
        adapter = peft.load_peft(
            key, base.name, path, targets, device, self.check_adapter_values, not self.samples_only
        )
        return shard.shard_adapter(adapter, self.group)

    def _put(self, adapter: L.Adapter) -> None:
        for old in self.adapters.put(adapter):
            log(f"evicted adapter {old.key} (least recently used)")
            for scheduler in self.schedulers():
                scheduler.stacks.forget(old)

    # --- the ops (HANDLERS below names each one's; protocol.json its thread) --

    def load_base(self, rid, req: wire.Fields) -> dict:
        dtype = DTYPES[req.dtype] if req.dtype else self.default_dtype
        base = self.bases.get(req.base)
        if base is not None and (os.path.abspath(base.path) != os.path.abspath(req.path) or base.model.dtype != dtype):
            raise ValueError(f"base {req.base!r} is already loaded from {base.path} as {base.model.dtype}")
        if base is None:
            base = self._load(req.base, req.path, dtype)
        a = base.model.args
        return {
            "vocab_size": a.vocab_size,
            "context_length": base.max_len,
            "eos_token_ids": a.eos_token_ids,
            "num_parameters": base.model.num_parameters(),
            "max_num_seqs": base.scheduler.config.max_batch if base.scheduler else self.limits.max_num_seqs,
            "constraint_kinds": base.constraint_kinds,
            "implementation": base.model.implementation,
            "lora_targets": L.target_kinds(base.model.lora_targets()),
        }

    def _load(self, name: str, path: str, dtype: torch.dtype) -> Base:
        if not os.path.isdir(path):
            raise NotFound(f"model folder {path} does not exist")
        t0 = time.perf_counter()
        model = load_model(path, dtype, self.device, self.group)
        args = model.args
        per_token = getattr(model, "activation_bytes_per_token", None)  # an implementation may keep its own threshold
        if self.activation_memory_bytes is not None and per_token is not None:
            model.recompute_tokens = max(1, self.activation_memory_bytes // per_token())
        model.prepare(args.max_position_embeddings)
        max_len, max_batch, prefix_tokens = self.limits.sized(args, dtype)
        if self.trains_only:  # no sampling here: no KV cache, no constraints
            self.bases[name] = Base(name, path, model, None, args.max_position_embeddings, [])
            log(
                f"loaded base {name} for training ({model.num_parameters() / 1e6:.1f}M params, {dtype}, "
                f"{self.group.world_size} rank(s)) in {time.perf_counter() - t0:.1f}s"
            )
            return self.bases[name]
        budget = self.limits.max_num_batched_tokens
        sched = Scheduler(
            model,
            args.eos_token_ids,
            SchedulerConfig(
                max_batch=max_batch,
                max_len=max_len,
                prefill_budget=budget,
                prefill_chunk=min(512, budget),
                prefix_cache_tokens=prefix_tokens,
            ),
        )
        kinds = self.constraints.add_base(name, path, args.vocab_size, args.eos_token_ids)
        base = Base(name=name, path=path, model=model, scheduler=sched, max_len=max_len, constraint_kinds=kinds)
        self.bases[name] = base
        log(
            f"loaded base {name} ({model.num_parameters() / 1e6:.1f}M params, {dtype}, {model.implementation}'s "
            f"implementation) in {time.perf_counter() - t0:.1f}s"
        )
        return base

    def ensure_adapter(self, rid, req: wire.EnsureAdapter) -> dict:
        base = self._base(req.base)
        if req.adapter in self.adapters:
            if self.adapters.get(req.adapter).base != base.name:
                raise ValueError(
                    f"adapter {req.adapter!r} is resident for base {self.adapters.get(req.adapter).base!r}"
                )
            return {"loaded": False}
        if req.path is not None:
            adapter = self._load_peft(req.adapter, base, req.path)
        else:
            adapter = L.new_adapter(req.adapter, base.name, base.model.lora_targets(), req.init, base.model.device)
            adapter = shard.shard_adapter(adapter, self.group)
        self._put(adapter)
        return {"loaded": True}

    def check_adapter(self, rid, req: wire.Fields) -> dict:
        if not os.path.isfile(os.path.join(req.base_path, "config.json")):
            raise NotFound(f"model folder {req.base_path} has no config.json")
        if not os.path.isdir(req.path):
            raise NotFound(f"adapter folder {req.path} does not exist")
        return {"problems": [p.to_json() for p in peft.problems(req.path, self._targets_of(req.base_path))]}

    def _targets_of(self, folder: str) -> list[L.LoraTarget]:
        """The target table of the base in `folder`: a loaded base's own, else what its implementation would list."""
        for base in self.bases.values():
            if os.path.abspath(base.path) == os.path.abspath(folder):
                return base.model.lora_targets()
        return lora_targets(folder)

    def save_adapter(self, rid, req: wire.Fields) -> dict:
        if req.adapter not in self.adapters:
            raise NotFound(f"adapter {req.adapter!r} is not resident")
        adapter = self.adapters.get(req.adapter)
        base = self.bases[adapter.base]
        whole = shard.whole_copy(adapter, self.group)  # every rank gathers; rank 0 writes
        return {"files": L.save_peft(whole, req.path, base.path) if self.group.leader else []}

    def drop_adapter(self, rid, req: wire.Fields) -> dict:
        adapter = self.adapters.get(req.adapter) if req.adapter in self.adapters else None
        if adapter is not None:
            for scheduler in self.schedulers():
                scheduler.stacks.forget(adapter)
        return {"dropped": self.adapters.drop(req.adapter)}

    def generate(self, rid, req: wire.Generate) -> None:
        base = self._base(req.base)
        wire.check_generate(req, base.model.args.vocab_size)
        constraint = None
        if req.constraint is not None:
            compiled = self.constraints.compile(base.name, req.constraint)
            if not compiled.done():  # compiled on the constraint pool; the request comes back here then
                compiled.add_done_callback(lambda _: self.jobs.put(("generate", rid, req)))
                return None
            constraint = compiled.result()  # a ConstraintError is this request's bad_request
        adapter = self._adapter(req.adapter, base)

        def finish(payload: dict) -> None:
            with self.lock:
                self.tickets.pop(rid, None)
            if "error" in payload:
                self.error(rid, payload["error"])
            else:
                self.reply(rid, payload)

        def release(_req_obj) -> None:
            if adapter is not None:
                adapter.pins -= 1

        gen = GenRequest(
            id=rid,
            prompt=req.prompt,
            params=req.params,
            emit=lambda m: self.reply(rid, m, done=False),
            finish=finish,
            adapter=adapter,
            on_release=release,
            constraint=constraint,
        )
        base.scheduler.submit(gen)  # validates; raises before anything is pinned
        if adapter is not None:
            adapter.pins += 1
        with self.lock:
            ticket = self.tickets.get(rid)
            if ticket is not None:
                ticket.req = gen
                gen.cancelled = ticket.cancelled
        return None

    def forward(self, rid, req: wire.Forward) -> Beside:
        base = self._base(req.base)
        wire.check_rows("forward", req.rows, base.model.args.vocab_size, base.model.args.max_position_embeddings)
        adapter = self._adapter(req.adapter, base)
        return Beside(adapter, lambda: {"logprobs": forward_logprobs(base.model, req.rows, adapter, self.group)}, False)

    def train_step(self, rid, req: wire.TrainStep) -> Beside:
        base = self._base(req.base)
        wire.check_rows("train_step", req.rows, base.model.args.vocab_size, base.model.args.max_position_embeddings)
        adapter = self._adapter(req.adapter, base)
        adapter.pins += 1  # loading the reference must not evict the adapter being trained
        try:
            # The KL reference policy: a named adapter (an earlier checkpoint), else the base model.
            reference = self._adapter(req.reference, base)
        finally:
            adapter.pins -= 1
        return Beside(
            adapter,
            lambda: {
                "metrics": train_step(
                    base.model,
                    adapter,
                    req.loss,
                    req.rows,
                    req.loss_config,
                    req.optimizer,
                    reference,
                    req.logprob_chunk_size,
                    self.group,
                )
            },
            True,
        )

    # --- token-level training (Tinker's primitives; numerics in steps.py) ----

    def forward_backward(self, rid, req: wire.ForwardBackward) -> Beside:
        base = self._base(req.base)
        wire.check_step_rows(req.rows, base.model.args.vocab_size, base.model.args.max_position_embeddings)
        adapter = self._adapter(wire.AdapterRef(key=req.adapter, path=None), base) if req.adapter else None
        return Beside(
            adapter,
            lambda: steps.forward_backward(
                base.model, adapter, req.loss, req.loss_config, req.rows, req.backward, self.group
            ),
            False,
        )

    def optim_step(self, rid, req: wire.OptimStep) -> Beside:
        adapter = self._adapter(wire.AdapterRef(key=req.adapter, path=None), self._base(req.base))
        return Beside(adapter, lambda: steps.optim_step(adapter, req.adam, self.group), True)

    def save_state(self, rid, req: wire.Fields) -> Beside:
        if req.adapter not in self.adapters:
            raise NotFound(f"adapter {req.adapter!r} is not resident")
        adapter = self.adapters.get(req.adapter)
        base_path = self.bases[adapter.base].path
        return Beside(adapter, lambda: {"files": steps.save_state(adapter, req.path, base_path, self.group)}, False)

    def load_state(self, rid, req: wire.Fields) -> dict:
        """Replaces a resident adapter of that key: its weights, moments and step become the saved ones."""
        base = self._base(req.base)
        adapter = steps.load_state(
            req.adapter,
            base.name,
            req.path,
            base.model.lora_targets(),
            base.model.device,
            self.check_adapter_values,
            self.group,
        )
        if req.adapter in self.adapters:
            old = self.adapters.get(req.adapter)
            for scheduler in self.schedulers():
                scheduler.stacks.forget(old)
            self.adapters.drop(req.adapter)
        self._put(adapter)
        return {"step": adapter.version}


def error_code(exc: BaseException) -> str:
    """The protocol's error code for an exception an op raised."""
    if isinstance(exc, Cancelled):
        return "cancelled"
    if isinstance(exc, L.NonFinite):
        return "non_finite"
    if isinstance(exc, TrainingDiverged):
        return "diverged"
    if isinstance(exc, (NotFound, FileNotFoundError)):  # e.g. an adapter_path that does not exist
        return "not_found"
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        return "bad_request"
    return "internal"


class Handler(NamedTuple):
    """What the engine does with one op's parsed request (wire.parse): an Engine method taking the request id and
    the request, and what the reader does before queuing it. The thread it runs on is protocol.json's."""

    run: Callable[[Engine, str, Any], Any]
    admit: Callable[[Engine, str], None] | None = None


# The engine's ops: adding one is its entry in engine/protocol.json (fields, role, thread) and its handler here
# (with a parser in wire.py only when its numerics take a dataclass); engine/tests/test_ops.py checks they agree.
HANDLERS: dict[str, Handler] = {
    "stats": Handler(lambda engine, rid, req: engine.stats()),
    "cancel": Handler(lambda engine, rid, req: {"cancelled": engine.cancel(req.target)}),
    "check_constraint": Handler(Engine.check_constraint),
    "load_base": Handler(Engine.load_base),
    "ensure_adapter": Handler(Engine.ensure_adapter),
    "check_adapter": Handler(Engine.check_adapter),
    "save_adapter": Handler(Engine.save_adapter),
    "drop_adapter": Handler(Engine.drop_adapter),
    "load_state": Handler(Engine.load_state),
    "generate": Handler(Engine.generate, Engine.admit_generate),
    "forward": Handler(Engine.forward),
    "train_step": Handler(Engine.train_step),
    "forward_backward": Handler(Engine.forward_backward),
    "optim_step": Handler(Engine.optim_step),
    "save_state": Handler(Engine.save_state),
}
THREADS: dict[str, str] = {name: op["thread"] for name, op in schema.OPS.items()}
# What every rank of a trainer runs, in rank 0's order (the others follow; docs/trainer-group.md): each op a trainer
# serves but the reader's, which change nothing.
TOGETHER = frozenset(
    name for name, op in schema.OPS.items() if op["role"] in ("trainer", "both") and op["thread"] != READER
)
