"""The official `tinker` SDK (run with $TINKER_PYTHON) training one client, for test/tinker-exactly-once.test.ts.

Reads {server, api_key, base_model, tokenizer, steps} as JSON on stdin; creates a LoRA training client with a fixed
seed, runs `steps` supervised steps (forward_backward + optim_step), then a forward pass; prints the model id, the
losses and the final logprobs as JSON. Run once straight against the server and once through a proxy that loses
answers: the SDK re-sends those requests itself, and the two runs must end on the same weights.
"""

import json
import sys

from tokenizers import Tokenizer

import tinker
from tinker import types

PAIRS = [("one plus one is", " two"), ("the sky is", " blue"), ("grass is", " green")]


def datum(tokenizer, prompt, answer):
    prompt_ids = tokenizer.encode(prompt).ids
    tokens = prompt_ids + tokenizer.encode(answer).ids
    weights = [0.0] * len(prompt_ids) + [1.0] * (len(tokens) - len(prompt_ids))
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights[1:]},
    )


def main():
    request = json.load(sys.stdin)
    tokenizer = Tokenizer.from_file(request["tokenizer"])
    service = tinker.ServiceClient(base_url=request["server"], api_key="tml-" + request["api_key"])
    trainer = service.create_lora_training_client(base_model=request["base_model"], rank=4, seed=5).result()
    data = [datum(tokenizer, p, a) for p, a in PAIRS]
    losses = []
    for _ in range(request["steps"]):
        fb = trainer.forward_backward(data, "cross_entropy")
        step = trainer.optim_step(types.AdamParams(learning_rate=5e-2))
        losses.append(fb.result().metrics["loss:sum"])
        step.result()
    final = trainer.forward(data, "cross_entropy").result()
    json.dump(
        {
            "model_id": trainer.model_id,
            "losses": losses,
            "logprobs": [output["logprobs"].tolist() for output in final.loss_fn_outputs],
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
