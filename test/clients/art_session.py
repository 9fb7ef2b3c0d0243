"""A user's session with OpenPipe ART's real client against our server, for test/art-client.test.ts.

Everything that reaches our training API is ART's own code: `art.TrainableModel` registered with
`art.ServerlessBackend(base_url=..., api_key=...)` (the constructor arguments ART documents for a
self-hosted server), sampling through `model.openai_client()`, `backend.train`, `model.log`,
`model.get_step`, `model.delete_checkpoints`, `art.utils.sft.train_sft_from_file` and
`backend.delete`. The one stand-in is the `wandb` module: ART uploads SFT data with W&B's SDK to
W&B's servers, so a minimal `wandb` here uploads the same file to our artifact endpoint instead,
under the artifact name ART chose (ART then sends our server the `wandb-artifact:///` URL it
built itself). Run with $ART_PYTHON (the .venv-art venv):

    stdin  {"server": "http://host:port", "api_key": str, "base_model": str, "workdir": folder}
    stdout one JSON object: what each call returned, for the test to check
"""

import asyncio
import json
import os
import sys
import types
from pathlib import Path

import httpx


def install_wandb_stand_in(server: str, api_key: str, uploads: list) -> None:
    """The part of W&B's SDK that ART's SFT path calls, uploading to our /v1/preview/artifacts."""

    class Artifact:
        def __init__(self, name, type, metadata=None):
            self.name, self.type, self.metadata, self.files = name, type, metadata, []

        def add_file(self, local_path, name):
            self.files.append((local_path, name))

        def wait(self):
            return self

    class Run:
        def __init__(self, entity, project):
            self.entity, self.project, self._is_finished = entity, project, False

        def log_artifact(self, artifact):
            files = [("file", (name, Path(local_path).read_bytes())) for local_path, name in artifact.files]
            url = f"{server}/v1/preview/artifacts/{self.entity}/{self.project}/{artifact.name}"
            response = httpx.post(url, files=files, headers={"authorization": f"Bearer {api_key}"})
            response.raise_for_status()
            uploads.append(response.json())
            return artifact

        def finish(self):
            self._is_finished = True

    wandb = types.ModuleType("wandb")
    wandb.Artifact = Artifact
    wandb.Settings = lambda **settings: settings
    wandb.init = lambda entity=None, project=None, **_: Run(entity, project)
    sys.modules["wandb"] = wandb


TASK = [(2, 3), (4, 1), (6, 2), (3, 3)]


async def scored_groups(art, model, seed: int) -> list:
    """One group of four temperature-1 answers per sum, rewarded 1 for the right sum, as ART users write it."""
    client = model.openai_client()
    groups = []
    for index, (a, b) in enumerate(TASK):
        messages = [{"role": "user", "content": f"What is {a} + {b}?"}]
        completion = await client.chat.completions.create(
            model=model.get_inference_name(), messages=messages, n=4, max_tokens=8, temperature=1.0, logprobs=True, seed=seed + index
        )
        trajectories = [
            art.Trajectory(messages_and_choices=[*messages, choice], reward=float((choice.message.content or "").strip() == str(a + b)))
            for choice in completion.choices
        ]
        groups.append(art.TrajectoryGroup(trajectories))
    return groups


async def train_rl(art, backend, model, out: dict) -> None:
    out["rl"] = []
    start = await model.get_step()
    for step in range(start, start + 3):
        groups = await scored_groups(art, model, seed=100 * step)
        await model.log(groups, split="val")
        result = await backend.train(model, groups, learning_rate=1e-2)
        await model.log(groups, split="train", metrics=result.metrics, step=result.step)
        out["rl"].append({"step": result.step, "artifact_name": result.artifact_name, "metrics": result.metrics, "get_step": await model.get_step()})


async def list_steps(backend, model) -> list:
    # ART's own paginated listing (the request delete_checkpoints walks), not ours.
    return [checkpoint.step async for checkpoint in backend._client.models.checkpoints.list(model_id=model.id)]


async def train_sft_file(model, workdir: str, out: dict) -> None:
    from art.utils.sft import train_sft_from_file

    path = os.path.join(workdir, "sft.jsonl")
    with open(path, "w") as f:
        for a, b in TASK * 2:
            f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {a} + {b}?"}, {"role": "assistant", "content": str(a + b)}]}) + "\n")
    before = await model.get_step()
    await train_sft_from_file(model, path, epochs=1, batch_size=2, peak_lr=1e-2)
    out["sft"] = {"before": before, "after": await model.get_step()}


async def main() -> dict:
    request = json.load(sys.stdin)
    out: dict = {"uploads": []}
    install_wandb_stand_in(request["server"], request["api_key"], out["uploads"])
    import art
    from art.serverless import ServerlessBackend

    backend = ServerlessBackend(api_key=request["api_key"], base_url=f"{request['server']}/v1")
    model = art.TrainableModel(name="adder", project="art-client", base_model=request["base_model"], base_path=request["workdir"])
    await model.register(backend)
    again = art.TrainableModel(name="adder", project="art-client", base_model=request["base_model"], base_path=request["workdir"])
    await again.register(backend)
    out["register"] = {"id": model.id, "entity": model.entity, "run_id": model.run_id, "again_id": again.id, "inference_name": model.get_inference_name()}
    out["initial_step"] = await model.get_step()

    await train_rl(art, backend, model, out)
    out["steps_before_delete"] = await list_steps(backend, model)
    await model.delete_checkpoints(best_checkpoint_metric="val/reward")
    out["steps_after_delete"] = await list_steps(backend, model)

    await train_sft_file(model, request["workdir"], out)
    answer = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=[{"role": "user", "content": "What is 2 + 3?"}], max_tokens=8, temperature=0
    )
    out["answer_after_sft"] = answer.choices[0].message.content

    await backend.delete(model)
    try:
        await model.get_step()
        out["after_delete"] = "still there"
    except Exception as error:  # ART raises the openai SDK's error for our 404
        out["after_delete"] = type(error).__name__
    await backend.close()
    return out


if __name__ == "__main__":
    # W&B's key must not be in the environment: ART would then log metrics to W&B's servers itself.
    os.environ.pop("WANDB_API_KEY", None)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch a price list at import
    # ART prints progress and notices; stdout carries only the result.
    result_stream, sys.stdout = sys.stdout, sys.stderr
    json.dump(asyncio.run(main()), result_stream)
