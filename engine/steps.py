"""Token-level training primitives, Tinker's: forward(_backward) with a named loss, an AdamW step, full state.

Owns: the logprobs of explicit target tokens (position t of the input scores
target t), the named per-token losses as Tinker defines them (every loss is
a SUM over tokens, never a mean: `cross_entropy`, `importance_sampling`,
`ppo`, `cispo`, `dro`, `gspo` in its token-level form, and `stable_reinforce`
as docs/tinker.md defines it), gradient
accumulation into the adapter across calls (summed, until the optimizer
step), the optimizer step (train.py's one AdamW step; the step count is
the adapter's version), and the full
training state on disk (PEFT adapter + optimizer moments + step), written
atomically and read back bit-exactly.

Refuses to know: the wire (wire.py parses it), threads and residency
(server.py), trajectories and packing (train.py's job-level train_step).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from . import lora as L
from . import parts, shard
from . import weights as W
from .group import SOLO, Group
from .model import ForwardContext, Transformer
from .peft import load_peft
from .train import LOGITS_CHUNK_ELEMENTS, AdamW, LossConfig, TrainingDiverged, _head_stats, adamw_step, rl_token_loss

# The losses and the loss_config keys each uses are protocol.json's `StepLossConfigs`; token_loss computes each one.
# Losses that read the sampler's logprobs and advantages beside target_tokens and weights.
RL_LOSSES = ("importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce")


@dataclass
class StepRow:
    """One datum: tokens_T[t] is the model input whose next-token distribution scores target_tokens_T[t]."""

    tokens_T: torch.Tensor  # int64
    target_tokens_T: torch.Tensor  # int64
    weights_T: torch.Tensor  # float32
    sampler_logprobs_T: torch.Tensor | None  # float32; required by the RL losses
    advantages_T: torch.Tensor | None  # float32; required by the RL losses
    sequence_ratio_mask_T: torch.Tensor | None = None  # float32; required by gspo: the tokens of its ratio


STATE_NAME = "training_state.json"
STATE_FORMAT = "engine.training_state.v1"


class _Thresholds(LossConfig):
    """rl_token_loss's config with Tinker's absolute clip thresholds instead of rl-loss.md's epsilons."""

    def __init__(self, ppo: bool, low: float, high: float):
        # Every knob named (none has a default once the engine keeps none); all off but the clip.
        super().__init__(
            ppo=ppo,
            epsilon=1.0 - low,
            epsilon_high=high - 1.0,
            importance_sampling_level="token",
            max_negative_advantage_importance_sampling_weight=None,
            mask_prob_ratio=False,
            k2_tau=None,
            truncated_importance_sampling=None,
            kl_penalty_coef=0.0,
            kl_penalty_source="current_learner",
        )
        self.low, self.high = low, high  # exact: 1 - (1 - low) need not give low back

    def bounds(self) -> tuple:
        return self.low, self.high


def target_logprobs(
    model: Transformer, tokens_T: torch.Tensor, targets_T: torch.Tensor, lora, seg_T: torch.Tensor | None = None
) -> torch.Tensor:
    """logprobs_T[t] = log p(targets_T[t] | tokens_T[:t+1] of its segment); chunked so no T x V logits stay alive."""
    device = model.device
    tokens_T, targets_T = tokens_T.to(device), targets_T.to(device)
    T = tokens_T.shape[0]
    seg_1T = torch.zeros(1, T, dtype=torch.long, device=device) if seg_T is None else seg_T.to(device)[None]
    h_TD = model(tokens_T[None], ForwardContext.packed(seg_1T, model.args.sliding_window), lora)[0]
    chunk = max(1, LOGITS_CHUNK_ELEMENTS // model.args.vocab_size)
    parts = []
    for s in range(0, T, chunk):
        h_CD, t_C = h_TD[s : s + chunk], targets_T[s : s + chunk]
        if torch.is_grad_enabled() and chunk < T:
            lp_C, _ = checkpoint(_head_stats, model, h_CD, t_C, use_reentrant=False)
        else:
            lp_C, _ = _head_stats(model, h_CD, t_C)
        parts.append(lp_C)
    return torch.cat(parts)


def token_loss(loss: str, cfg: dict[str, float], logprobs_T: torch.Tensor, row: StepRow) -> torch.Tensor:
    """The elementwise loss of Tinker's docs, times the row's weights (all 1 for the RL losses in Tinker's usage)."""
    device = logprobs_T.device
    w_T = row.weights_T.to(device)
    if loss == "cross_entropy":
        return -logprobs_T * w_T
    old_T, adv_T = row.sampler_logprobs_T.to(device), row.advantages_T.to(device)
    if loss == "importance_sampling":
        return -torch.exp(logprobs_T - old_T) * adv_T * w_T
    if loss == "dro":
        return -(logprobs_T * adv_T - 0.5 * cfg["beta"] * (logprobs_T - old_T) ** 2) * w_T
    if loss == "gspo":
        return _gspo_token_loss(logprobs_T, old_T, adv_T, row.sequence_ratio_mask_T.to(device) != 0, cfg) * w_T
    if loss == "stable_reinforce":
        return _stable_reinforce_token_loss(logprobs_T, old_T, adv_T, cfg["kl_coeff"]) * w_T
    # ppo: -min(r·A, clip(r)·A); cispo: -sg(clip(r))·logp·A: rl_token_loss's two token-level branches.
    clip = _Thresholds(loss == "ppo", cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    ones_T = torch.ones_like(logprobs_T)
    loss_T, _ = rl_token_loss(
        logprobs_T, old_T, None, adv_T, ones_T, torch.zeros_like(row.tokens_T, device=device), clip, None
    )
    return loss_T * w_T


def _gspo_token_loss(logprobs_T, old_T, adv_T, in_ratio_T, cfg: dict[str, float]) -> torch.Tensor:
    """-min(s_t·A, clip(s_t)·A): s_t has the value of the sequence ratio (the geometric mean of the marked
    tokens' ratios) and the gradient of the token's own probability ratio."""
    log_s = (logprobs_T.detach() - old_T)[in_ratio_T].mean()
    ratio_T = torch.exp(log_s + logprobs_T - logprobs_T.detach())
    clipped_T = ratio_T.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    return -torch.min(ratio_T * adv_T, clipped_T * adv_T)


def _stable_reinforce_token_loss(logprobs_T, old_T, adv_T, kl_coeff: float) -> torch.Tensor:
    """-min(r, 1)·A·logp + kl_coeff·(exp(old - logp) - (old - logp) - 1), r = exp(logp - old) without its gradient.

    `old` is the sampler's logprob as recorded when the token was sampled: a token the learner now finds less likely
    than the sampler did counts for r < 1, one it finds likelier never for more than 1 (off-policy tokens are not
    amplified); the second term, the k3 estimate of KL(learner || sampler), pulls towards the sampling policy.
    """
    weight_T = torch.exp(logprobs_T.detach() - old_T).clamp(max=1.0)
    delta_T = old_T - logprobs_T
    return -weight_T * adv_T * logprobs_T + kl_coeff * (torch.exp(delta_T) - delta_T - 1.0)


def forward_backward(
    model: Transformer,
    adapter: L.Adapter | None,
    loss: str,
    loss_config: dict[str, float],
    rows: list[StepRow],
    backward: bool,
    group: Group = SOLO,
) -> dict:
    """Per row: logprobs and elementwise loss; with `backward`, the summed loss's gradient is ADDED to the adapter's.

    A row whose loss is not finite fails the call (TrainingDiverged) with the accumulated gradient as it was before it.
    With several ranks each computes a contiguous share of the rows; outputs, sums and gradients are summed over them.
    """
    t0 = time.perf_counter()
    grads_before = [None if p.grad is None else p.grad.clone() for p in adapter.trainable()] if backward else []
    mine: list = []
    with torch.set_grad_enabled(backward), shard.computing(group, adapter):
        lora = L.LoraBatch([adapter], model.dtype, model.device) if adapter is not None else None
        for batch in parts.plan(rows, group, parts.whole):
            outputs, failed, total_B = _batch_forward(model, lora, loss, loss_config, batch)
            # Every rank learns of a non-finite row before any backward of this batch, so all stop alike.
            if group.sum_floats([float(failed is not None)])[0] > 0:
                failed = [f for f in group.gather(failed) if f is not None]
                if backward:
                    for p, g in zip(adapter.trainable(), grads_before):
                        p.grad = g
                raise TrainingDiverged(
                    f"training diverged: the loss of rows[{min(failed)}] is not finite; "
                    "the accumulated gradient is as it was before this call"
                )
            if backward:
                total_B.sum().backward()  # one batch's graph at a time; .grad sums across batches and calls
            mine += outputs
        if backward:
            shard.reduce_gradients(adapter, group)
    shard.after_forward(model)
    every = sorted((out for outs in group.gather(mine) for out in outs), key=lambda out: out[0])
    total = sum(out[1] for out in every)
    tokens = sum(int(r.tokens_T.shape[0]) for r in rows)
    return {
        "outputs": [out[2] for out in every],
        "loss": total,
        "metrics": {"loss:sum": total, "num_tokens": float(tokens), "step_seconds": time.perf_counter() - t0},
    }


def _batch_forward(model, lora, loss: str, loss_config, batch: list) -> tuple:
    """A batch's rows as one packed forward: ([(row index, its loss, its output)], the first row whose loss is not
    finite or None, each row's summed loss as a tensor to differentiate); an empty batch gives a zero to differentiate."""
    tokens_T, seg_T, spans = parts.packed(batch, model.device)
    targets_T = torch.cat([p.data.target_tokens_T for p in batch]) if batch else tokens_T
    logprobs_T = target_logprobs(model, tokens_T, targets_T, lora, seg_T)
    if not batch:
        return [], None, logprobs_T.sum()[None] * 0.0
    outputs, sums = [], []
    for part, (a, b) in zip(batch, spans):
        loss_T = token_loss(loss, loss_config, logprobs_T[a:b], part.data)
        if not bool(torch.isfinite(loss_T).all()):
            return [], part.row, None
        sums.append(loss_T.sum())
        output = {
            "logprobs": logprobs_T[a:b].detach().float().cpu().tolist(),
            "elementwise_loss": loss_T.detach().float().cpu().tolist(),
        }
        outputs.append((part.row, float(sums[-1].detach()), output))
    return outputs, None, torch.stack(sums)


def optim_step(adapter: L.Adapter, p: AdamW, group: Group = SOLO) -> dict:
    """The AdamW step of train.py on what forward_backward accumulated (counted even without a gradient, as Tinker does)."""
    grad_norm = adamw_step(adapter, p, None, group)
    return {"metrics": {"grad_norm": grad_norm, "learning_rate": p.learning_rate}, "step": adapter.version}


def save_state(adapter: L.Adapter, folder: str, base_name: str, group: Group = SOLO) -> list[str]:
    """The adapter, its optimizer state and step in `folder`, replaced as a whole (never half written); with several
    ranks the shards are gathered and rank 0 writes."""
    adapter = shard.whole_copy(adapter, group)
    if not group.leader:
        return []
    folder = os.path.abspath(folder)
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(folder)}.tmp-{uuid.uuid4().hex}")
    try:
        files = L.save_peft(adapter, tmp, base_name)
        W.atomic_write_json(os.path.join(tmp, STATE_NAME), {"format": STATE_FORMAT, "step": adapter.version})
        old = None
        if os.path.exists(folder):
            old = f"{tmp}.old"
            os.replace(folder, old)
        os.replace(tmp, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return files + [STATE_NAME]


def load_state(
    key: str, base: str, folder: str, args, device, check_values: bool = True, group: Group = SOLO
) -> L.Adapter:
    """An adapter equal to the saved one: weights, optimizer moments and step (0 for a weights-only checkpoint); with
    several ranks, each keeps its shards."""
    adapter = load_peft(key, base, folder, args, device, check_values)
    state_path = os.path.join(folder, STATE_NAME)
    if os.path.exists(state_path):
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
        step = state.get("step") if isinstance(state, dict) and state.get("format") == STATE_FORMAT else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"{state_path}: not a training state this engine wrote")
        adapter.version = step
    return shard.shard_adapter(adapter, group)
