"""OpenPipe ART's TinkerNativeBackend against our Tinker API, for test/art-tinker.test.ts.

Everything that reaches our server is ART's and the Tinker SDK's own code (openpipe-art 0.5.18 and the tinker 0.18
it pins, run with $ART_TINKER_PYTHON): the backend finds us through TINKER_BASE_URL / TINKER_API_KEY, creates a
LoRA training client, serves chat from its own OpenAI-compatible server by sampling through our API, and trains
an RL step with `backend.train`. The tokenizer is our model folder, found under the base model's id in the working
directory (the cookbook loads a local folder when the model name names one); the renderer is named in ART's
`tinker_native_args`. Then the SDK's own archive call downloads the trained checkpoint.

    stdin  {"server": "http://host:port", "api_key": str, "base_model": str, "workdir": folder}
    stdout one JSON object: what each call returned, for the test to check
"""

import asyncio
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request

PROMPT = [{"role": "user", "content": "What is 2 + 2? Answer with a number."}]


async def rollouts(model, groups, per_group):
    """Groups of sampled answers with rewards that differ within each group (so every group has an advantage), each
    group holding at least two different answers: the tiny model often samples the same six tokens, and a group of
    identical answers has advantages that cancel exactly, a zero gradient the test would take for no training."""
    client = model.openai_client()
    import art

    async def sample():
        completion = await client.chat.completions.create(
            model=model.get_inference_name(), messages=PROMPT, max_tokens=6, temperature=1.0, logprobs=True
        )
        return completion.choices[0]

    out = []
    for _ in range(groups):
        choices = [await sample() for _ in range(per_group)]
        for _ in range(20):
            if len({choice.message.content for choice in choices}) > 1:
                break
            choices[-1] = await sample()
        trajectories = [
            art.Trajectory(messages_and_choices=[*PROMPT, choice], reward=float(index))
            for index, choice in enumerate(choices)
        ]
        out.append(art.TrajectoryGroup(trajectories))
    return out


def download_archive(rest_client, tinker_path):
    """The SDK's archive call, then the download with a plain HTTP client, as Tinker's CLI does."""
    answer = rest_client.get_checkpoint_archive_url_from_tinker_path(tinker_path).result()
    with urllib.request.urlopen(answer.url, timeout=60) as response:
        data = response.read()
    members = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            members[member.name] = hashlib.sha256(archive.extractfile(member).read()).hexdigest()
    return {"url": answer.url, "expires": answer.expires.isoformat(), "members": members}


async def main():
    request = json.load(sys.stdin)
    os.chdir(request["workdir"])
    os.environ["TINKER_BASE_URL"] = request["server"]
    os.environ["TINKER_API_KEY"] = "tml-" + request["api_key"]
    import art
    from art.tinker_native import TinkerNativeBackend

    backend = TinkerNativeBackend(path=os.path.join(request["workdir"], ".art"))
    model = art.TrainableModel(
        name="native",
        project="art-tinker",
        base_model=request["base_model"],
        _internal_config={
            "tinker_native_args": {"renderer_name": "qwen3_instruct", "training_client_args": {"rank": 4, "seed": 0}}
        },
    )
    await model.register(backend)
    state = backend._model_state[model.name]
    out = {"run_id": state.training_client.model_id, "step_before": await model.get_step()}
    groups = await rollouts(model, groups=2, per_group=3)
    out["sampled"] = [t.messages_and_choices[-1].message.content for g in groups for t in g.trajectories]
    result = await backend.train(model, groups, learning_rate=1e-2, loss_fn="importance_sampling")
    out["train"] = {"step": result.step, "metrics": result.metrics}
    out["step_after"] = await model.get_step()
    out["sampler_paths"] = {str(step): path for step, path in state.sampler_checkpoint_paths.items()}
    after = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=PROMPT, max_tokens=6, temperature=0.0
    )
    out["trained_answer"] = after.choices[0].message.content
    out["archive"] = download_archive(state.rest_client, state.sampler_checkpoint_paths[result.step])
    await backend.close()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
