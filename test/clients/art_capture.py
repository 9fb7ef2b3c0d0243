"""ART 0.5.23's own trajectory capture against our server, for test/art-client.test.ts.

A user of ART 0.5.20+ wraps each rollout in `with art.Trajectory() as trajectory:` and calls the model through its
clients; ART records every HTTP exchange they make (request and response as sent and received) and sends the
trajectory in its `exchanges` form. Here each API this server serves (the kinds listed in the request) gets a group
of four two-turn rollouts through `model.openai_client()` (or the `anthropic` SDK for Messages), captured so, logged
(`model.log(split="val")` for ART's local history, ART's own client for our `/log`) and trained with `backend.train`;
then a group mixing captured and legacy trajectories trains. Rewards are set by position (1.0 for the first rollout,
0.0 for the others), so every trajectory has an advantage whatever the tiny model samples. What the server then holds
(trajectories, their conversations and trained tokens) is read back with plain HTTP (our dashboard API), for the test
to compare with the ids each response carried.

    stdin  {"server": url, "api_key": str, "base_model": str, "workdir": folder, "project": str, "kinds": [str]}
    stdout one JSON object: each group's trajectories as ART sent them, the training results, and the server's view
"""

import asyncio
import json
import os
import sys

import httpx

REWARDS = [1.0, 0.0, 0.0, 0.0]


async def chat_rollout(art, model, index: int):
    client = model.openai_client()
    messages = [{"role": "user", "content": f"Name {index + 2} colours."}]
    with art.Trajectory() as trajectory:
        for follow_up in ("And two more?", None):
            completion = await client.chat.completions.create(
                model=model.get_inference_name(),
                messages=messages,
                max_tokens=6,
                temperature=1.0,
                logprobs=True,
                seed=index,
            )
            if follow_up:
                messages += [completion.choices[0].message.model_dump(exclude_none=True)]
                messages += [{"role": "user", "content": follow_up}]
    return trajectory


async def completions_rollout(art, model, index: int):
    """Two completions, the second's prompt continuing the first's text, as a raw-prompt agent does. ART's client asks
    for the sampler's evidence on chat completions only; on the other APIs the rollout asks (`return_token_ids`)."""
    client = model.openai_client()
    prompt = f"Story {index}: once upon a time"
    with art.Trajectory() as trajectory:
        for _ in range(2):
            completion = await client.completions.create(
                model=model.get_inference_name(),
                prompt=prompt,
                max_tokens=6,
                temperature=1.0,
                logprobs=1,
                seed=index,
                extra_body={"return_token_ids": True},
            )
            prompt += completion.choices[0].text + " Then"
    return trajectory


async def responses_rollout(art, model, index: int):
    client = model.openai_client()
    items = [{"role": "user", "content": f"Name {index + 2} colours."}]
    with art.Trajectory() as trajectory:
        for follow_up in ("And two more?", None):
            response = await client.responses.create(
                model=model.get_inference_name(),
                input=items,
                max_output_tokens=6,
                temperature=1.0,
                extra_body={"return_token_ids": True},
            )
            if follow_up:
                items += [item.model_dump(exclude_none=True) for item in response.output]
                items += [{"role": "user", "content": follow_up}]
    return trajectory


async def messages_rollout(art, model, index: int, request: dict):
    import anthropic

    client = anthropic.AsyncAnthropic(base_url=request["server"], api_key=request["api_key"])
    messages = [{"role": "user", "content": f"Name {index + 2} colours."}]
    with art.Trajectory() as trajectory:
        for follow_up in ("And two more?", None):
            message = await client.messages.create(
                model=model.get_inference_name(),
                messages=messages,
                max_tokens=6,
                extra_body={"return_token_ids": True},
            )
            if follow_up:
                messages += [{"role": "assistant", "content": [block.model_dump() for block in message.content]}]
                messages += [{"role": "user", "content": follow_up}]
    return trajectory


async def captured_group(art, model, kind: str, request: dict):
    trajectories = []
    for index, reward in enumerate(REWARDS):
        if kind == "chat_completions":
            trajectory = await chat_rollout(art, model, index)
        elif kind == "completions":
            trajectory = await completions_rollout(art, model, index)
        elif kind == "responses":
            trajectory = await responses_rollout(art, model, index)
        else:
            trajectory = await messages_rollout(art, model, index, request)
        trajectory.reward = reward
        trajectories.append(trajectory)
    return art.TrajectoryGroup(trajectories)


async def legacy_trajectory(art, model, index: int):
    messages = [{"role": "user", "content": f"Name {index + 2} animals."}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_tokens=6, temperature=1.0, logprobs=True, seed=index
    )
    return art.Trajectory(messages_and_choices=[*messages, completion.choices[0]])


async def train(backend, model, group, out: list, label: str) -> None:
    # `model.log` writes ART's local history (and W&B); the server's /log gets the group through ART's own client.
    await model.log([group], split="val")
    await backend._client.models.log(model_id=model.id, trajectory_groups=[group], split="val")
    result = await backend.train(model, [group], learning_rate=1e-2)
    out.append(
        {
            "label": label,
            "step": result.step,
            "loss": result.metrics.get("loss/train"),
            "sent": group.model_dump(mode="json"),
        }
    )


def server_view(request: dict, model_id: str) -> list:
    headers = {"authorization": f"Bearer {request['api_key']}"}
    base = f"{request['server']}/v1/dashboard/models/{model_id}"
    rows = httpx.get(f"{base}/trajectories?split=train&limit=200", headers=headers).json()["data"]
    return [httpx.get(f"{base}/trajectories/{row['id']}", headers=headers).json() for row in rows]


async def main() -> dict:
    request = json.load(sys.stdin)
    import art
    from art.serverless import ServerlessBackend

    backend = ServerlessBackend(api_key=request["api_key"], base_url=f"{request['server']}/v1")
    model = art.TrainableModel(
        name="capture",
        run_name="capture-run",
        project=request["project"],
        base_model=request["base_model"],
        base_path=request["workdir"],
    )
    await model.register(backend)
    out: dict = {"model_id": model.id, "trained": []}
    for kind in request["kinds"]:
        group = await captured_group(art, model, kind, request)
        await train(backend, model, group, out["trained"], kind)
    captured = (await captured_group(art, model, "chat_completions", request)).trajectories[:2]
    legacy = [await legacy_trajectory(art, model, index) for index in range(2)]
    for trajectory, reward in zip(captured + legacy, REWARDS):
        trajectory.reward = reward
    await train(backend, model, art.TrajectoryGroup(captured + legacy), out["trained"], "mixed")
    out["server"] = server_view(request, model.id)
    await backend.close()
    return out


if __name__ == "__main__":
    os.environ.pop("WANDB_API_KEY", None)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    result_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    json.dump(asyncio.run(main()), result_stream)
    result_stream.flush()
