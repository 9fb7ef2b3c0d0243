"""Random-weight model folders of the families `transformers` runs for us, in each family's real config.json shape
(test/fixtures/family-configs.json, sizes shrunk) and its hub checkpoint layout (experts per expert): what the engine
tests compare against `transformers` and PEFT, and what test/helpers/families.ts serves through the API.

`python -m engine.tests.families FAMILY FOLDER [SEED] [VOCAB]` writes one (config.json and model.safetensors only).
"""

from __future__ import annotations

import json
import os
import sys

import torch

from .helpers import REPO, tiny_config

with open(os.path.join(REPO, "test", "fixtures", "family-configs.json"), encoding="utf-8") as _f:
    CONFIGS = {k: v for k, v in json.load(_f).items() if not k.startswith("_")}
NEW_FAMILIES = ("qwen3_moe", "gemma3_text", "phi3")
OURS = ("llama", "mistral", "qwen2", "qwen3")


def family_config(family: str, vocab: int | None = None) -> dict:
    """The family's config.json: a real one shrunk (new families, mistral), or the engine tests' tiny one."""
    if family in CONFIGS:
        cfg = dict(CONFIGS[family])
    else:
        cfg = tiny_config(
            family,
            architectures=[{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(family, "Qwen3ForCausalLM")],
        )
    if vocab is not None:
        cfg["vocab_size"] = vocab
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            ids = cfg.get(key)
            if isinstance(ids, list):
                cfg[key] = [i % vocab for i in ids]
            elif isinstance(ids, int):
                cfg[key] = ids % vocab
    return cfg


def write_family(family: str, folder: str, seed: int = 0, vocab: int | None = None) -> str:
    """A loadable folder: config.json as the family writes it, weights random (norms away from 1, so a wrong
    mapping shows), saved by transformers in the hub layout."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    cfg = family_config(family, vocab)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(0.1 * noise if "norm" in name else 0.05 * noise)
    model.save_pretrained(folder + ".tmp", safe_serialization=True)
    os.replace(os.path.join(folder + ".tmp", "model.safetensors"), os.path.join(folder, "model.safetensors"))
    for leftover in os.listdir(folder + ".tmp"):
        os.remove(os.path.join(folder + ".tmp", leftover))
    os.rmdir(folder + ".tmp")
    return folder


if __name__ == "__main__":
    write_family(
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]) if len(sys.argv) > 3 else 0,
        int(sys.argv[4]) if len(sys.argv) > 4 else None,
    )
