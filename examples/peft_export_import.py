"""Example 5: take a checkpoint away as a PEFT adapter, and bring in an adapter trained elsewhere.

Export: downloads a checkpoint of one of your models (GET /v1/preview/models/{id}/checkpoints/{step}/adapter, a tar of
adapter_config.json and adapter_model.safetensors), loads it with `peft.PeftModel.from_pretrained` onto the base
model in transformers, and prints the greedy answer of both transformers and the server to the same question.
Import: trains a small LoRA adapter here with transformers + peft on a made-up fact, uploads it
(POST /v1/preview/models/import) as a new model, and asks the server that model the question.

    .venv-test/bin/python examples/peft_export_import.py --model local/examples/glorpistan-…:step1

Needs torch, transformers and peft (the pins are in scripts/python/reference.txt). The base model's weights come
from this checkout's models/ folder when it has them, else from the Hugging Face hub (--base-path to choose).
"""

import io
import json
import os
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import connect  # noqa: E402

HUB_IDS = {"builtin/smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct"}
IMPORT_QUESTION = "What is the password of the blue door?"
IMPORT_ANSWER = "The password of the blue door is Zembrolin."


def request(args, method: str, route: str, body: bytes | None = None, content_type: str = "application/json"):
    headers = {"authorization": f"Bearer {args.key}", "content-type": content_type}
    with urllib.request.urlopen(
        urllib.request.Request(f"{args.url}{route}", data=body, method=method, headers=headers), timeout=600
    ) as response:
        data = response.read()
    return json.loads(data) if response.headers.get_content_type() == "application/json" else data


def server_answer(args, model: str, question: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": 24, "temperature": 0}
    return request(args, "POST", "/v1/chat/completions", json.dumps(body).encode())["choices"][0]["message"]["content"]


def base_path(args, base_model: str) -> str:
    if args.base_path:
        return args.base_path
    local = os.path.join(connect.REPO, "models", base_model.split("/")[-1])
    return local if os.path.exists(os.path.join(local, "config.json")) else HUB_IDS.get(base_model, base_model)


def greedy(model, tokenizer, question: str) -> str:
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=24, do_sample=False)
    return tokenizer.decode(output[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)


def export(args, tokenizer, base) -> dict:
    """The checkpoint's adapter, downloaded, unpacked and loaded by PEFT; transformers' answer beside the server's."""
    name, _, step = args.model.partition(":step")
    record = request(args, "GET", f"/v1/preview/models/by-name/{name}")
    step = (
        int(step)
        if step
        else max(c["step"] for c in request(args, "GET", f"/v1/preview/models/{record['id']}/checkpoints")["data"])
    )
    archive = request(
        args, "GET", f"/v1/preview/models/{record['id']}/checkpoints/{step}/adapter", content_type="application/x-tar"
    )
    folder = os.path.join(args.out, f"{record['name']}-step{step}")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    print(f"exported {name}:step{step} to {folder}: {sorted(os.listdir(folder))}")
    adapted = PeftModel.from_pretrained(base, folder).eval()
    ours = greedy(adapted, tokenizer, args.question)
    theirs = server_answer(args, f"{name}:step{step}", args.question)
    adapted.unload()  # the base model back without the adapter, for the import
    print(f"Q: {args.question}\n  transformers+peft: {ours!r}\n  server:            {theirs!r}")
    return {"model": f"{name}:step{step}", "folder": folder, "transformers_answer": ours, "server_answer": theirs}


def train_elsewhere(args, tokenizer, base) -> str:
    """A LoRA adapter trained here, with peft and a plain torch loop, on one made-up fact; saved as PEFT saves it."""
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0)
    model = get_peft_model(base, config)
    conversation = [{"role": "user", "content": IMPORT_QUESTION}, {"role": "assistant", "content": IMPORT_ANSWER}]
    ids = tokenizer.apply_chat_template(conversation, return_tensors="pt", return_dict=True)["input_ids"]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.import_learning_rate)
    for step in range(args.import_steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"  local training step {step + 1}: loss {loss.item():.3f}", flush=True)
    folder = os.path.join(args.out, "trained-elsewhere")
    model.save_pretrained(folder)
    return folder


def import_adapter(args, folder: str) -> dict:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for file in ("adapter_config.json", "adapter_model.safetensors"):
            tar.add(os.path.join(folder, file), arcname=file)
    query = urllib.parse.urlencode({"project": args.project, "name": args.import_name, "base_model": args.base_model})
    model = request(args, "POST", f"/v1/preview/models/import?{query}", buffer.getvalue(), "application/x-tar")
    name = f"{model['entity']}/{model['project']}/{model['name']}"
    answer = server_answer(args, name, IMPORT_QUESTION)
    print(f"imported as {name} ({model['id']})\nQ: {IMPORT_QUESTION}\n  server, imported adapter: {answer!r}")
    return {"model_id": model["id"], "model": name, "answer": answer}


def main() -> None:
    cli = connect.parser(__doc__.split("\n\n")[0])
    cli.add_argument("--model", help="the checkpoint to export: entity/project/name[:stepN] (default: skip the export)")
    cli.add_argument("--question", default="Glorpistan has a capital. What is it called?")
    cli.add_argument("--base-model", default=connect.DEFAULT_BASE_MODEL, help="the base model of the imported adapter")
    cli.add_argument("--base-path", help="where transformers loads the base model from (a folder or a hub id)")
    cli.add_argument("--project", default="examples")
    cli.add_argument("--import-name", default=time.strftime("imported-%Y%m%d-%H%M%S"))
    cli.add_argument("--import-steps", type=int, default=8)
    cli.add_argument("--import-learning-rate", type=float, default=4e-3)
    cli.add_argument("--out", default=tempfile.mkdtemp(prefix="adapters-"), help="where the adapters are written")
    args = connect.parse(cli)

    started = time.monotonic()
    source = base_path(args, args.base_model)
    tokenizer = AutoTokenizer.from_pretrained(source)
    base = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    summary = {"export": export(args, tokenizer, base) if args.model else None}
    summary["import"] = import_adapter(args, train_elsewhere(args, tokenizer, base))
    summary["seconds"] = round(time.monotonic() - started, 1)
    connect.write_summary(args, summary)


if __name__ == "__main__":
    main()
