"""The numeric engine: token ids in, token ids and logprobs out (docs/engine-protocol.md).

Files: weights.py (safetensors), model.py (transformer, KV cache), lora.py
(adapters, PEFT layout, batched LoRA), sampling.py (per-request sampling),
generate.py (continuous batching), train.py (logprobs, RL/SFT step),
server.py (framed protocol over stdio/TCP).
"""
