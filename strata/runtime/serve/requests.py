"""The bodies of OpenAI's /v1/completions and /v1/chat/completions, read and checked.

    parsed = parse_completion({"model": "m", "prompt": "Hi", "max_tokens": 8}, engine.limits, "m")
    parsed.prompt, parsed.max_tokens, parsed.choice_sampling(0), parsed.stop, parsed.stream

A field of the wrong type or out of range is an `ApiError` (400) naming it; unknown fields are
ignored, as OpenAI's API ignores them. The sampling defaults are OpenAI's (temperature 1,
top_p 1); choice i of `n` draws with seed + i (choice 0 with the seed itself, as `strata
generate --seed` draws), or with a random seed of its own when none is given. Log-probabilities
(`logprobs` of a completion: the top count; of a chat, `logprobs: true` and `top_logprobs`)
are the model's own, a log-softmax of the logits that chose the token, before temperature and
penalties (as vLLM returns them); `echo` is refused. An output constraint (`response_format`,
llama-server's `grammar` and `json_schema`) is read by `strata.runtime.serve.constraints`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from strata.errors import StrataError
from strata.runtime.request import new_token_room
from strata.runtime.sampling import SamplingError, SamplingParams

#: The most choices one request may ask for, the most stop strings and top log-probs (OpenAI's limits).
MAX_N, MAX_STOPS, MAX_LOGPROBS = 16, 4, 20


class ApiError(StrataError):
    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code


@dataclass(frozen=True)
class ApiRequest:
    """An OpenAI completion or chat request, read and checked: the prompt's ids and how to answer it."""

    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams
    stop: tuple[str, ...]
    n: int
    stream: bool
    include_usage: bool
    #: None: no log-probabilities; k: each token's, and the k most likely.
    logprobs: int | None = None
    #: A chat's `chat_tools.ChatPlan` (how its reply is read for reasoning and tool calls), or None.
    chat_plan: Any = None
    #: What the output must follow (`strata.runtime.constrain.ConstraintSpec`: the request's
    #: response_format / grammar / json_schema, or a forced tool call); None: nothing.
    constraint: Any = None

    def choice_sampling(self, i: int) -> SamplingParams:
        if self.sampling.seed is None or i == 0:
            return self.sampling
        return replace(self.sampling, seed=self.sampling.seed + i)


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ApiError(f"'{name}' must be a number, got {_shown(v)}", name)
    if not low <= v <= high:
        raise ApiError(f"'{name}' must be in [{low:g}, {high:g}], got {v}", name)
    return float(v)


def _whole(v: Any) -> int | None:
    """`v` as an int when JSON calls it an integer (2 or 2.0, as JSON Schema does), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v if isinstance(v, int) else None


#: A temperature below this is greedy (as vLLM's): logits divided by less can overflow float32,
#: where the sampler's distribution is undefined, and the draw is the argmax's well before it.
GREEDY_BELOW = 1e-5


def _temperature(body: Mapping[str, Any]) -> float:
    t = _number(body, "temperature", 1.0, 0, 2)
    return 0.0 if t < GREEDY_BELOW else t


def _integer(body: Mapping[str, Any], name: str, default: int | None, low: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if _whole(v) is None:
        raise ApiError(f"'{name}' must be an integer, got {_shown(v)}", name)
    v = _whole(v)
    if low is not None and v < low:
        raise ApiError(f"'{name}' must be at least {low}, got {v}", name)
    return v


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _common(body: Any, limits: Any, model_name: str, prompt: list[int], max_tokens_field: str) -> ApiRequest:
    model = body.get("model")
    if model is not None and model != model_name:
        if not isinstance(model, str):
            raise ApiError(f"'model' must be a string, got {_shown(model)}", "model")
        raise ApiError(f"the model '{model[:80]}' does not exist; this server serves '{model_name}'", "model",
                       404, "model_not_found")
    if body.get("echo") not in (None, False):
        raise ApiError("'echo' is not supported by this server", "echo")
    logprobs = _logprobs(body, chat=max_tokens_field != "max_tokens")
    if body.get("best_of") not in (None, 1):
        raise ApiError("'best_of' is not supported (use n)", "best_of")
    if body.get("suffix") not in (None, ""):
        raise ApiError("'suffix' is not supported", "suffix")
    vocab, n_ctx = limits.vocab, limits.n_ctx
    for t in prompt:
        if not 0 <= t < vocab:
            raise ApiError(f"prompt token id {t} is outside the vocabulary [0, {vocab})", "prompt")
    room = new_token_room(len(prompt), n_ctx)
    if room < 1:
        raise ApiError(f"the prompt ({len(prompt)} tokens) is longer than the context of {n_ctx} tokens "
                       "(this server's maximum context length)", "messages" if max_tokens_field != "max_tokens"
                       else "prompt", code="context_length_exceeded")
    max_tokens = _integer(body, max_tokens_field, None, 0)
    if max_tokens_field != "max_tokens" and max_tokens is None:
        max_tokens = _integer(body, "max_tokens", None, 0)
    if max_tokens is None:  # all the context holds, or what the KV pages hold when they are fewer
        max_tokens = max(min(room, new_token_room(len(prompt), limits.kv_tokens)), 0)
    elif max_tokens > room:
        raise ApiError(f"max_tokens {max_tokens} is too large: the prompt ({len(prompt)} tokens) leaves room for "
                       f"{room} new tokens in the context of {n_ctx} tokens (this server's maximum context length)",
                       max_tokens_field, code="context_length_exceeded")
    top_k = _integer(body, "top_k", 0)  # 0 or less: off; the vocabulary or more keeps every token, as off does
    seed = _integer(body, "seed", None)
    try:
        sampling = SamplingParams(
            temperature=_temperature(body), top_p=_number(body, "top_p", 1.0, 0, 1),
            top_k=min(max(top_k, 0), vocab), min_p=_number(body, "min_p", 0.0, 0, 1),
            presence_penalty=_number(body, "presence_penalty", 0.0, -2, 2),
            frequency_penalty=_number(body, "frequency_penalty", 0.0, -2, 2),
            repetition_penalty=_number(body, "repetition_penalty", 1.0, 1e-6, 100), seed=seed)
    except SamplingError as e:
        raise ApiError(str(e)) from None
    if sampling.top_p == 0:
        raise ApiError("'top_p' must be above 0", "top_p")
    stop = body.get("stop")
    stops: tuple[str, ...]
    if stop is None:
        stops = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(s for s in stop if s)
    else:
        raise ApiError(f"'stop' must be a string or a list of strings, got {_shown(stop)}", "stop")
    if len(stops) > MAX_STOPS:
        raise ApiError(f"'stop' holds {len(stops)} strings; at most {MAX_STOPS}", "stop")
    n = _integer(body, "n", 1, 1)
    if n > MAX_N:
        raise ApiError(f"'n' must be at most {MAX_N}, got {n}", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise ApiError(f"'stream' must be a boolean, got {_shown(stream)}", "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise ApiError("'stream_options' must be an object like {\"include_usage\": true}", "stream_options")
        if not stream:
            raise ApiError("'stream_options' is only allowed when 'stream' is true", "stream_options")
        include_usage = bool(options.get("include_usage", False))
    return ApiRequest(prompt, max_tokens, sampling, stops, n, bool(stream), include_usage, logprobs)


def _logprobs(body: Mapping[str, Any], chat: bool) -> int | None:
    if not chat:  # completions: logprobs is the number of top log-probs (0: the chosen token's only)
        k = _integer(body, "logprobs", None, 0)
    else:  # chat: logprobs true, top_logprobs the number
        wanted = body.get("logprobs")
        if wanted is not None and not isinstance(wanted, bool):
            raise ApiError(f"'logprobs' must be a boolean, got {_shown(wanted)}", "logprobs")
        k = _integer(body, "top_logprobs", None, 0)
        if k is not None and not wanted:
            raise ApiError("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        k = (k or 0) if wanted else None
    if k is not None and k > MAX_LOGPROBS:
        raise ApiError(f"'{'top_logprobs' if chat else 'logprobs'}' must be at most {MAX_LOGPROBS}, got {k}",
                       "top_logprobs" if chat else "logprobs")
    return k


def _body(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def parse_completion(body: Any, limits: Any, model_name: str) -> ApiRequest:
    """POST /v1/completions: `prompt` a text, a list of token ids, or a list of one of either;
    `limits` (`batch_engine.RequestLimits`): the tokenizer, vocabulary, context and KV pages."""
    body = _body(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        from strata.runtime.text import check_utf8

        ids = limits.tokenizer.encode(check_utf8(prompt, "the prompt"))
    elif isinstance(prompt, list) and prompt and all(_whole(t) is not None for t in prompt):
        ids = [_whole(t) for t in prompt]
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError("a batch of prompts is not supported: send one prompt per request (or use n)", "prompt")
    else:
        raise ApiError(f"'prompt' must be a string or a list of token ids, got {_shown(prompt)}", "prompt")
    if not ids:
        raise ApiError("the prompt is empty", "prompt")
    return _constrained(_common(body, limits, model_name, ids, "max_tokens"), body)


def parse_chat(body: Any, limits: Any, model_name: str) -> ApiRequest:
    """POST /v1/chat/completions: `messages` (and `tools`, see `chat_tools`) through the model's chat template."""
    from strata.runtime.serve.chat_tools import ChatFieldError, chat_prompt

    body = _body(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(f"'messages' must be a non-empty list of messages, got {_shown(messages)}", "messages")
    plain = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(f"messages[{i}] must be an object with a 'role' string", f"messages[{i}]")
        content = m.get("content")
        if isinstance(content, list):  # content parts: only text ones
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
                texts.append(part["text"])
            content = "".join(texts)
        if content is not None and not isinstance(content, str):
            raise ApiError(f"messages[{i}].content must be a string, got {_shown(content)}", f"messages[{i}].content")
        plain.append({**m, "content": content or ""})
    try:
        prompt = chat_prompt(body, limits.tokenizer, plain)
    except ChatFieldError as e:
        raise ApiError(e.message, e.param) from None
    parsed = _constrained(_common(body, limits, model_name, prompt.ids, "max_completion_tokens"), body)
    if prompt.constraint is not None:
        if parsed.constraint is not None:
            raise ApiError("a forced 'tool_choice' cannot be combined with 'response_format', 'grammar' or "
                           "'json_schema'", "tool_choice")
        parsed = replace(parsed, constraint=prompt.constraint)
    return replace(parsed, chat_plan=prompt.plan if prompt.plan.reads_reply else None)


def _constrained(request: ApiRequest, body: Mapping[str, Any]) -> ApiRequest:
    from strata.runtime.serve.constraints import FieldError, request_constraint

    try:
        spec = request_constraint(body)
    except FieldError as e:
        raise ApiError(e.message, e.param) from None
    return request if spec is None else replace(request, constraint=spec)
