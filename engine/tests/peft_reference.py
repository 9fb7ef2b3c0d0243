"""The reference side of test_families: run by REFERENCE_PYTHON (transformers + PEFT, never the engine's code).

Reads {base, adapter, tokens, weights} as JSON on stdin; loads the base with AutoModelForCausalLM and the adapter with
PeftModel.from_pretrained (which turns per-expert MoE adapters into transformers 5's fused expert parameters), computes
loss = -sum_t weights[t] * log p(tokens[t+1] | tokens[:t+1]), backpropagates, and prints {logprobs, grads}: the
gradient of every LoRA tensor under the per-expert PEFT file names (the fused expert gradients cut back into experts:
only the block-diagonal parts, which are the per-expert adapters' own).
"""

import json
import re
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

FUSED = re.compile(r"^(base_model\.model\..+\.experts)\.(base_layer\.)?lora_([AB])\.default\.weight$")


def per_expert(name: str, g: torch.Tensor, experts: int, rank: int) -> dict:
    """PEFT's fused expert gradient (gate_up as base_layer: rank 2r; down: rank r) as per-expert tensors."""
    prefix, gate_up, ab = FUSED.match(name).groups()
    out = {}
    r = 2 * rank if gate_up else rank
    for e in range(experts):
        # A: [experts * r, in], expert e's rows; B: [out, r * experts], column j * experts + e is expert e's rank j
        block = g[e * r : (e + 1) * r] if ab == "A" else g[:, [j * experts + e for j in range(r)]]
        if gate_up:
            inter = block.shape[0] // 2 if ab == "B" else None
            parts = (
                {"gate_proj": block[:rank], "up_proj": block[rank:]}
                if ab == "A"
                else {"gate_proj": block[:inter, :rank], "up_proj": block[inter:, rank:]}
            )
        else:
            parts = {"down_proj": block}
        for proj, t in parts.items():
            out[f"{prefix}.{e}.{proj}.lora_{ab}.weight"] = t
    return out


def main() -> None:
    req = json.load(sys.stdin)
    base = AutoModelForCausalLM.from_pretrained(req["base"], dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(base, req["adapter"], is_trainable=True).eval()
    tokens = torch.tensor([req["tokens"]])
    logits = model(input_ids=tokens).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, tokens[0, 1:, None])[:, 0]
    loss = -(lp * torch.tensor(req["weights"])).sum()
    loss.backward()
    experts = getattr(base.config, "num_experts", 0) or 0
    grads = {}
    for name, p in model.named_parameters():
        if "lora_" not in name or p.grad is None:
            continue
        if FUSED.match(name):
            grads.update(per_expert(name, p.grad, experts, req["rank"]))
        else:
            grads[name.replace(".default.weight", ".weight")] = p.grad
    print(json.dumps({"logprobs": lp.tolist(), "grads": {k: v.tolist() for k, v in grads.items()}}))


if __name__ == "__main__":
    main()
