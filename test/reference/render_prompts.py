"""Reference prompt renderer: Hugging Face `transformers` apply_chat_template after vLLM's message preprocessing.

Reads {"folder": ..., "cases": [{"messages", "tools", "add_generation_prompt", "continue_final_message",
"chat_template_kwargs"}]} as JSON on stdin and writes [{"text", "ids"} | {"error"}] as JSON on stdout.
The preprocessing is written here from vLLM's description (chat_utils: "string" content format,
_postprocess_messages), independently of the TypeScript renderer it checks; the one rule vLLM lacks
(an empty tool_calls list counts as absent) is training-rows.md §1's.
"""

import json
import sys

from transformers import AutoTokenizer

TEXT_PARTS = {"text", "input_text", "output_text"}


def content_string(content):
    # vLLM: None -> no parts; a string -> one text part; parts are joined with a newline.
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") in TEXT_PARTS:
            texts.append(part["text"])
        elif part.get("type") == "refusal":
            texts.append(part["refusal"])
        else:
            raise ValueError(f"unsupported content part {part.get('type')!r}")
    return "\n".join(texts)


def vllm_message(message):
    role = message["role"]
    out = {"role": role, "content": content_string(message.get("content"))}
    if role == "assistant":
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                call = json.loads(json.dumps(call))
                args = call["function"].get("arguments")
                if not args:
                    call["function"]["arguments"] = {}
                elif not isinstance(args, (dict, list)):
                    call["function"]["arguments"] = json.loads(args)
                calls.append(call)
            out["tool_calls"] = calls
        for key in ("reasoning", "reasoning_content"):
            if isinstance(message.get(key), str):
                out[key] = message[key]
    if role == "tool" and "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    return out


def render(tokenizer, case):
    text = tokenizer.apply_chat_template(
        [vllm_message(m) for m in case["messages"]],
        tools=case.get("tools"),
        add_generation_prompt=case.get("add_generation_prompt", True),
        continue_final_message=case.get("continue_final_message", False),
        tokenize=False,
        **(case.get("chat_template_kwargs") or {}),
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return {"text": text, "ids": ids}


def main():
    request = json.load(sys.stdin)
    tokenizer = AutoTokenizer.from_pretrained(request["folder"])
    results = []
    for case in request["cases"]:
        try:
            results.append(render(tokenizer, case))
        except Exception as error:  # the test compares errors too: both sides must refuse
            results.append({"error": f"{type(error).__name__}: {error}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
