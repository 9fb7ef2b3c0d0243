"""The official `tinker` SDK (run with $TINKER_PYTHON) against our server, for test/tinker-api.test.ts.

Reads {server, api_key, other_key, base_model, tokenizer} as JSON on stdin; drives a supervised loop, an RL
loop with importance sampling, StableReinforce on recorded samples, a save/load round trip, sampling from saved weights, the SDK's error paths and a
diverged optim_step;
prints what it observed as JSON. It asserts nothing: the test decides.
"""

import json
import sys

from tokenizers import Tokenizer

import tinker
from tinker import types

SFT_PAIRS = [("one plus one is", " two"), ("the sky is", " blue"), ("grass is", " green"), ("snow is", " white")]


def datum(tokenizer, prompt, answer):
    prompt_ids = tokenizer.encode(prompt).ids
    answer_ids = tokenizer.encode(answer).ids
    tokens = prompt_ids + answer_ids
    weights = [0.0] * len(prompt_ids) + [1.0] * len(answer_ids)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights[1:]},
    )


def greedy(sampler, tokenizer, prompt, max_tokens=6):
    params = types.SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=0)
    result = sampler.sample(types.ModelInput.from_ints(tokenizer.encode(prompt).ids), 1, params).result()
    return result.sequences[0].tokens


def supervised(service, tokenizer, base_model):
    trainer = service.create_lora_training_client(base_model=base_model, rank=8, seed=0).result()
    data = [datum(tokenizer, p, a) for p, a in SFT_PAIRS]
    base_sampler = service.create_sampling_client(base_model=base_model)
    before = greedy(base_sampler, tokenizer, SFT_PAIRS[1][0])
    losses = []
    for _ in range(12):
        fb = trainer.forward_backward(data, "cross_entropy")
        opt = trainer.optim_step(types.AdamParams(learning_rate=2e-2))
        losses.append(fb.result().metrics["loss:sum"])
        opt.result()
    saved = trainer.save_weights_for_sampler("sft-final").result()
    after = greedy(service.create_sampling_client(model_path=saved.path), tokenizer, SFT_PAIRS[1][0])
    info = trainer.get_info()
    return {
        "model_id": trainer.model_id,
        "info": {"model_id": info.model_id, "lora_rank": info.lora_rank, "model_name": info.model_name},
        "losses": losses,
        "before": before,
        "after": after,
        "target": tokenizer.encode(SFT_PAIRS[1][1]).ids,
        "sampler_path": saved.path,
    }


def reinforcement(service, tokenizer, base_model):
    trainer = service.create_lora_training_client(base_model=base_model, rank=4, seed=1).result()
    saved = trainer.save_weights_for_sampler("rl-step0").result()
    sampler = service.create_sampling_client(model_path=saved.path).result()
    prompt = tokenizer.encode("the sky is").ids
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    result = sampler.sample(types.ModelInput.from_ints(prompt), 4, params).result()
    data, sampled_logprobs = [], []
    for index, sequence in enumerate(result.sequences):
        tokens = prompt + list(sequence.tokens)
        pad = [0.0] * (len(prompt) - 1)
        advantage = 1.0 if index % 2 == 0 else -1.0
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "logprobs": pad + list(sequence.logprobs),
                    "advantages": pad + [advantage] * len(sequence.tokens),
                },
            )
        )
        sampled_logprobs.append(list(sequence.logprobs))
    fb = trainer.forward_backward(data, "importance_sampling").result()
    trainer_logprobs = [output["logprobs"].tolist()[len(prompt) - 1 :] for output in fb.loss_fn_outputs]
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    second = trainer.forward_backward(data, "importance_sampling").result()
    trained_sampler = trainer.save_weights_and_get_sampling_client()
    trained_sample = trained_sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result()
    return {
        "sampler_logprobs": sampled_logprobs,
        "trainer_logprobs": trainer_logprobs,
        "loss_step0": fb.metrics["loss:sum"],
        "loss_step1": second.metrics["loss:sum"],
        "ppo": trainer.forward(data, "ppo").result().metrics["loss:sum"],
        "other_losses": {name: trainer.forward(data, name).result().metrics["loss:sum"] for name in ("cispo", "dro")},
        "gspo": trainer.forward(
            [
                types.Datum(
                    model_input=d.model_input,
                    loss_fn_inputs={
                        **d.loss_fn_inputs,
                        "sequence_ratio_mask": [0.0] * (len(prompt) - 1)
                        + [1.0] * (d.model_input.length - len(prompt) + 1),
                    },
                )
                for d in data
            ],
            "gspo",
        )
        .result()
        .metrics["loss:sum"],
        "sampler_path": saved.path,
        "trained_sample_length": len(trained_sample.sequences[0].tokens),
    }


def stable_reinforce(service, tokenizer, base_model):
    """tinker 0.38's StableReinforce: sampled with record_stability_info, each datum naming its sequence's prompt and
    sampled tokens (Datum.with_provenance, as the cookbook builds them). The datums carry zeros for logprobs on purpose:
    the server trains on the logprobs it recorded when sampling. Then the ways a datum's provenance can be wrong."""
    trainer = service.create_lora_training_client(base_model=base_model, rank=4, seed=4).result()
    sampler = trainer.save_weights_and_get_sampling_client(record_stability_info=True).result()
    prompt = tokenizer.encode("the sky is").ids
    params = types.SamplingParams(max_tokens=5, temperature=1.0, seed=11)
    result = sampler.sample(types.ModelInput.from_ints(prompt), 2, params).result()
    data, advantages = [], []
    for index, sequence in enumerate(result.sequences):
        tokens = prompt + list(sequence.tokens)
        advantage = 1.0 if index == 0 else -1.0
        advantages.append(advantage)
        pad = [0.0] * (len(prompt) - 1)
        plain = types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": tokens[1:],
                "logprobs": [0.0] * (len(tokens) - 1),
                "advantages": pad + [advantage] * len(sequence.tokens),
            },
        )
        sid = sequence.sequence_id
        data.append(
            plain.with_provenance(
                model_input=[
                    types.PromptProvenanceSpan(sequence_id=sid, length=len(prompt)),
                    types.SampledProvenanceSpan(sequence_id=sid, length=len(sequence.tokens) - 1),
                ],
                loss_fn_inputs=[
                    types.PromptProvenanceSpan(sequence_id=sid, offset=1, length=len(prompt) - 1),
                    types.SampledProvenanceSpan(sequence_id=sid, length=len(sequence.tokens)),
                ],
            )
        )
    fb = trainer.forward_backward(data, "stable_reinforce").result()
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    first = data[0]
    spans = first.loss_fn_input_spans

    def with_spans(target_spans, targets=None):
        inputs = {**first.loss_fn_inputs}
        if targets is not None:
            inputs["target_tokens"] = targets
        return types.Datum(
            model_input=first.model_input,
            loss_fn_inputs=inputs,
            model_input_spans=first.model_input_spans,
            loss_fn_input_spans=target_spans,
        )

    unknown = [spans[0], types.SampledProvenanceSpan(sequence_id="no-such-sequence", length=spans[1].length)]
    targets = first.loss_fn_inputs["target_tokens"].tolist()
    other_token = targets[:-1] + [(targets[-1] + 1) % 100]
    return {
        "prompt_length": len(prompt),
        "advantages": advantages,
        "sampler_logprobs": [list(sequence.logprobs) for sequence in result.sequences],
        "trainer_logprobs": [output["logprobs"].tolist() for output in fb.loss_fn_outputs],
        "elementwise_loss": [output["elementwise_loss"].tolist() for output in fb.loss_fn_outputs],
        "loss": fb.metrics["loss:sum"],
        "errors": {
            "without_provenance": failure(
                lambda: trainer.forward(
                    [types.Datum(model_input=first.model_input, loss_fn_inputs=first.loss_fn_inputs)],
                    "stable_reinforce",
                ).result()
            ),
            "unknown_sequence": failure(lambda: trainer.forward([with_spans(unknown)], "stable_reinforce").result()),
            "other_token": failure(
                lambda: trainer.forward([with_spans(spans, other_token)], "stable_reinforce").result()
            ),
        },
    }


def save_and_load(service, tokenizer, base_model):
    trainer = service.create_lora_training_client(base_model=base_model, rank=8, seed=2).result()
    data = [datum(tokenizer, p, a) for p, a in SFT_PAIRS]
    for _ in range(2):
        trainer.forward_backward(data, "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=1e-2))
    state = trainer.save_state("ckpt-a").result()
    reference = trainer.forward(data, "cross_entropy").result()
    trainer.forward_backward(data, "cross_entropy")
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after_reference_step = trainer.forward(data, "cross_entropy").result()
    drifted = trainer.forward(data, "cross_entropy").result()
    trainer.load_state_with_optimizer(state.path).result()
    restored = trainer.forward(data, "cross_entropy").result()
    trainer.forward_backward(data, "cross_entropy")
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after_restored_step = trainer.forward(data, "cross_entropy").result()
    clone = service.create_training_client_from_state_with_optimizer(state.path).result()
    cloned = clone.forward(data, "cross_entropy").result()

    def as_lists(out):
        return [o["logprobs"].tolist() for o in out.loss_fn_outputs]

    return {
        "state_path": state.path,
        "reference": as_lists(reference),
        "drifted": as_lists(drifted),
        "restored": as_lists(restored),
        "after_reference_step": as_lists(after_reference_step),
        "after_restored_step": as_lists(after_restored_step),
        "cloned": as_lists(cloned),
    }


def custom_loss(service, tokenizer, base_model):
    """forward_backward_custom with cross-entropy written as a custom loss, beside the built-in one from the same seed.

    The SDK runs a custom loss client-side: a forward for the logprobs, then a cross_entropy forward_backward weighted
    by minus the loss's gradient, which here is exactly the datum's weights: both clients must end on the same weights.
    """
    import torch

    data = [datum(tokenizer, p, a) for p, a in SFT_PAIRS]

    def nll(batch, logprobs_list):
        loss = sum(-(lp * torch.tensor(d.loss_fn_inputs["weights"].data)).sum() for d, lp in zip(batch, logprobs_list))
        return loss, {"custom_nll": float(loss)}

    results = {}
    for name in ("builtin", "custom"):
        trainer = service.create_lora_training_client(base_model=base_model, rank=4, seed=9).result()
        if name == "builtin":
            fb = trainer.forward_backward(data, "cross_entropy")
        else:
            fb = trainer.forward_backward_custom(data, nll)
        trainer.optim_step(types.AdamParams(learning_rate=2e-2)).result()
        metrics = fb.result().metrics
        after = trainer.forward(data, "cross_entropy").result()
        results[name] = {"metrics": metrics, "logprobs": [o["logprobs"].tolist() for o in after.loss_fn_outputs]}
    return results


def diverged(service, tokenizer, base_model):
    """An optim_step at an absurd learning rate fails; the client then trains on exactly as a twin that never tried."""
    data = [datum(tokenizer, p, a) for p, a in SFT_PAIRS]

    def as_lists(out):
        return [o["logprobs"].tolist() for o in out.loss_fn_outputs]

    trainer, twin = (
        service.create_lora_training_client(base_model=base_model, rank=8, seed=4).result() for _ in range(2)
    )
    for client in (trainer, twin):
        client.forward_backward(data, "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    reference = trainer.forward(data, "cross_entropy").result()
    trainer.forward_backward(data, "cross_entropy")
    error = failure(lambda: trainer.optim_step(types.AdamParams(learning_rate=1e30)).result())
    unchanged = trainer.forward(data, "cross_entropy").result()
    for client in (trainer, twin):
        client.forward_backward(data, "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    return {
        "model_id": trainer.model_id,
        "error": error,
        "reference": as_lists(reference),
        "unchanged": as_lists(unchanged),
        "after": as_lists(trainer.forward(data, "cross_entropy").result()),
        "twin_after": as_lists(twin.forward(data, "cross_entropy").result()),
    }


def failure(call):
    """The exception type the SDK raised (and its status where it has one), or None."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - recording which type the SDK raises is the point
        return {
            "type": type(error).__name__,
            "status": getattr(error, "status_code", None),
            "message": str(error)[:300],
        }
    return None


def errors(service, other, tokenizer, base_model, model_id, run_id):
    trainer = service.create_lora_training_client(base_model=base_model, rank=4, seed=3).result()
    good = datum(tokenizer, *SFT_PAIRS[0])
    tokens = good.model_input.to_ints()
    mismatched = types.Datum(
        model_input=good.model_input, loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * len(tokens)}
    )
    outside = types.Datum(
        model_input=types.ModelInput.from_ints([10**7] + tokens[1:]), loss_fn_inputs=good.loss_fn_inputs
    )
    rl_datum = types.Datum(
        model_input=good.model_input,
        loss_fn_inputs={
            "target_tokens": tokens[1:] + [0],
            "logprobs": [0.0] * len(tokens),
            "advantages": [1.0] * len(tokens),
        },
    )
    raw = service.holder

    def other_info():
        return other.create_rest_client().get_training_run(run_id).result()

    def unknown_future():
        async def call():
            with raw.aclient(tinker.lib.client_connection_pool_type.ClientConnectionPoolType.TRAIN) as client:
                return await client.futures.retrieve(request=types.FutureRetrieveRequest(request_id="no-such-future"))

        return raw.run_coroutine_threadsafe(call()).result()

    def foreign_model():
        async def call():
            with other.holder.aclient(tinker.lib.client_connection_pool_type.ClientConnectionPoolType.TRAIN) as client:
                return await client.models.get_info(request=types.GetInfoRequest(model_id=model_id))

        return other.holder.run_coroutine_threadsafe(call()).result()

    return {
        "unknown_loss": failure(lambda: trainer.forward_backward([good], "no_such_loss").result()),
        "gspo_without_mask": failure(lambda: trainer.forward([rl_datum], "gspo").result()),
        "mismatched_lengths": failure(lambda: trainer.forward_backward([mismatched], "cross_entropy").result()),
        "outside_vocabulary": failure(lambda: trainer.forward_backward([outside], "cross_entropy").result()),
        "foreign_model": failure(foreign_model),
        "foreign_run": failure(other_info),
        "unknown_future": failure(unknown_future),
        "good_after_errors": trainer.forward([good], "cross_entropy").result().metrics["loss:sum"],
        "model_id": trainer.model_id,
    }


def rest(service, sft_path, rl_path):
    client = service.create_rest_client()
    run_id = sft_path[len("tinker://") :].split("/")[0]
    rl_run = rl_path[len("tinker://") :].split("/")[0]
    info = client.get_weights_info_by_tinker_path(sft_path).result()
    listed = client.list_checkpoints(run_id).result()
    by_path = client.get_training_run_by_tinker_path(sft_path).result()
    mine = client.list_user_checkpoints().result()
    client.delete_checkpoint_from_tinker_path(rl_path).result()
    after_delete = [c.tinker_path for c in client.list_checkpoints(rl_run).result().checkpoints]
    return {
        "training_runs": [run.training_run_id for run in client.list_training_runs().result().training_runs],
        "weights_info": {"base_model": info.base_model, "is_lora": info.is_lora, "lora_rank": info.lora_rank},
        "checkpoints": [c.tinker_path for c in listed.checkpoints],
        "run_by_path": {"id": by_path.training_run_id, "last_sampler": by_path.last_sampler_checkpoint.tinker_path},
        "user_checkpoints": [c.tinker_path for c in mine.checkpoints],
        "rl_after_delete": after_delete,
        "sample_deleted": failure(lambda: service.create_sampling_client(model_path=rl_path).result()),
    }


def sampling(service, tokenizer, base_model):
    sampler = service.create_sampling_client(base_model=base_model).result()
    prompt = types.ModelInput.from_ints(tokenizer.encode("the sky is").ids)
    free = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=6, temperature=0.0)).result().sequences[0]
    stop_id = free.tokens[2]
    stopped = (
        sampler.sample(prompt, 1, types.SamplingParams(max_tokens=8, temperature=0.0, stop=[stop_id]))
        .result()
        .sequences[0]
    )
    # A stop string completed by the last token of the greedy answer: the sample ends right there.
    stop_text = tokenizer.decode(list(free.tokens))[-2:]
    by_string = (
        sampler.sample(prompt, 1, types.SamplingParams(max_tokens=6, temperature=0.0, stop=[stop_text]))
        .result()
        .sequences[0]
    )
    seeded = [
        [
            list(s.tokens)
            for s in sampler.sample(prompt, 3, types.SamplingParams(max_tokens=5, temperature=1.0, seed=11))
            .result()
            .sequences
        ]
        for _ in range(2)
    ]
    with_prompt = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=2), include_prompt_logprobs=True).result()
    # compute_logprobs (ART's Tinker backend scores with it): a one-token sample with prompt logprobs, all or the last N.
    scored = sampler.compute_logprobs(prompt).result()
    scored_last_2 = sampler.compute_logprobs(prompt, prompt_logprobs_last_n=2).result()
    return {
        "free": list(free.tokens),
        "free_stop_reason": free.stop_reason,
        "stop_id": stop_id,
        "stopped": list(stopped.tokens),
        "stopped_reason": stopped.stop_reason,
        "stop_text": stop_text,
        "by_string": list(by_string.tokens),
        "by_string_reason": by_string.stop_reason,
        "by_string_text": tokenizer.decode(list(by_string.tokens)),
        "by_string_text_before_last": tokenizer.decode(list(by_string.tokens)[:-1]),
        "seeded": seeded,
        "prompt_length": prompt.length,
        "prompt_logprobs": with_prompt.prompt_logprobs,
        "scored": scored,
        "scored_last_2": scored_last_2,
    }


def main():
    request = json.load(sys.stdin)
    tokenizer = Tokenizer.from_file(request["tokenizer"])
    service = tinker.ServiceClient(base_url=request["server"], api_key="tml-" + request["api_key"])
    other = tinker.ServiceClient(base_url=request["server"], api_key="tml-" + request["other_key"])
    capabilities = service.get_server_capabilities()
    base_model = request["base_model"]
    out = {"capabilities": [model.model_name for model in capabilities.supported_models]}
    out["supervised"] = supervised(service, tokenizer, base_model)
    out["reinforcement"] = reinforcement(service, tokenizer, base_model)
    out["stable_reinforce"] = stable_reinforce(service, tokenizer, base_model)
    out["save_and_load"] = save_and_load(service, tokenizer, base_model)
    out["custom_loss"] = custom_loss(service, tokenizer, base_model)
    run_id = out["supervised"]["sampler_path"][len("tinker://") :].split("/")[0]
    out["errors"] = errors(service, other, tokenizer, base_model, out["supervised"]["model_id"], run_id)
    out["sampling"] = sampling(service, tokenizer, base_model)
    out["diverged"] = diverged(service, tokenizer, base_model)
    out["rest"] = rest(service, out["supervised"]["sampler_path"], out["reinforcement"]["sampler_path"])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
