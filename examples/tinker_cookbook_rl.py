"""Example 4: a tinker-cookbook recipe against this server, with the official `tinker` SDK.

Runs Thinking Machines' RL recipe `tinker_cookbook.recipes.math_rl.train` on the cookbook's own arithmetic
environment (it makes its problems and scores the answers itself), unmodified: the recipe is configured only through
its command-line fields (`base_url=` this server, `model_name=` one of its base models) and the SDK's environment
(TINKER_API_KEY: this server's key behind the `tml-` prefix the SDK insists on). This script only prepares a run
folder (the data-free recipe needs the tokenizer, which the cookbook loads from a local folder named like the model:
a link to this checkout's models/), starts the recipe, and prints the reward per batch from its metrics.jsonl.

    .venv-tinker/bin/python examples/tinker_cookbook_rl.py

Needs `tinker` and `tinker-cookbook[math-rl]` (pinned in scripts/python/tinker.txt).
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import connect  # noqa: E402


def prepare(run_dir: str, base_model: str) -> None:
    """`builtin/<name>` under the run folder is a link to models/<name>: the tokenizer folder the cookbook loads."""
    owner, name = base_model.split("/")
    os.makedirs(os.path.join(run_dir, owner), exist_ok=True)
    link = os.path.join(run_dir, owner, name)
    if not os.path.exists(link):
        os.symlink(os.path.join(connect.REPO, "models", name), link)


def main() -> None:
    cli = connect.parser(__doc__.split("\n\n")[0])
    cli.add_argument("--base-model", default=connect.DEFAULT_BASE_MODEL)
    cli.add_argument(
        "--run-dir",
        default=os.path.join(connect.REPO, "data", "cookbook-runs", time.strftime("arithmetic-%Y%m%d-%H%M%S")),
    )
    cli.add_argument("--steps", type=int, default=8)
    cli.add_argument("--learning-rate", type=float, default=1e-3)
    args = connect.parse(cli)

    prepare(args.run_dir, args.base_model)
    log_path = os.path.join(args.run_dir, "log")
    recipe = [
        sys.executable,
        "-m",
        "tinker_cookbook.recipes.math_rl.train",
        f"base_url={args.url}",
        f"model_name={args.base_model}",
        "renderer_name=qwen3_instruct",
        "lora_rank=8",
        "env=arithmetic",
        "group_size=4",
        "groups_per_batch=8",
        "max_tokens=5",
        f"max_steps={args.steps}",
        f"learning_rate={args.learning_rate}",
        f"log_path={log_path}",
        "behavior_if_log_dir_exists=delete",
        "eval_every=0",
        "save_every=0",
    ]
    env = {
        **os.environ,
        "TINKER_API_KEY": f"tml-{args.key}",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    print(" ".join(recipe[1:]), flush=True)
    started = time.monotonic()
    subprocess.run(recipe, cwd=args.run_dir, env=env, check=True)
    seconds = time.monotonic() - started

    with open(os.path.join(log_path, "metrics.jsonl")) as f:
        rows = [row for row in map(json.loads, f) if "progress/batch" in row]
    rewards = [row["env/all/reward/total"] for row in rows]
    print("\nbatch  reward (mean over 32 answers)")
    for row, reward in zip(rows, rewards):
        print(f"{row['progress/batch']:>5}  {reward:.3f}")
    with open(os.path.join(log_path, "checkpoints.jsonl")) as f:
        final = [json.loads(line) for line in f if line.strip()][-1]
    print(
        f"\n{len(rows)} batches in {seconds:.0f} s; reward {rewards[0]:.3f} -> {rewards[-1]:.3f}; final sampler weights {final['sampler_path']}"
    )
    connect.write_summary(
        args,
        {
            "seconds": round(seconds, 1),
            "rewards": rewards,
            "reward_before": rewards[0],
            "reward_after": rewards[-1],
            "final": final,
        },
    )


if __name__ == "__main__":
    main()
