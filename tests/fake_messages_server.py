"""A local stand-in for the Anthropic Messages API, for tests that run the real SDK.

`FakeMessagesServer` listens on 127.0.0.1 (a random port) in a thread and answers
`POST /v1/messages` from a queue of scripted responses: a Messages API message
(`reply(...)`), an error status with the API's error body (`error(...)`), or a dropped
connection (`drop()`). Every request it receives is recorded (path, headers, JSON body), so a
test can assert what the agent sent and how many calls it made. When the queue is empty it
answers 500 with an error body that says so, and records the request anyway.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

_ids = itertools.count(1)


@dataclass
class Scripted:
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without answering


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        """The text of every user message of the request, joined."""
        parts: list[str] = []
        for msg in self.body.get("messages", []):
            content = msg.get("content")
            if isinstance(content, str):
                parts.append(content)
            else:
                parts += [c.get("text", "") for c in content or [] if isinstance(c, dict)]
        return "\n".join(parts)

    @property
    def system(self) -> str:
        s = self.body.get("system", "")
        if isinstance(s, list):
            return "\n".join(c.get("text", "") for c in s if isinstance(c, dict))
        return s or ""


class FakeMessagesServer:
    def __init__(self, responder: Callable[["Recorded"], "Scripted | None"] | None = None) -> None:
        # `responder` answers a request when the queue is empty (a search's calls are too many,
        # and in an order too variable, to script one by one); None from it means "no answer".
        self.responder = responder
        self.queue: deque[Scripted] = deque()
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with server._lock:
                    recorded = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    server.requests.append(recorded)
                    item = server.queue.popleft() if server.queue else None
                    if item is None and server.responder is not None:
                        item = server.responder(recorded)
                if self.path.split("?")[0] != "/v1/messages":
                    item = Scripted(404, _error_body("not_found_error", f"no route {self.path}"))
                elif item is None:
                    item = Scripted(500, _error_body("api_error", "the fake server has no scripted response left"))
                if item.drop:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(2)
                    except OSError:
                        pass
                    return
                data = json.dumps(item.body or {}).encode()
                self.send_response(item.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_fake_{next(_ids)}")
                for k, v in item.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="fake-messages", daemon=True)

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeMessagesServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "FakeMessagesServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ scripting

    def reply(self, text: str, *, stop_reason: str = "end_turn", input_tokens: int = 1000,
              output_tokens: int = 500, model: str = "claude-sonnet-4-5", **usage: int) -> None:
        """Queue one successful Messages API response whose content is `text`."""
        self.queue.append(message(text, stop_reason=stop_reason, input_tokens=input_tokens,
                                  output_tokens=output_tokens, model=model, **usage))

    def error(self, status: int, error_type: str = "overloaded_error", message: str = "Overloaded",
              headers: dict[str, str] | None = None) -> None:
        """Queue one error response with the API's error body."""
        self.queue.append(Scripted(status, _error_body(error_type, message), dict(headers or {})))

    def drop(self) -> None:
        """Queue a connection closed without a response."""
        self.queue.append(Scripted(drop=True))


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def message(text: str, *, stop_reason: str = "end_turn", input_tokens: int = 1000, output_tokens: int = 500,
            model: str = "claude-sonnet-4-5", **usage: int) -> Scripted:
    """One successful Messages API response whose content is `text`."""
    return Scripted(200, {
        "id": f"msg_fake_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, **usage},
    })
