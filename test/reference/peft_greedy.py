"""Greedy continuation of a chat by transformers + PEFT on an exported adapter (test/transformers-families.test.ts).

stdin: {base, adapter, messages, max_new_tokens}. The prompt is the folder's own chat template (apply_chat_template);
stdout: {prompt: [ids], tokens: [ids]}, the ids transformers' greedy generate appends.
"""

import json
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

req = json.load(sys.stdin)
tokenizer = AutoTokenizer.from_pretrained(req["base"])
prompt = tokenizer.apply_chat_template(req["messages"], add_generation_prompt=True, tokenize=True, return_dict=False)
prompt = list(prompt["input_ids"] if isinstance(prompt, dict) else prompt)
base = AutoModelForCausalLM.from_pretrained(req["base"], dtype=torch.float32)
model = PeftModel.from_pretrained(base, req["adapter"]).eval()
with torch.no_grad():
    out = model.generate(
        input_ids=torch.tensor([prompt]), max_new_tokens=req["max_new_tokens"], do_sample=False, pad_token_id=0
    )
print(json.dumps({"prompt": prompt, "tokens": out[0, len(prompt) :].tolist()}))
