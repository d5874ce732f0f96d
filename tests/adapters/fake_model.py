"""A fake model server on loopback that drives the real agent CLIs through one shell call.

It speaks just enough of three provider APIs: Anthropic Messages (Claude Code), OpenAI
Responses (Codex) and Gemini (Gemini CLI). The first turn that offers the shell tool gets one
shell call running `command`; once a tool result is in the request, the answer is the text
"done"; side calls (titles, Gemini's model router) get a minimal answer. Every request body is
kept, so a test can read what the CLI sent back after the tool call (a deny's reason).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data)}\n\n")
    return "".join(out).encode()


def _anthropic(body: dict[str, Any], command: str) -> bytes:
    tools = {t.get("name") for t in body.get("tools") or []}
    # Claude Code appends role "system" messages at the end: skip them.
    messages = [m for m in body.get("messages") or [] if m.get("role") != "system"]
    last = messages[-1]["content"] if messages else ""
    answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
    if "Bash" in tools and not answered:
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": f"toolu_{time.time_ns()}",
            "name": "Bash",
            "input": {},
        }
        delta = {
            "type": "input_json_delta",
            "partial_json": json.dumps({"command": command, "description": "write"}),
        }
        stop = "tool_use"
    else:
        block, delta, stop = (
            {"type": "text", "text": ""},
            {"type": "text_delta", "text": "done"},
            ("end_turn"),
        )
    message = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    return _sse(
        [
            ("message_start", {"type": "message_start", "message": message}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


def _responses(body: dict[str, Any], command: str) -> bytes:
    items = body.get("input") or []
    answered = any(
        isinstance(i, dict) and str(i.get("type", "")).endswith("_call_output") for i in items
    )
    names = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
    item: dict[str, Any]
    if answered or not names:
        item = {
            "type": "message",
            "role": "assistant",
            "id": "msg_fake",
            "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        }
    else:
        args: dict[str, Any]
        if "exec_command" in names:
            name, args = "exec_command", {"cmd": command}
        elif "shell_command" in names:
            name, args = "shell_command", {"command": command}
        else:
            name, args = "shell", {"command": ["bash", "-lc", command]}
        item = {
            "type": "function_call",
            "id": "fc_fake",
            "call_id": f"call_{time.time_ns()}",
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }
    base = {
        "id": f"resp_{time.time_ns()}",
        "object": "response",
        "created_at": int(time.time()),
        "model": body.get("model", "fake"),
    }
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    return _sse(
        [
            (
                "response.created",
                {
                    "type": "response.created",
                    "response": {**base, "status": "in_progress", "output": []},
                },
            ),
            (
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": 0, "item": item},
            ),
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": 0, "item": item},
            ),
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {**base, "status": "completed", "output": [item], "usage": usage},
                },
            ),
        ]
    )


def _instance(schema: dict[str, Any]) -> Any:
    """A minimal value matching a JSON schema (Gemini CLI's JSON side calls)."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        return {k: _instance(v) for k, v in (schema.get("properties") or {}).items()}
    return {"string": "fake", "integer": 1, "number": 1, "boolean": False, "array": []}.get(kind)


def _gemini(body: dict[str, Any], command: str) -> dict[str, Any]:
    declared = [
        d.get("name") for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []
    ]
    contents = body.get("contents") or []
    last = contents[-1].get("parts", []) if contents else []
    answered = any("functionResponse" in p for p in last)
    schema = (body.get("generationConfig") or {}).get("responseJsonSchema")
    part: dict[str, Any]
    if "run_shell_command" in declared and not answered:
        part = {
            "functionCall": {
                "name": "run_shell_command",
                "args": {"command": command, "description": "write"},
            }
        }
    elif schema:
        part = {"text": json.dumps(_instance(schema))}
    else:
        part = {"text": "done"}
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
    }


class FakeModel:
    """`with FakeModel(command) as model:` serves on `model.url` in a thread."""

    def __init__(self, command: str):
        self.command = command
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(b'{"data": [], "models": []}', "application/json")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except (json.JSONDecodeError, UnicodeDecodeError):
                    body = {}
                path = self.path.split("?")[0]
                with server._lock:
                    server.requests.append({"path": path, "body": body})
                sse, js = "text/event-stream", "application/json"
                if path.endswith("/v1/messages/count_tokens"):
                    self._send(b'{"input_tokens": 10}', js)
                elif path.endswith("/v1/messages"):
                    self._send(_anthropic(body, server.command), sse)
                elif path.endswith("/responses"):
                    self._send(_responses(body, server.command), sse)
                elif path.endswith(":streamGenerateContent"):
                    answer = json.dumps(_gemini(body, server.command))
                    self._send(f"data: {answer}\r\n\r\n".encode(), sse)
                elif path.endswith(":generateContent"):
                    self._send(json.dumps(_gemini(body, server.command)).encode(), js)
                elif path.endswith(":countTokens"):
                    self._send(b'{"totalTokens": 10}', js)
                else:
                    self._send(b"{}", js)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def sent_back(self, text: str) -> bool:
        """Whether the CLI sent `text` to the model (a deny's reason shows in the request that
        follows the tool call)."""
        with self._lock:
            bodies = [json.dumps(r["body"]) for r in self.requests]
        return any(text in b for b in bodies)
