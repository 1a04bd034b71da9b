"""A scripted LLM server on loopback that speaks the OpenAI and Anthropic wire formats.

No model behind it: each request gets the next item of a script (a reply or a fault),
or, once the script is empty, whatever a responder function returns. It lets tests,
and users checking their setup offline, drive the real ``openai`` and ``anthropic``
SDKs through ``base_url`` without a network or a key::

    with ScriptedLLMServer([Reply("```python\\ndef f():\\n    return 1\\n```"),
                            Fault.rate_limit(), Reply.calling("submit")]) as server:
        OpenAI(base_url=server.openai_base_url, api_key="x")   # POST /v1/chat/completions
        Anthropic(base_url=server.anthropic_base_url, api_key="x")   # POST /v1/messages

Faults: ``rate_limit`` (429 with ``retry-after``), ``server_error`` (500 or another
5xx), ``http_error`` (any status: 401, 404...), ``hang`` (no answer until the client
gives up), ``reset`` (the connection is closed without a response) and ``empty`` (a
reply with no text and no tool call). A malformed tool call is a reply:
``Reply.calling("write_code", arguments='{"code": "de')``.
Every request is recorded in :attr:`ScriptedLLMServer.requests`.

Run it from a shell: ``python -m gym_repost.llm.scripted_server --script replies.jsonl``,
one JSON object per line: ``{"text": ...}``, ``{"tool_calls": [{"name": ..., "arguments":
{...}}]}`` or ``{"fault": "rate_limit"}``.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

FaultKind = Literal["rate_limit", "server_error", "http_error", "hang", "reset", "empty"]


@dataclass(frozen=True)
class ScriptedToolCall:
    """A tool call in a scripted reply; ``arguments`` as a string is sent verbatim."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)

    def arguments_text(self) -> str:
        """The arguments as the OpenAI format carries them (a JSON string)."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """A scripted answer: text and/or tool calls, with the token counts to report.

    Token counts default to about a quarter of the characters of the request and of
    the reply, so accounting has numbers to add up.
    """

    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: Literal["stop", "length"] = "stop"

    @classmethod
    def calling(
        cls, name: str, arguments: dict[str, Any] | str | None = None, *, text: str = "", **kwargs: Any
    ) -> Reply:
        """A reply that calls one tool (``arguments`` as a string: sent verbatim)."""
        return cls(text=text, tool_calls=(ScriptedToolCall(name, {} if arguments is None else arguments),), **kwargs)


@dataclass(frozen=True)
class Fault:
    """A failure the server injects instead of answering."""

    kind: FaultKind
    status: int = 500
    retry_after: float = 0.1
    """Seconds the 429 asks the client to wait (``retry-after-ms`` and ``retry-after``)."""
    seconds: float = 30.0
    """How long a ``hang`` keeps the request open (cut short when the server stops)."""

    @classmethod
    def rate_limit(cls, retry_after: float = 0.1) -> Fault:
        """HTTP 429 with ``retry-after``."""
        return cls("rate_limit", status=429, retry_after=retry_after)

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """An HTTP 5xx."""
        return cls("server_error", status=status)

    @classmethod
    def http_error(cls, status: int) -> Fault:
        """Any other HTTP error status (401: a bad key, 404: an unknown model...)."""
        return cls("http_error", status=status)

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Fault:
        """Accept the request and answer nothing for ``seconds``."""
        return cls("hang", seconds=seconds)

    @classmethod
    def reset(cls) -> Fault:
        """Close the connection without a response."""
        return cls("reset")

    @classmethod
    def empty(cls) -> Fault:
        """HTTP 200 with an answer that holds no text and no tool call."""
        return cls("empty", status=200)


@dataclass
class RecordedRequest:
    """One request the server received."""

    api: Literal["openai", "anthropic"]
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's messages, as sent."""
        return list(self.body.get("messages", []))

    def text(self) -> str:
        """All text of the request (system prompt, messages, tool results), joined."""
        parts = [_flatten(self.body.get("system", ""))]
        parts += [_flatten(m.get("content")) for m in self.messages]
        return "\n".join(p for p in parts if p)

    def last_text(self) -> str:
        """Text of the last message."""
        return _flatten(self.messages[-1].get("content")) if self.messages else ""


def _flatten(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_flatten(block) for block in content)
    if isinstance(content, dict):
        for key in ("text", "content"):
            if key in content:
                return _flatten(content[key])
    return ""


ScriptItem = Reply | Fault
Responder = Callable[[RecordedRequest], ScriptItem]


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def openai_completion(reply: Reply, request: RecordedRequest, number: int) -> dict[str, Any]:
    """``reply`` as an OpenAI chat-completions response body."""
    calls = [
        {"id": f"call_{number}_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments_text()}}
        for i, c in enumerate(reply.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else reply.finish_reason
    usage_in = reply.input_tokens if reply.input_tokens is not None else _tokens(json.dumps(request.body))
    usage_out = (
        reply.output_tokens
        if reply.output_tokens is not None
        else _tokens(reply.text + "".join(c.arguments_text() for c in reply.tool_calls))
    )
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": request.body.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": usage_in, "completion_tokens": usage_out, "total_tokens": usage_in + usage_out},
    }


def anthropic_message(reply: Reply, request: RecordedRequest, number: int) -> dict[str, Any]:
    """``reply`` as an Anthropic messages response body.

    A tool call whose arguments are a string that is not a JSON object keeps the string
    as its ``input`` (a malformed tool call).
    """
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    for i, call in enumerate(reply.tool_calls):
        arguments: Any = call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        content.append({"type": "tool_use", "id": f"toolu_{number}_{i}", "name": call.name, "input": arguments})
    stop = "tool_use" if reply.tool_calls else ("max_tokens" if reply.finish_reason == "length" else "end_turn")
    usage_in = reply.input_tokens if reply.input_tokens is not None else _tokens(json.dumps(request.body))
    usage_out = (
        reply.output_tokens
        if reply.output_tokens is not None
        else _tokens(reply.text + "".join(c.arguments_text() for c in reply.tool_calls))
    )
    return {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": request.body.get("model", "scripted"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": usage_in, "output_tokens": usage_out},
    }


def _error_body(api: str, status: int, message: str) -> dict[str, Any]:
    if api == "anthropic":
        kind = {
            429: "rate_limit_error",
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = {
        429: "rate_limit_exceeded",
        400: "invalid_request_error",
        401: "invalid_api_key",
        404: "model_not_found",
    }.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        if self.path.rstrip("/").endswith("/chat/completions"):
            api: Literal["openai", "anthropic"] = "openai"
        elif self.path.rstrip("/").endswith("/messages"):
            api = "anthropic"
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, _error_body(api, 400, "the request body is not JSON"))
            return
        request = RecordedRequest(api, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        number, item = self.server.owner.take(request)
        self._answer(api, request, number, item)

    def _answer(self, api: str, request: RecordedRequest, number: int, item: ScriptItem | None) -> None:
        if item is None:
            self._send_json(400, _error_body(api, 400, "scripted server: no scripted reply left for this request"))
        elif isinstance(item, Reply):
            render = openai_completion if api == "openai" else anthropic_message
            self._send_json(200, render(item, request, number))
        else:
            self._fault(api, request, number, item)

    def _fault(self, api: str, request: RecordedRequest, number: int, fault: Fault) -> None:
        if fault.kind == "rate_limit":
            headers = {
                "retry-after-ms": str(int(fault.retry_after * 1000)),
                "retry-after": str(max(1, math.ceil(fault.retry_after))),
            }
            self._send_json(429, _error_body(api, 429, "rate limit reached (scripted)"), headers)
        elif fault.kind in ("server_error", "http_error"):
            self._send_json(fault.status, _error_body(api, fault.status, f"HTTP {fault.status} (scripted)"))
        elif fault.kind == "hang":
            self.server.owner.stopping.wait(fault.seconds)
            self.close_connection = True
        elif fault.kind == "reset":
            self.close_connection = True
        else:
            render = openai_completion if api == "openai" else anthropic_message
            self._send_json(200, render(Reply(text=""), request, number))

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("x-request-id", f"req_{id(payload):x}")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedLLMServer


class ScriptedLLMServer:
    """An HTTP server on ``127.0.0.1`` (a free port) answering from a script.

    Args:
        script: replies and faults, served in order, one per request.
        responder: called for each request once the script is empty; without one, a
            request past the end of the script gets HTTP 400 (a test bug, not retried).
        host: address to bind.
        port: port to bind (0: a free one).
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        responder: Responder | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._script: deque[ScriptItem] = deque(script)
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._host, self._port = host, port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def push(self, *items: ScriptItem) -> None:
        """Append replies or faults to the script."""
        with self._lock:
            self._script.extend(items)

    def take(self, request: RecordedRequest) -> tuple[int, ScriptItem | None]:
        """Record ``request`` and choose its answer (called by the request handler)."""
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            if self._script:
                return number, self._script.popleft()
        return number, self.responder(request) if self.responder is not None else None

    @property
    def remaining(self) -> int:
        """Script items not served yet."""
        with self._lock:
            return len(self._script)

    def start(self) -> ScriptedLLMServer:
        """Bind and serve in a background thread."""
        self._httpd = _HTTPServer((self._host, self._port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm-server", daemon=True
        )
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self._httpd is None:
            raise RuntimeError("the scripted server is not started")
        port = self._httpd.server_address[1]
        return f"http://{self._host}:{port}"

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` for the OpenAI SDK (``.../v1``)."""
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The ``base_url`` for the Anthropic SDK (it appends ``/v1/messages``)."""
        return self.url

    def stop(self) -> None:
        """Release hanging requests, stop serving and close the socket."""
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_script(lines: Iterable[str]) -> list[ScriptItem]:
    """Script items from JSON lines (see the module docstring)."""
    items: list[ScriptItem] = []
    for raw in lines:
        if not raw.strip():
            continue
        entry = json.loads(raw)
        if "fault" in entry:
            items.append(Fault(entry["fault"], **{k: v for k, v in entry.items() if k != "fault"}))
            continue
        calls = tuple(ScriptedToolCall(c["name"], c.get("arguments", {})) for c in entry.get("tool_calls", []))
        items.append(Reply(text=entry.get("text", ""), tool_calls=calls))
    return items


def main(argv: list[str] | None = None) -> None:
    """Serve a script file until interrupted."""
    parser = argparse.ArgumentParser(description="Serve scripted LLM replies (OpenAI and Anthropic formats).")
    parser.add_argument("--script", required=True, help="JSON lines: {text|tool_calls|fault}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    with open(args.script, encoding="utf-8") as fh:
        items = read_script(fh)
    server = ScriptedLLMServer(items, host=args.host, port=args.port).start()
    print(
        f"serving {len(items)} scripted replies: OpenAI base_url {server.openai_base_url}, "
        f"Anthropic base_url {server.anthropic_base_url}",
        flush=True,
    )
    try:
        server.stopping.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
