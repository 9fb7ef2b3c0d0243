"""Hugging Face transformers' reading of a GGUF, as expected values for test/smollm2.test.ts.

transformers loads the GGUF itself (`gguf_file=`: its own dequantization, its own
q/k un-permutation, its own tokenizer built from the metadata), so nothing here
shares code with engine/gguf_convert.py. Run with $REFERENCE_PYTHON:

    stdin  {"gguf": path, "texts": [str], "chats": [[message]], "rows": [[token id]], "top": k}
    stdout {"text_ids": [[id]], "chat_text": [str], "chat_ids": [[id]],
            "logprobs": [[logprob of token t after tokens < t; null at t = 0]],
            "top": [[[[id, logprob]] * k per position]]}   (fp32 throughout)
"""

import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    request = json.load(sys.stdin)
    folder, name = os.path.split(os.path.abspath(request["gguf"]))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    chats = request.get("chats", [])
    out = {
        "text_ids": [tokenizer(text, add_special_tokens=False)["input_ids"] for text in request.get("texts", [])],
        "chat_text": [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats],
        "logprobs": [],
        "top": [],
    }
    out["chat_ids"] = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in out["chat_text"]]
    k = int(request.get("top", 5))
    with torch.no_grad():
        for row in request.get("rows", []):
            logprobs = torch.log_softmax(model(torch.tensor([row])).logits[0].float(), dim=-1)
            chosen = logprobs[:-1].gather(1, torch.tensor(row[1:])[:, None])[:, 0]
            out["logprobs"].append([None] + chosen.tolist())
            values, ids = logprobs.topk(k, dim=-1)
            out["top"].append([[[i, v] for i, v in zip(pi, pv)] for pi, pv in zip(ids.tolist(), values.tolist())])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
