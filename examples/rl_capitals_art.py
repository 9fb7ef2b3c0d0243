"""Example 1: reinforcement learning with OpenPipe ART's ServerlessBackend on SmolLM2-135M-Instruct.

The task: "What is the capital of <country>?" answered within 12 tokens; the reward, computed here in code, is 1.0
when the answer names the capital and 0.0 otherwise. At temperature 1 the base model names it about half the time
and rambles otherwise; a few RL steps teach it to answer first. Training uses one set of countries; the before/after
table is the mean reward of fresh samples (seeds never trained on) on countries it never trains on. Each of those
held-out evaluations is logged with split "val" (POST /v1/preview/models/{id}/log), so the dashboard's model page
charts the val curve beside the train reward that each training step records.

    .venv-art/bin/python examples/rl_capitals_art.py            # against `npm start` on this machine

Everything that trains is ART's own code: `art.TrainableModel` registered with `art.ServerlessBackend`, sampling with
`model.openai_client()`, `backend.train`.
"""

import asyncio
import math
import os
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import connect  # noqa: E402

TRAIN = [
    ("France", "Paris"),
    ("Italy", "Rome"),
    ("Japan", "Tokyo"),
    ("Germany", "Berlin"),
    ("Spain", "Madrid"),
    ("England", "London"),
    ("Russia", "Moscow"),
    ("Egypt", "Cairo"),
]
HELD_OUT = [
    ("China", "Beijing"),
    ("Greece", "Athens"),
    ("Portugal", "Lisbon"),
    ("Austria", "Vienna"),
    ("Ireland", "Dublin"),
    ("Poland", "Warsaw"),
]
MAX_TOKENS = 12


def question(country: str) -> list:
    return [{"role": "user", "content": f"What is the capital of {country}?"}]


def reward(choice, city: str) -> float:
    """The whole reward function: does the answer name the city?"""
    return float(city.lower() in (choice.message.content or "").lower())


async def rollouts(art, model, pairs, samples: int, seed: int) -> list:
    """One group of `samples` temperature-1 answers per country, each scored."""
    client = model.openai_client()
    groups = []
    for index, (country, city) in enumerate(pairs):
        messages = question(country)
        completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=messages,
            n=samples,
            max_tokens=MAX_TOKENS,
            temperature=1.0,
            logprobs=True,
            seed=seed + index,
        )
        trajectories = [
            art.Trajectory(messages_and_choices=[*messages, choice], reward=reward(choice, city))
            for choice in completion.choices
        ]
        groups.append(art.TrajectoryGroup(trajectories))
    return groups


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


async def evaluate(art, model, args, step: int) -> dict:
    """Fresh samples on the held-out countries (the same evaluation seeds every time, never used for training),
    logged on the server with split "val" so the dashboard charts them."""
    groups = await rollouts(art, model, HELD_OUT, args.eval_samples, seed=1_000_000)
    body = {"split": "val", "trajectory_groups": [group.model_dump(mode="json") for group in groups]}
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(
            f"{args.url}/v1/preview/models/{model.id}/log", json=body, headers={"authorization": f"Bearer {args.key}"}
        )
        response.raise_for_status()
    per_country = {country: mean(t.reward for t in group.trajectories) for (country, _), group in zip(HELD_OUT, groups)}
    examples = {
        country: group.trajectories[0].messages_and_choices[-1].message.content
        for (country, _), group in zip(HELD_OUT, groups)
    }
    print(f"  step {step}: held-out reward {mean(per_country.values()):.2f}", flush=True)
    return {"step": step, "reward": mean(per_country.values()), "per_country": per_country, "examples": examples}


def print_table(before: dict, after: dict) -> None:
    print(f"\nHeld-out countries, mean reward of {len(HELD_OUT)} x fresh samples (temperature 1):")
    print(f"  {'country':<10} {'before':>7} {'after':>7}   answer after training")
    for country, _ in HELD_OUT:
        answer = " ".join((after["examples"][country] or "").split())
        print(
            f"  {country:<10} {before['per_country'][country]:>7.2f} {after['per_country'][country]:>7.2f}   {answer!r}"
        )
    print(f"  {'mean':<10} {before['reward']:>7.2f} {after['reward']:>7.2f}")


async def main() -> None:
    cli = connect.parser(__doc__.split("\n\n")[0])
    cli.add_argument("--base-model", default=connect.DEFAULT_BASE_MODEL)
    cli.add_argument("--project", default="examples")
    cli.add_argument(
        "--name", default=time.strftime("capitals-%Y%m%d-%H%M%S"), help="a new name starts from the base model"
    )
    cli.add_argument("--steps", type=int, default=6)
    cli.add_argument("--samples", type=int, default=8, help="answers per training country and step")
    cli.add_argument("--eval-samples", type=int, default=8, help="answers per held-out country and evaluation")
    cli.add_argument("--eval-every", type=int, default=3)
    cli.add_argument("--learning-rate", type=float, default=2e-3)
    args = connect.parse(cli)

    import art
    from art.serverless import ServerlessBackend

    started = time.monotonic()
    backend = ServerlessBackend(api_key=args.key, base_url=f"{args.url}/v1")
    model = art.TrainableModel(name=args.name, project=args.project, base_model=args.base_model)
    await model.register(backend)
    print(f"model {model.entity}/{args.project}/{args.name} ({model.id}) on {args.base_model}", flush=True)

    evaluations = [await evaluate(art, model, args, step=await model.get_step())]
    train_rewards = []
    for _ in range(args.steps):
        step_started = time.monotonic()
        groups = await rollouts(art, model, TRAIN, args.samples, seed=10_000 * (len(train_rewards) + 1))
        train_rewards.append(mean(t.reward for group in groups for t in group.trajectories))
        result = await backend.train(model, groups, learning_rate=args.learning_rate)
        loss = result.metrics.get("loss/train", float("nan"))
        learned = f"loss {loss:.4f}" if math.isfinite(loss) else "every group's answers scored alike: nothing to learn"
        print(
            f"step {result.step}: train reward {train_rewards[-1]:.2f}, {learned} ({time.monotonic() - step_started:.0f} s)",
            flush=True,
        )
        if result.step % args.eval_every == 0 or len(train_rewards) == args.steps:
            evaluations.append(await evaluate(art, model, args, step=result.step))

    before, after = evaluations[0], evaluations[-1]
    print_table(before, after)
    seconds = time.monotonic() - started
    print(
        f"\nheld-out reward {before['reward']:.2f} -> {after['reward']:.2f} in {seconds:.0f} s; chat with it as {model.entity}/{args.project}/{args.name}:step{after['step']}"
    )
    connect.write_summary(
        args,
        {
            "model_id": model.id,
            "model": f"{model.entity}/{args.project}/{args.name}",
            "step": after["step"],
            "seconds": round(seconds, 1),
            "reward_before": before["reward"],
            "reward_after": after["reward"],
            "train_rewards": train_rewards,
            "evaluations": evaluations,
        },
    )
    await backend.close()


if __name__ == "__main__":
    os.environ.pop("WANDB_API_KEY", None)  # with a W&B key, ART would also log to W&B's servers
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch a price list at import
    asyncio.run(main())
