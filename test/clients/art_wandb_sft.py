"""ART's SFT from a file with W&B's real `wandb` SDK pointed at our server, for test/art-wandb-sft.test.ts.

ART uploads SFT data with the `wandb` SDK (wandb.init, run.log_artifact, Artifact.wait, run.finish) and
then sends our training API the `wandb-artifact:///` URL of that upload. Here nothing is replaced: the SDK
installed in the venv (scripts/python/art.txt, art-0523.txt) talks to our server because WANDB_BASE_URL names it,
with one of our keys as WANDB_API_KEY, as a self-hosted user would set them. The only addition is an observer on ART's
own SFT job call that notes the URL ART sent (and passes the call on). Before ART runs, the SDK is also called
directly, twice: with a key this server does not know, and asking for an artifact alias the server does not serve.
After SFT, `model.log(split="val")` logs held-out groups, which ART writes to its W&B run: the SDK streams them here.
Run with $ART_PYTHON (ART 0.5.18, .venv-art) or $ART_0523_PYTHON (0.5.23, .venv-art-0523):

    stdin  {"server": "http://host:port", "api_key": str, "base_model": str, "workdir": folder}
    stdout one JSON object: what each call returned or raised, for the test to check
"""

import asyncio
import json
import os
import sys
from importlib.metadata import version

TASK = [(2, 3), (4, 1), (6, 2), (3, 3)]


def write_sft_file(workdir: str) -> str:
    path = os.path.join(workdir, "sft.jsonl")
    with open(path, "w") as f:
        for a, b in TASK * 2:
            f.write(
                json.dumps(
                    {
                        "messages": [
                            {"role": "user", "content": f"What is {a} + {b}?"},
                            {"role": "assistant", "content": str(a + b)},
                        ]
                    }
                )
                + "\n"
            )
    return path


def observe_sft_jobs(backend, urls: list) -> None:
    """Notes the training_data_url of each SFT job ART submits; the call itself goes on unchanged."""
    jobs = backend._client.sft_training_jobs
    create = jobs.create

    async def create_and_note(**kwargs):
        urls.append(kwargs["training_data_url"])
        return await create(**kwargs)

    jobs.create = create_and_note


def error_of(call) -> dict:
    try:
        call()
    except Exception as error:  # the SDK's own exception, reported as it is
        return {"type": f"{type(error).__module__}.{type(error).__name__}", "message": str(error)}
    return {"type": None, "message": None}


def direct_sdk_calls(data_path: str, key: str) -> dict:
    """The SDK used directly: a key the server does not know, and an artifact alias it does not serve."""
    import wandb

    def wrong_key():
        wandb.init(
            entity="local", project="art-wandb", id="wrong-key", settings=wandb.Settings(api_key="sk-" + "0" * 43)
        )

    def unsupported_alias():
        run = wandb.init(entity="local", project="art-wandb", id="aliases", settings=wandb.Settings(api_key=key))
        try:
            artifact = wandb.Artifact("aliased-data", type="dataset")
            artifact.add_file(data_path, name="train.jsonl")
            run.log_artifact(artifact, aliases=["best"]).wait()
        finally:
            run.finish()

    return {"wrong_key": error_of(wrong_key), "unsupported_alias": error_of(unsupported_alias)}


async def log_val(art, model) -> list:
    """`model.log(split="val")` at three steps, each group's rewards chosen so its mean is known: ART writes its local
    history and, WANDB_API_KEY being set, the W&B run it names after the model, whose history the SDK streams to our
    server. The run is then finished (ART leaves that to the process's exit), so the SDK has sent every line."""
    logged = []
    for step, rewards in enumerate(([0.0, 0.5], [0.5, 0.5], [1.0, 0.5])):
        messages = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Red."}]
        group = art.TrajectoryGroup(
            [art.Trajectory(messages_and_choices=messages, reward=reward) for reward in rewards]
        )
        await model.log([group], split="val", step=step)
        logged.append({"step": step, "reward": sum(rewards) / len(rewards)})
    model._wandb_run.finish()
    return logged


async def main() -> dict:
    request = json.load(sys.stdin)
    import art
    from art.serverless import ServerlessBackend
    from art.utils.sft import train_sft_from_file

    import wandb

    out: dict = {"wandb_version": wandb.__version__, "art_version": version("openpipe-art")}
    # Before ART opens its own W&B run for the model's metrics: wandb.init hands back an active run instead of a new one.
    path = write_sft_file(request["workdir"])
    out.update(direct_sdk_calls(path, request["api_key"]))
    backend = ServerlessBackend(api_key=request["api_key"], base_url=f"{request['server']}/v1")
    # ART 0.5.20+ requires a run name (the name our server sees); 0.5.18 has none.
    run_name = {"run_name": "adder"} if "run_name" in art.TrainableModel.model_fields else {}
    model = art.TrainableModel(
        name="adder", project="art-wandb", base_model=request["base_model"], base_path=request["workdir"], **run_name
    )
    await model.register(backend)
    out["entity"] = model.entity
    out["model_id"] = model.id
    urls: list = []
    observe_sft_jobs(backend, urls)

    with open(path) as f:
        out["conversations"] = [json.loads(line)["messages"] for line in f]
    out["before"] = await model.get_step()
    await train_sft_from_file(model, path, epochs=1, batch_size=2, peak_lr=1e-2)
    out["after"] = await model.get_step()
    out["training_data_urls"] = urls
    out["val_logged"] = await log_val(art, model)
    await backend.close()
    return out


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch a price list at import
    # ART prints progress and the SDK its notices, some at exit through the original stdout: the result goes to a
    # copy of file descriptor 1, and descriptor 1 itself to stderr for everything else.
    result_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    json.dump(asyncio.run(main()), result_stream)
    result_stream.flush()
