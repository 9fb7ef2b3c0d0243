"""A user's session with OpenPipe ART's real client against our server, for test/art-client.test.ts.

Runs under either pinned release: 0.5.18 ($ART_PYTHON, .venv-art) or 0.5.23 ($ART_0523_PYTHON, .venv-art-0523),
whose wire differs (reference art-0.5.23.md §2.4): `run_name` names the model, trajectories leave out every
field at its default (a reward of 0.0 is not sent), chat requests carry ART's default extra body and the client
checks the token counts of each answer, and SFT asks the server to log its metrics (`metric_logging`).

Everything that reaches our training API is ART's own code: `art.TrainableModel` registered with
`art.ServerlessBackend(base_url=..., api_key=...)` (the constructor arguments ART documents for a
self-hosted server), sampling through `model.openai_client()`, `backend.train` (0.5.23: once more with every
`experimental_config` key away from its default), `model.log`, `model.get_step`, `model.delete_checkpoints`,
`art.utils.sft.train_sft_from_file`, (0.5.23) ART's `PipelineTrainer`, and `backend.delete`. ART uploads SFT data with
W&B's real `wandb` SDK (pinned in art.txt and art-0523.txt), which the environment points at our server
(WANDB_BASE_URL, as a self-hosted user sets it; ART hands the SDK its backend's key); ART then sends our server the
`wandb-artifact:///` URL it built itself. One stand-in: for 0.5.23's PipelineTrainer, a torch-free
`art.local.backend` (see `local_backend_without_torch`). The SFT and RL job requests are watched on their way out,
unchanged. What the server holds is read back with plain HTTP (our dashboard API), for the test to check, before the
model is deleted.

    stdin  {"server": "http://host:port", "api_key": str, "base_model": str, "workdir": folder, "project": str}
    stdout one JSON object: what each call returned, for the test to check
"""

import asyncio
import json
import os
import sys
import time
import types
from importlib.metadata import version

import httpx

ART_VERSION = version("openpipe-art")
# 0.5.20 is the release that changed the wire (there is no 0.5.19).
NEW_WIRE = tuple(int(part) for part in ART_VERSION.split(".")[:3]) >= (0, 5, 20)


TASK = [(2, 3), (4, 1), (6, 2), (3, 3)]
ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def shortest_wins(choices) -> list:
    """1.0 for the shortest answer, 0.0 for the others: a group with something to learn even from a tiny model."""
    lengths = [len(choice.message.content or "") for choice in choices]
    return [float(index == lengths.index(min(lengths))) for index in range(len(choices))]


async def scored_groups(art, model, seed: int) -> list:
    """One group of four temperature-1 answers per sum. The first group rewards the shortest answer; the others
    reward the right sum, which a tiny model rarely gives, so most rewards are 0.0 (left out of 0.5.20+'s JSON)."""
    client = model.openai_client()
    groups = []
    for index, (a, b) in enumerate(TASK):
        messages = [{"role": "user", "content": f"What is {a} + {b}?"}]
        completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=messages,
            n=4,
            max_tokens=8,
            temperature=1.0,
            logprobs=True,
            seed=seed + index,
        )
        if index == 0:
            rewards = shortest_wins(completion.choices)
        else:
            rewards = [float((choice.message.content or "").strip() == str(a + b)) for choice in completion.choices]
        trajectories = [
            art.Trajectory(messages_and_choices=[*messages, choice], reward=reward)
            for choice, reward in zip(completion.choices, rewards)
        ]
        groups.append(art.TrajectoryGroup(trajectories))
    return groups


def wire_keys(groups) -> list:
    """The keys of each group and trajectory in the JSON ART sends (ServerlessBackend dumps each group with model_dump(mode="json"))."""
    dumps = [group.model_dump(mode="json") for group in groups]
    return [
        {"group": sorted(dump), "trajectories": [sorted(t) for t in dump.get("trajectories", [])]} for dump in dumps
    ]


async def train_rl(art, backend, model, out: dict) -> None:
    out["rl"] = []
    start = await model.get_step()
    for step in range(start, start + 3):
        groups = await scored_groups(art, model, seed=100 * step)
        await model.log(groups, split="val")
        result = await backend.train(model, groups, learning_rate=1e-2)
        await model.log(groups, split="train", metrics=result.metrics, step=result.step)
        out["rl"].append(
            {
                "step": result.step,
                "artifact_name": result.artifact_name,
                "metrics": result.metrics,
                "get_step": await model.get_step(),
                "rewards": [[t.reward for t in group.trajectories] for group in groups],
                "wire": wire_keys(groups),
            }
        )


async def token_counts(model) -> dict:
    """n > 1 with logprobs, checked by 0.5.20+'s client against usage.completion_tokens: from each choice's token_ids
    (ART's default extra body asks for them), then from the logprobs alone (the caller turns token ids off)."""
    client = model.openai_client()
    checked = {}
    for label, extra_body in (("token_ids", None), ("logprobs", {"return_token_ids": False})):
        completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=[{"role": "user", "content": "Count to three."}],
            n=3,
            max_tokens=6,
            temperature=1.0,
            logprobs=True,
            seed=7,
            extra_body=extra_body,
        )
        extras = [choice.model_extra or {} for choice in completion.choices]
        checked[label] = {
            "usage": completion.usage.completion_tokens,
            "art_counts": [extra.get("art_completion_tokens") for extra in extras],
            "token_ids": [len(extra.get("token_ids") or []) for extra in extras],
            "logprobs": [len(choice.logprobs.content or []) for choice in completion.choices],
        }
    return checked


async def tool_trajectory(art, model, index: int):
    """A multi-turn agent rollout with a tool: the tool call and its result, a sampled answer, a follow-up, another sampled answer."""
    client = model.openai_client()
    messages = [
        {"role": "system", "content": "Use the add tool for sums."},
        {"role": "user", "content": "What is 2 + 3?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{index}", "content": "5"},
    ]
    items = list(messages)
    for follow_up in ("And 4 + 1?", None):
        completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=messages,
            tools=[ADD_TOOL],
            max_tokens=8,
            temperature=1.0,
            logprobs=True,
            seed=40 + index,
        )
        choice = completion.choices[0]
        items.append(choice)
        messages.append(choice.message.model_dump(exclude_none=True))
        if follow_up:
            items.append({"role": "user", "content": follow_up})
            messages.append({"role": "user", "content": follow_up})
    return art.Trajectory(messages_and_choices=items, tools=[ADD_TOOL])


async def train_tools(art, backend, model, out: dict) -> None:
    trajectories = [await tool_trajectory(art, model, index) for index in range(3)]
    answers = [trajectory.messages_and_choices[-1] for trajectory in trajectories]
    for trajectory, reward in zip(trajectories, shortest_wins(answers)):
        trajectory.reward = reward
    result = await backend.train(model, [art.TrajectoryGroup(trajectories)], learning_rate=1e-2)
    out["tools"] = {
        "step": result.step,
        "metrics": result.metrics,
        "wire": wire_keys([art.TrajectoryGroup(trajectories)]),
    }


def every_key(kl_reference: dict) -> dict:
    """`backend.train` arguments that move every one of 0.5.23's 25 `experimental_config` keys off its default (the
    default: what ART sends when the argument is left out, given the others; with a KL coefficient the source defaults
    to "sample"). The three keys that name the KL reference exclude one another, in ART as here: `kl_reference` is one."""
    return {
        "learning_rate": 1e-3,
        "loss_fn": "ppo",
        "ppo": True,
        "normalize_advantages": False,
        "scale_rewards": False,
        "advantage_balance": 0.25,
        "epsilon": 0.1,
        "epsilon_high": 0.3,
        "importance_sampling_level": "sequence",
        "max_negative_advantage_importance_sampling_weight": 0.5,
        "mask_prob_ratio": True,
        "kimi_k2_tau": 0.5,
        "precalculate_logprobs": True,
        "truncated_importance_sampling": 2.0,
        "allow_training_without_logprobs": True,
        "plot_tensors": True,
        "scale_learning_rate_by_reward_std_dev": True,
        "logprob_calculation_chunk_size": 8,
        "packed_sequence_length": 32,
        "num_trajectories_learning_rate_multiplier_power": 0.5,
        "kl_penalty_coef": 0.5,
        "kl_penalty_source": "current_learner",
        **kl_reference,
    }


async def train_every_key(art, backend, model, request: dict, out: dict) -> None:
    """0.5.23's `backend.train` with every training argument away from its default, three times: the KL reference
    named by checkpoint step, by lag, then by ART's name for the checkpoint (kl_ref_adapter_path). The body ART sends
    and the job's events (read back over plain HTTP) are kept for the test."""
    jobs = backend._client.training_jobs
    create = jobs.create
    sent: list = []

    async def create_and_record(**request_body):
        job = await create(**request_body)
        sent.append({"experimental_config": dict(request_body["experimental_config"]), "job_id": job.id})
        return job

    jobs.create = create_and_record
    groups = await scored_groups(art, model, seed=900)
    out["every_key"] = []
    step = await model.get_step()
    references = (
        {"kl_penalty_reference_step": step},
        {"kl_penalty_step_lag": 1},
        {"kl_ref_adapter_path": f"{model.get_inference_name()}:step{step}"},
    )
    for kl_reference in references:
        result = await backend.train(model, groups, **every_key(kl_reference))
        events = server_get(request, f"/v1/preview/training-jobs/{sent[-1]['job_id']}/events?limit=100")["data"]
        out["every_key"].append(
            {"step": result.step, **sent[-1], "events": [{"type": e["type"], "data": e["data"]} for e in events]}
        )
    jobs.create = create


async def list_steps(backend, model) -> list:
    # ART's own paginated listing (the request delete_checkpoints walks), not ours.
    return [checkpoint.step async for checkpoint in backend._client.models.checkpoints.list(model_id=model.id)]


async def train_sft_file(backend, model, workdir: str, out: dict) -> None:
    from art.utils.sft import train_sft_from_file

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
    # Watches (and passes on unchanged) the SFT job request ART sends, to see its config on the wire.
    jobs = backend._client.sft_training_jobs
    create = jobs.create

    async def create_and_record(**request):
        out["sft_request_config"] = request.get("config")
        out["sft_training_data_url"] = request.get("training_data_url")
        return await create(**request)

    jobs.create = create_and_record
    before = await model.get_step()
    await train_sft_from_file(model, path, epochs=1, batch_size=2, peak_lr=1e-2)
    after = await model.get_step()
    checkpoints = {
        checkpoint.step: checkpoint.metrics
        async for checkpoint in backend._client.models.checkpoints.list(model_id=model.id)
    }
    out["sft"] = {"before": before, "after": after, "checkpoint_metrics": checkpoints.get(after)}


def local_backend_without_torch() -> None:
    """ART 0.5.23's PipelineTrainer imports `art.local.backend` only to ask `isinstance(backend, LocalBackend)`
    (`PipelineTrainer._validate_backend_support`, art/pipeline_trainer/trainer.py), and that module imports torch and
    transformers at its top (art/local/backend.py), which only ART's GPU extras install: with the base install pinned
    in art-0523.txt the trainer cannot start (ModuleNotFoundError: torch; checked again with these pins). For a
    ServerlessBackend the answer is no, which a stand-in module without torch gives; ART's own modules are untouched."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        module = types.ModuleType("art.local.backend")
        module.LocalBackend = type("LocalBackend", (), {})
        sys.modules["art.local.backend"] = module


async def pipeline(art, backend, model, out: dict) -> None:
    """ART 0.5.20+'s PipelineTrainer as its own example drives it: rollouts, two training steps, and an eval of the
    starting checkpoint by its pinned step name. (Evals it schedules after a step may be dropped when `max_steps` stops
    the trainer, ART's own behaviour, so only the first is certain to run.)"""
    from art.pipeline_trainer import PipelineRuntimeConfig, PipelineTrainer

    local_backend_without_torch()

    async def rollout(model, scenario, _config):
        messages = [{"role": "user", "content": scenario["prompt"]}]
        completion = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(), messages=messages, n=4, max_tokens=8, temperature=1.0, logprobs=True
        )
        rewards = shortest_wins(completion.choices)
        return art.TrajectoryGroup(
            [art.Trajectory(messages_and_choices=[*messages, c], reward=r) for c, r in zip(completion.choices, rewards)]
        )

    async def evaluate(model, step, _config):
        client = model.openai_client()
        trajectories = []
        for a, b in TASK[:2]:
            messages = [{"role": "user", "content": f"What is {a} + {b}?"}]
            completion = await client.chat.completions.create(
                model=model.get_inference_name(step), messages=messages, max_tokens=8, temperature=0
            )
            choice = completion.choices[0]
            trajectories.append(
                art.Trajectory(
                    messages_and_choices=[*messages, choice],
                    reward=float((choice.message.content or "").strip() == str(a + b)),
                )
            )
        return trajectories

    trainer = PipelineTrainer(
        model=model,
        backend=backend,
        rollout_fn=rollout,
        scenarios=[{"prompt": f"What is {a} + {b}?"} for a, b in TASK * 4],
        config=None,
        eval_fn=evaluate,
        pipeline=PipelineRuntimeConfig(num_rollout_workers=2, min_batch_size=2, max_batch_size=2),
        learning_rate=1e-2,
        max_steps=2,
        eval_every_n_steps=1,
        eval_at_start=True,
        log_interval_seconds=3600,
    )
    before = await model.get_step()
    await trainer.train(handle_signals=False)
    out["pipeline"] = {
        "before": before,
        "after": await model.get_step(),
        "eval_steps": sorted(trainer.state.completed_eval_steps),
    }


def server_get(request: dict, path: str):
    """Plain HTTP to our server (not ART) with the session's key."""
    response = httpx.get(f"{request['server']}{path}", headers={"authorization": f"Bearer {request['api_key']}"})
    response.raise_for_status()
    return response.json()


def server_view(request: dict, model_id: str) -> dict:
    """What our server holds for the model (our dashboard API): its record, run history and trained trajectories."""

    def get(path: str):
        return server_get(request, path)

    base = f"/v1/dashboard/models/{model_id}"
    trajectories = get(f"{base}/trajectories?split=train&limit=200")["data"]
    return {
        "name": get(f"/v1/preview/models/{model_id}")["name"],
        "history": [
            {"step": row["step"], "source": row["source"], "metrics": row["metrics"]}
            for row in get(f"{base}/metrics?limit=200")["data"]
        ],
        "train_trajectories": [
            {"step": row["step"], "reward": row["reward"], "detail": get(f"{base}/trajectories/{row['id']}")["data"]}
            for row in trajectories
        ],
    }


async def timed(out: dict, label: str, work):
    started = time.monotonic()
    result = await work
    out["timings"][label] = round(time.monotonic() - started, 1)
    return result


async def main() -> dict:
    request = json.load(sys.stdin)
    import wandb

    out: dict = {"art_version": ART_VERSION, "wandb_version": wandb.__version__, "timings": {}}
    import art
    from art.serverless import ServerlessBackend

    backend = ServerlessBackend(api_key=request["api_key"], base_url=f"{request['server']}/v1")
    # 0.5.20+ requires a run name, and names the model on our server (and for inference) by it.
    names = {"name": "adder", **({"run_name": "adder-run-1"} if NEW_WIRE else {})}
    common = {"project": request["project"], "base_model": request["base_model"], "base_path": request["workdir"]}
    model = art.TrainableModel(**names, **common)
    await model.register(backend)
    again = art.TrainableModel(**names, **common)
    await again.register(backend)
    out["storage_name"] = model._storage_name() if NEW_WIRE else model.name
    out["register"] = {
        "id": model.id,
        "entity": model.entity,
        "run_id": model.run_id,
        "again_id": again.id,
        "inference_name": model.get_inference_name(),
    }
    out["initial_step"] = await model.get_step()

    if NEW_WIRE:
        out["token_counts"] = await timed(out, "token_counts", token_counts(model))
    await timed(out, "rl", train_rl(art, backend, model, out))
    await timed(out, "tools", train_tools(art, backend, model, out))
    out["steps_before_delete"] = await list_steps(backend, model)
    await model.delete_checkpoints(best_checkpoint_metric="val/reward")
    out["steps_after_delete"] = await list_steps(backend, model)
    await timed(out, "sft", train_sft_file(backend, model, request["workdir"], out))
    if NEW_WIRE:
        await timed(out, "every_key", train_every_key(art, backend, model, request, out))
        await timed(out, "pipeline", pipeline(art, backend, model, out))
    answer = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(),
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        max_tokens=8,
        temperature=0,
    )
    out["answer_after_training"] = answer.choices[0].message.content
    out["server"] = server_view(request, model.id)

    await backend.delete(model)
    try:
        await model.get_step()
        out["after_delete"] = "still there"
    except Exception as error:  # ART raises the openai SDK's error for our 404
        out["after_delete"] = type(error).__name__
    await backend.close()
    return out


if __name__ == "__main__":
    # ART's SFT upload needs no W&B key in the environment (ServerlessBackend gives the SDK its own key); with one, ART
    # would also open a W&B run of its own to log every metric, which is not what this session is about.
    os.environ.pop("WANDB_API_KEY", None)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch a price list at import
    # ART prints progress and the SDK its notices, some at exit through the original stdout: the result goes to a
    # copy of file descriptor 1, and descriptor 1 itself to stderr for everything else.
    result_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    json.dump(asyncio.run(main()), result_stream)
    result_stream.flush()
