"""PEFT's reading of one of our checkpoints, as expected values for test/peft.test.ts.

Hugging Face transformers loads the base model from the GGUF itself (`gguf_file=`) or an HF folder, and
`peft.PeftModel.from_pretrained` loads our checkpoint folder (adapter_config.json +
adapter_model.safetensors) onto it: nothing here shares code with our engine. The
config's base_model_name_or_path may be a path on the server's machine, so the base is
given explicitly rather than resolved from it. Run with $REFERENCE_PYTHON:

    stdin  {"gguf": path | "base": HF model folder, "adapter": folder, "rows": [[token id]]}
    stdout {"logprobs": [[logprob of token t after tokens < t; null at t = 0]] with the adapter,
            "base_logprobs": the same without it,
            "lora_b_max_abs": largest |B| entry (0 for an untrained adapter),
            "config": the adapter_config.json PEFT read}   (fp32 throughout)
"""

import json
import os
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def row_logprobs(model, row):
    logprobs = torch.log_softmax(model(torch.tensor([row])).logits[0].float(), dim=-1)
    chosen = logprobs[:-1].gather(1, torch.tensor(row[1:])[:, None])[:, 0]
    return [None] + chosen.tolist()


def main() -> None:
    request = json.load(sys.stdin)
    if "base" in request:
        base = AutoModelForCausalLM.from_pretrained(request["base"], dtype=torch.float32).eval()
    else:
        folder, name = os.path.split(os.path.abspath(request["gguf"]))
        base = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    rows = request["rows"]
    with torch.no_grad():
        base_logprobs = [row_logprobs(base, row) for row in rows]
        model = PeftModel.from_pretrained(base, request["adapter"]).eval()
        logprobs = [row_logprobs(model, row) for row in rows]
    weights = load_file(os.path.join(request["adapter"], "adapter_model.safetensors"))
    lora_b = max(t.abs().max().item() for key, t in weights.items() if ".lora_B." in key)
    json.dump(
        {
            "logprobs": logprobs,
            "base_logprobs": base_logprobs,
            "lora_b_max_abs": lora_b,
            "config": model.peft_config["default"].to_dict(),
        },
        sys.stdout,
        default=lambda value: sorted(value) if isinstance(value, (set, frozenset)) else str(value),
    )


if __name__ == "__main__":
    main()
