"""Example 2: supervised fine-tuning with OpenPipe ART from a JSONL file.

examples/data/glorpistan.jsonl teaches SmolLM2-135M-Instruct a made-up fact (the capital of Glorpistan is Vexomir)
in five phrasings. The script asks a phrasing that is not in the file before and after training, at temperature 0,
and prints both answers.

    .venv-art/bin/python examples/sft_fact_art.py

ART's `train_sft_from_file` uploads the file with W&B's `wandb` SDK and then starts our SFT job; the script points
that SDK at this server (WANDB_BASE_URL, WANDB_API_KEY), so the upload lands in the server's artifact store.
"""

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import connect  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "glorpistan.jsonl")
HELD_OUT_QUESTION = "Glorpistan has a capital. What is it called?"


async def ask(model, question: str) -> str:
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=[{"role": "user", "content": question}], max_tokens=24, temperature=0
    )
    return completion.choices[0].message.content or ""


async def main() -> None:
    cli = connect.parser(__doc__.split("\n\n")[0])
    cli.add_argument("--base-model", default=connect.DEFAULT_BASE_MODEL)
    cli.add_argument("--project", default="examples")
    cli.add_argument("--name", default=time.strftime("glorpistan-%Y%m%d-%H%M%S"))
    cli.add_argument("--data", default=DATA, help='a JSONL file of {"messages": [...]} lines')
    cli.add_argument("--epochs", type=int, default=1)
    cli.add_argument("--batch-size", type=int, default=4)
    cli.add_argument("--learning-rate", type=float, default=2e-3)
    cli.add_argument("--question", default=HELD_OUT_QUESTION)
    args = connect.parse(cli)
    # ART uploads the file with the wandb SDK: to this server, as this key's entity.
    os.environ["WANDB_BASE_URL"] = args.url
    os.environ["WANDB_API_KEY"] = args.key

    import art
    from art.serverless import ServerlessBackend
    from art.utils.sft import train_sft_from_file

    started = time.monotonic()
    backend = ServerlessBackend(api_key=args.key, base_url=f"{args.url}/v1")
    model = art.TrainableModel(name=args.name, project=args.project, base_model=args.base_model)
    await model.register(backend)
    print(f"model {model.entity}/{args.project}/{args.name} ({model.id}) on {args.base_model}", flush=True)

    before = await ask(model, args.question)
    await train_sft_from_file(
        model,
        args.data,
        epochs=args.epochs,
        batch_size=args.batch_size,
        peak_lr=args.learning_rate,
        schedule_type="constant",
    )
    step = await model.get_step()
    after = await ask(model, args.question)
    seconds = time.monotonic() - started
    print(f"\nQ: {args.question}\n  before (step 0): {before!r}\n  after (step {step}):  {after!r}\n")
    print(f"{seconds:.0f} s; chat with it as {model.entity}/{args.project}/{args.name}:step{step}")
    connect.write_summary(
        args,
        {
            "model_id": model.id,
            "model": f"{model.entity}/{args.project}/{args.name}",
            "step": step,
            "seconds": round(seconds, 1),
            "question": args.question,
            "before": before,
            "after": after,
        },
    )
    await backend.close()


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch a price list at import
    asyncio.run(main())
