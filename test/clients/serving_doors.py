"""The official `openai` and `anthropic` Python SDKs (ART 0.5.23's pins, scripts/python/art-0523.txt) against the
server's four doors, for test/serving-doors.test.ts. Reads {"url", "key", "models"} as JSON on stdin; per model it
runs, greedy: chat completions, completions, the Responses API and the Anthropic Messages API whole and streamed;
a two-turn tool loop on chat, Responses (stored: previous_response_id) and Messages (a call forced by tool_choice,
then the tool's result); JSON-schema output on each; and Messages' count_tokens. Every answer and every streamed
event is validated against the SDKs' own pydantic types, strictly (model_validate, not the SDKs' lenient
construction), as ART's capture reads them; and, where ART 0.5.23 is installed beside them, ART's own capture
(`build_exchange`) and token readers on each door's raw answer, whole and streamed. Prints one JSON object of what
the test checks.
"""

import json
import sys

import anthropic
import openai
from anthropic.types import Message, RawMessageStreamEvent
from openai.types import Completion
from openai.types.chat import ChatCompletion
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}
QUESTION = "What is the weather in Paris?"
RESULT = "Sunny, 21 degrees."
STREAM_EVENTS = TypeAdapter(RawMessageStreamEvent)
RESPONSE_EVENTS = TypeAdapter(ResponseStreamEvent)
# anthropic 2.x takes no sampling parameters (newer Claude models refuse them); the server does.
GREEDY = {"temperature": 0}


def chat_doors(client: openai.OpenAI, model: str) -> dict:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": CITY_SCHEMA}}
    messages = [{"role": "user", "content": QUESTION}]
    plain = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0)
    ChatCompletion.model_validate(plain.model_dump(exclude_unset=True))
    streamed = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0, stream=True)
    stream_text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    call = (
        client.chat.completions.create(
            model=model,
            messages=messages,
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=60,
            temperature=0,
        )
        .choices[0]
        .message
    )
    answer = client.chat.completions.create(
        model=model,
        messages=[
            *messages,
            call.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": RESULT},
        ],
        tools=[tool],
        max_tokens=12,
        temperature=0,
    )
    schema = client.chat.completions.create(
        model=model,
        messages=messages,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA}},
        max_tokens=60,
        temperature=0,
    )
    return {
        "text": plain.choices[0].message.content,
        "stream_text": stream_text,
        "call": {
            "name": call.tool_calls[0].function.name,
            "arguments": json.loads(call.tool_calls[0].function.arguments),
        },
        "after_tool": answer.choices[0].finish_reason,
        "json": json.loads(schema.choices[0].message.content),
    }


def completions_door(client: openai.OpenAI, model: str) -> dict:
    plain = client.completions.create(model=model, prompt="The weather in Paris is", max_tokens=8, temperature=0)
    Completion.model_validate(plain.model_dump(exclude_unset=True))
    streamed = client.completions.create(
        model=model, prompt="The weather in Paris is", max_tokens=8, temperature=0, stream=True
    )
    schema = client.completions.create(
        model=model,
        prompt="City: ",
        max_tokens=60,
        temperature=0,
        extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA}}},
    )
    return {
        "text": plain.choices[0].text,
        "stream_text": "".join(chunk.choices[0].text for chunk in streamed if chunk.choices),
        "json": json.loads(schema.choices[0].text),
    }


def responses_door(client: openai.OpenAI, model: str) -> dict:
    tool = {"type": "function", "name": "get_weather", "parameters": CITY_SCHEMA, "strict": True}
    plain = client.responses.create(model=model, input=QUESTION, max_output_tokens=12, temperature=0)
    Response.model_validate(plain.model_dump(exclude_unset=True))
    raw = client.responses.create(model=model, input=QUESTION, max_output_tokens=12, temperature=0, stream=True)
    event_types = []
    for event in raw:
        RESPONSE_EVENTS.validate_python(event.model_dump(exclude_unset=True))
        event_types.append(event.type)
    with client.responses.stream(model=model, input=QUESTION, max_output_tokens=12, temperature=0) as stream:
        final = stream.get_final_response()
    call = client.responses.create(
        model=model,
        input=QUESTION,
        tools=[tool],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=60,
        temperature=0,
    )
    function_call = next(item for item in call.output if item.type == "function_call")
    answer = client.responses.create(
        model=model,
        previous_response_id=call.id,
        input=[{"type": "function_call_output", "call_id": function_call.call_id, "output": RESULT}],
        tools=[tool],
        max_output_tokens=12,
        temperature=0,
    )
    Response.model_validate(answer.model_dump(exclude_unset=True))
    schema = client.responses.create(
        model=model,
        input=QUESTION,
        text={"format": {"type": "json_schema", "name": "city", "schema": CITY_SCHEMA, "strict": True}},
        max_output_tokens=60,
        temperature=0,
    )
    retrieved = client.responses.retrieve(answer.id)
    client.responses.delete(schema.id)
    try:
        client.responses.retrieve(schema.id)
        deleted = False
    except openai.NotFoundError:
        deleted = True
    return {
        "text": plain.output_text,
        "stream_text": final.output_text,
        "event_types": event_types,
        "call": {"name": function_call.name, "arguments": json.loads(function_call.arguments)},
        "after_tool": answer.status,
        "after_tool_input_tokens": answer.usage.input_tokens,
        "retrieved_same": retrieved.model_dump() == answer.model_dump(),
        "json": json.loads(schema.output_text),
        "deleted": deleted,
    }


def messages_door(client: anthropic.Anthropic, model: str) -> dict:
    tool = {"name": "get_weather", "input_schema": CITY_SCHEMA}
    messages = [{"role": "user", "content": QUESTION}]
    plain = client.messages.create(model=model, messages=messages, max_tokens=12, extra_body=GREEDY)
    Message.model_validate(plain.model_dump(exclude_unset=True))
    raw = client.messages.create(model=model, messages=messages, max_tokens=12, extra_body=GREEDY, stream=True)
    event_types = []
    for event in raw:
        STREAM_EVENTS.validate_python(event.model_dump(exclude_unset=True))
        event_types.append(event.type)
    with client.messages.stream(model=model, messages=messages, max_tokens=12, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    call = client.messages.create(
        model=model,
        messages=messages,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
        max_tokens=60,
        extra_body=GREEDY,
    )
    tool_use = next(block for block in call.content if block.type == "tool_use")
    with client.messages.stream(
        model=model,
        messages=messages,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
        max_tokens=60,
        extra_body=GREEDY,
    ) as stream:
        streamed_call = next(block for block in stream.get_final_message().content if block.type == "tool_use")
    answer = client.messages.create(
        model=model,
        messages=[
            *messages,
            {"role": "assistant", "content": [block.model_dump() for block in call.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": RESULT}]},
        ],
        tools=[tool],
        max_tokens=12,
        extra_body=GREEDY,
    )
    schema = client.messages.create(
        model=model,
        messages=messages,
        output_config={"format": {"type": "json_schema", "schema": CITY_SCHEMA}},
        max_tokens=60,
        extra_body=GREEDY,
    )
    counted = client.messages.count_tokens(model=model, messages=messages)
    text = "".join(block.text for block in plain.content if block.type == "text")
    return {
        "text": text,
        "stream_text": "".join(block.text for block in final.content if block.type == "text"),
        "event_types": event_types,
        "call": {"name": tool_use.name, "arguments": tool_use.input, "stop_reason": call.stop_reason},
        "streamed_call": {"name": streamed_call.name, "arguments": streamed_call.input},
        "after_tool": answer.stop_reason,
        "json": json.loads(schema.content[0].text),
        "count_tokens": counted.input_tokens,
        "input_tokens": plain.usage.input_tokens,
    }


# What ART 0.5.23 reads of a captured exchange (art/trajectories: build_exchange, then the per-protocol token
# readers its tokenizer uses), when ART is installed beside the SDKs.
ART_ROUTES = {
    "chat_completions": ("/v1/chat/completions", "_chat_tokens"),
    "completions": ("/v1/completions", "_completion_tokens"),
    "responses": ("/v1/responses", "_responses_tokens"),
    "messages": ("/v1/messages", "_messages_tokens"),
}


def art_reads(url: str, key: str, model: str) -> dict | None:
    """Per protocol, whole and streamed: the prompt ids, sampled ids and logprobs ART's tokenizer reads."""
    try:
        from datetime import datetime, timezone

        import httpx
        from art.trajectories import _tokenize
        from art.trajectories._protocols import build_exchange
    except ImportError:
        return None
    conversation = [{"role": "user", "content": QUESTION}]
    bodies = {
        "chat_completions": {"messages": conversation, "max_tokens": 8, "return_token_ids": True},
        "completions": {"prompt": "The weather in Paris is", "max_tokens": 8},
        "responses": {"input": QUESTION, "max_output_tokens": 8},
        "messages": {"messages": conversation, "max_tokens": 8},
    }
    now = datetime.now(timezone.utc)
    reads = {}
    for endpoint, (route, reader) in ART_ROUTES.items():
        for stream in (False, True):
            request = {"model": model, **bodies[endpoint], "temperature": 0, "stream": stream}
            body = httpx.post(f"{url}{route}", json=request, headers={"x-api-key": key}, timeout=120).content
            name = f"{endpoint}{' stream' if stream else ''}"
            try:
                exchange = build_exchange(endpoint, request, body, start_time=now, end_time=now)
            except TypeError as error:  # ART's own failure to read a stream (the test names which)
                reads[name] = {"error": str(error)}
                continue
            prompt, sampled, logprobs = getattr(_tokenize, reader)(exchange.response)
            reads[name] = {"prompt_token_ids": prompt, "token_ids": sampled, "logprobs": logprobs}
    return reads


def main() -> None:
    request = json.load(sys.stdin)
    openai_client = openai.OpenAI(base_url=f"{request['url']}/v1", api_key=request["key"], max_retries=0)
    # The Anthropic SDK sends the key as x-api-key.
    anthropic_client = anthropic.Anthropic(base_url=request["url"], api_key=request["key"], max_retries=0)
    results = {}
    for model in request["models"]:
        results[model] = {
            "chat": chat_doors(openai_client, model),
            "completions": completions_door(openai_client, model),
            "responses": responses_door(openai_client, model),
            "messages": messages_door(anthropic_client, model),
        }
    results["art"] = art_reads(request["url"], request["key"], request["models"][0])
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
