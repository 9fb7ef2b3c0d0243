"""Example 3: a multi-turn, tool-using agent loop with the openai SDK against a trained checkpoint.

The agent answers questions about countries with two tools it calls through chat completions: `lookup_capital` and
`lookup_population`. Each user turn starts with `tool_choice="required"` (the server constrains the answer to a
valid call, so even a 135M model calls a tool correctly), the script runs the call and sends the result back,
and the model goes on with `tool_choice="auto"` until it answers in words. A second user turn continues the same
conversation. Any model name works: a checkpoint by `entity/project/name:stepN` (e.g. the one example 1 printed),
a model's latest step by its name, or a base model.

    .venv-art/bin/python examples/tool_agent_openai.py --model local/examples/capitals-…:step6

Only the `openai` package is needed (any 1.x or 2.x; `pip install openai`).
"""

import json
import os
import sys
import time

from openai import OpenAI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import connect  # noqa: E402

CAPITALS = {"portugal": "Lisbon", "austria": "Vienna", "france": "Paris", "japan": "Tokyo", "egypt": "Cairo"}
POPULATIONS = {
    "lisbon": "0.5 million",
    "vienna": "2.0 million",
    "paris": "2.1 million",
    "tokyo": "14 million",
    "cairo": "10 million",
}


def tool(name: str, description: str, argument: str, values: list) -> dict:
    # The argument's values are listed and no other property is allowed, so a forced call (constrained by the server
    # to this schema) is complete and valid in a few tokens, even from a small model.
    schema = {
        "type": "object",
        "properties": {argument: {"type": "string", "enum": values}},
        "required": [argument],
        "additionalProperties": False,
    }
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOLS = [
    tool("lookup_capital", "The capital city of a country", "country", [country.title() for country in CAPITALS]),
    tool("lookup_population", "The population of a city", "city", [city.title() for city in POPULATIONS]),
]


def run_tool(call) -> str:
    """The tools themselves: plain lookups, answering 'unknown' for anything else."""
    try:
        arguments = json.loads(call.function.arguments)
    except json.JSONDecodeError:
        return "error: the arguments are not JSON"
    if call.function.name == "lookup_capital":
        return CAPITALS.get(str(arguments.get("country", "")).strip().lower(), "unknown")
    if call.function.name == "lookup_population":
        return POPULATIONS.get(str(arguments.get("city", "")).strip().lower(), "unknown")
    return f"error: no tool named {call.function.name}"


def user_turn(client: OpenAI, model: str, messages: list, max_calls: int) -> list:
    """One user turn of the loop: tool calls and their results until the model answers in words."""
    tool_calls = []
    for index in range(max_calls + 1):
        choice = "required" if index == 0 else "auto" if index < max_calls else "none"
        completion = client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, tool_choice=choice, max_tokens=64, temperature=0
        )
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            print(f"  assistant: {message.content!r}")
            return tool_calls
        for call in message.tool_calls:
            result = run_tool(call)
            print(f"  tool call: {call.function.name}({call.function.arguments}) -> {result!r}")
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            tool_calls.append({"name": call.function.name, "arguments": call.function.arguments, "result": result})
    return tool_calls


def main() -> None:
    cli = connect.parser(__doc__.split("\n\n")[0])
    cli.add_argument(
        "--model",
        required=True,
        help="entity/project/name:stepN (a checkpoint), entity/project/name (its latest step) or a base model",
    )
    cli.add_argument("--max-calls", type=int, default=3, help="tool calls per user turn before the model must answer")
    args = connect.parse(cli)

    client = OpenAI(base_url=f"{args.url}/v1", api_key=args.key)
    started = time.monotonic()
    messages = [
        {
            "role": "system",
            "content": "You answer questions about countries. Look facts up with the tools, then answer in one sentence.",
        }
    ]
    turns = []
    for question in ("What is the capital of Portugal?", "How many people live there?"):
        print(f"user: {question}")
        messages.append({"role": "user", "content": question})
        calls = user_turn(client, args.model, messages, args.max_calls)
        turns.append({"question": question, "tool_calls": calls, "answer": messages[-1].get("content")})
    seconds = time.monotonic() - started
    print(
        f"\n{sum(len(turn['tool_calls']) for turn in turns)} tool calls over {len(turns)} user turns in {seconds:.0f} s with {args.model}"
    )
    connect.write_summary(
        args, {"model": args.model, "seconds": round(seconds, 1), "turns": turns, "messages": messages}
    )


if __name__ == "__main__":
    main()
