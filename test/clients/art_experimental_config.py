"""The `experimental_config` bodies OpenPipe ART's ServerlessBackend sends, built by ART's own code.

For each case of CASES this calls ART's real `ServerlessBackend.train(model, groups, **kwargs)` and
captures the `experimental_config` it hands its HTTP client for `POST /preview/training-jobs` (the
request is stopped there: nothing is sent). test/fixtures/art-0.5.23-experimental-config.json is this
script's output under openpipe-art 0.5.23, so test/art-config.test.ts sends exactly ART's bodies; that
test runs this script again with $ART_0523_PYTHON, when there is one, and compares.

    stdin  {} (nothing is read from it)
    stdout {"art_version": str, "cases": {name: {"kwargs": {...}, "experimental_config": {...}}}}
"""

import asyncio
import importlib.metadata
import json
import sys

import art
from art.serverless.backend import ServerlessBackend

# One non-default value per ART training argument; the KL keys come with the coefficient that puts them to use.
KL = {"kl_penalty_coef": 0.5}
CASES = {
    "default": {},
    "learning_rate": {"learning_rate": 1e-3},
    "loss_fn": {"loss_fn": "ppo"},
    "ppo": {"ppo": True},
    "normalize_advantages": {"normalize_advantages": False},
    "scale_rewards": {"scale_rewards": False},
    "advantage_balance": {"advantage_balance": 0.5},
    "epsilon": {"epsilon": 0.05},
    "epsilon_high": {"epsilon_high": 0.05},
    "epsilon_both": {"epsilon": 0.05, "epsilon_high": 0.05},
    "mask_prob_ratio": {"epsilon": 0.05, "epsilon_high": 0.05, "mask_prob_ratio": True},
    "importance_sampling_level": {"importance_sampling_level": "sequence"},
    "max_negative_advantage_importance_sampling_weight": {"max_negative_advantage_importance_sampling_weight": 0.5},
    "kimi_k2_tau": {"kimi_k2_tau": 0.5},
    "precalculate_logprobs": {"precalculate_logprobs": True},
    "truncated_importance_sampling": {"precalculate_logprobs": True, "truncated_importance_sampling": 0.5},
    "truncated_importance_sampling_alone": {"truncated_importance_sampling": 0.5},
    "allow_training_without_logprobs": {"allow_training_without_logprobs": True},
    "kl_penalty_coef": KL,
    "kl_penalty_source": {**KL, "kl_penalty_source": "current_learner"},
    "kl_penalty_reference_step": {**KL, "kl_penalty_reference_step": 1},
    "kl_penalty_step_lag": {**KL, "kl_penalty_step_lag": 1},
    "kl_ref_adapter_path": {**KL, "kl_ref_adapter_path": "wandb-artifact:///local/art-config/source:step1"},
    "logprob_calculation_chunk_size": {"logprob_calculation_chunk_size": 8},
    "num_trajectories_learning_rate_multiplier_power": {"num_trajectories_learning_rate_multiplier_power": 0.5},
    "packed_sequence_length": {"packed_sequence_length": 32},
    "plot_tensors": {"plot_tensors": True},
    "scale_learning_rate_by_reward_std_dev": {"scale_learning_rate_by_reward_std_dev": True},
}


class Captured(Exception):
    def __init__(self, config):
        self.config = config


async def body_for(kwargs: dict) -> dict:
    backend = ServerlessBackend(api_key="not-sent", base_url="http://127.0.0.1:9/v1")

    async def create(*, model_id, trajectory_groups, experimental_config=None):
        raise Captured(experimental_config)

    backend._client.training_jobs.create = create
    model = art.TrainableModel(name="source", project="art-config", base_model="builtin/tiny-chat", run_name="source")
    model.id, model.entity = "model-id", "local"
    group = art.TrajectoryGroup(
        [art.Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=r) for r in (0.0, 1.0)]
    )
    try:
        await backend.train(model, [group], **kwargs)
    except Captured as captured:
        return dict(captured.config)
    raise RuntimeError("ServerlessBackend.train sent no training job")


async def main() -> None:
    sys.stdin.read()
    cases = {name: {"kwargs": kwargs, "experimental_config": await body_for(kwargs)} for name, kwargs in CASES.items()}
    print(
        json.dumps(
            {"art_version": importlib.metadata.version("openpipe-art"), "cases": cases}, indent=1, sort_keys=True
        )
    )


asyncio.run(main())
