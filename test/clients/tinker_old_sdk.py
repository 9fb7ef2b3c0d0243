"""The tinker SDK at 0.16.0 (scripts/python/tinker-016.txt, first on PYTHONPATH over .venv-tinker), for
test/tinker-api.test.ts: a user's loop on an SDK that sends only the fields a caller set. `AdamParams(learning_rate=…)`
goes out without β1, β2 and ε (the server applies the SDK's documented defaults), and
`save_weights_and_get_sampling_client` asserts that the save is answered without a path.

    stdin  {"server": url, "api_key": str, "base_model": str}
    stdout {"version", "loss_before", "loss_after", "sampled"}
"""

import json
import sys

import tinker
from tinker import types


def main() -> None:
    request = json.load(sys.stdin)
    service = tinker.ServiceClient(base_url=request["server"], api_key="tml-" + request["api_key"])
    trainer = service.create_lora_training_client(base_model=request["base_model"], rank=4)
    tokens = list(range(10, 20))
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )
    before = trainer.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = trainer.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    sampler = trainer.save_weights_and_get_sampling_client()
    params = types.SamplingParams(max_tokens=3, temperature=0.0)
    sample = sampler.sample(types.ModelInput.from_ints(tokens[:3]), 1, params).result()
    json.dump(
        {
            "version": tinker.__version__,
            "loss_before": before,
            "loss_after": after,
            "sampled": sample.sequences[0].tokens,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
