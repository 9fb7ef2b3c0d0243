"""The numeric engine: token ids in, token ids and logprobs out (docs/engine-protocol.md).

Files, the process: __main__.py (`python3 -m engine`), cli.py (its command line, start-up and threads),
machine.py (the start-up matmul measurement and its warning, memory), transport.py (stdio/TCP framing, log lines),
server.py (the ops' handlers, dispatch, the engine's state), limits.py (the serving limits and what they size),
loading.py (which implementation runs a base; what the engine announces it runs), protocol.json and schema.py (the protocol's
schema, every op's fields, and the checks of requests and replies against it; bounds.json, the numeric bounds),
wire.py (checked requests built into the numerics' dataclasses).
The numerics: weights.py (safetensors), model.py (our transformer, KV cache), hf_model.py (any other causal LM
through transformers' modeling code, with our cache and LoRA), lora.py (adapters, PEFT
layout, batched LoRA), peft.py (an adapter folder checked against a base, and loaded), sampling.py (per-request sampling), constraints.py (llguidance token masks),
generate.py (continuous batching), train.py (logprobs, RL/SFT step), steps.py (Tinker's token-level
forward/backward, losses and AdamW step).
The trainer's process group: group.py (its ranks, the launcher's environment, collectives), shard.py (FSDP2 over
the base, the adapters' sharded state), parts.py (which part of the rows each rank computes, in lockstep batches).
Offline tools: gguf_convert.py (a GGUF file to an HF folder), pretrain.py (full-weight pretraining).
"""
