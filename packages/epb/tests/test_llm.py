"""The LLM proposer against a local OpenAI-compatible server: good, malformed and slow replies."""

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
import torch

from epb.features import node_features
from epb.problems import RolloutState, random_tsp
from epb.programs import compile_program
from epb.proposers import FeedbackItem, LLMProposer, ProposalRequest

GOOD = (
    "Prefer near nodes that are far from the rest.\n```python\ndef score(s):\n"
    "    return -s.d_cur + 0.5 * s.min_to_visited\n```"
)


HOSTILE = [
    "```python\ndef score(s):\n    return " + "-" * 9000 + "s.d_cur\n```",
    "```python\ndef score(s):\n    return 1 / (s.d_cur * 0)\n```",
    "```python\ndef score(s):\n    for i in range(10):\n        pass\n"
    "    return i ** (i ** i)\n```",
    "```python\nimport os\ndef score(s):\n    return 1\n```",
    "```python\ndef score(s):\n    a = 0\n    for i in range(1000):\n"
    "        for j in range(1000):\n            for k in range(1000):\n"
    "                a = a + 1\n    return a\n```",
]


class Handler(BaseHTTPRequestHandler):
    mode = "good"
    seen: ClassVar[list] = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.seen.append((self.path, self.headers.get("Authorization"), body))
        mode = Handler.mode
        if mode == "slow":
            time.sleep(1.5)
        if mode == "http500":
            self.send_response(500)
            self.end_headers()
            return
        if mode == "malformed_json":
            payload = b"{not json"
        else:
            content = {
                "good": GOOD,
                "slow": GOOD,
                "no_code": "I think you should pick the nearest node.",
                "bad_program": "```python\nimport os\ndef score(s):\n    return 1\n```",
            }.get(mode)
            reply = {"choices": [{"message": {"role": "assistant", "content": content}}]}
            if mode == "hostile":
                texts = [GOOD, *HOSTILE]
                reply = {"choices": [{"message": {"content": t}} for t in texts]}
            if mode == "no_choices":
                reply = {"error": "nope"}
            payload = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError):  # the client gave up (timeout test)
            self.wfile.write(payload)


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def request_():
    st = RolloutState.start(random_tsp(2, 7, torch.Generator().manual_seed(0)))
    feats = node_features(st)
    prog = compile_program("def score(s):\n    return -s.d_cur", "nearest")
    fb = [FeedbackItem(0, 0.1, 3, 2, 0.7, {k: 0.1 for k in feats}, {k: 0.2 for k in feats})]
    return ProposalRequest(prog, feats, lambda g: g.sum(), fb, {"stage": "early", "weight": 0.4})


def test_good_reply_gives_a_validated_program(server, request_):
    Handler.mode = "good"
    prop = LLMProposer(base_url=server, model="test-model", api_key="k123", timeout=5)
    out = prop.propose(request_)
    assert len(out) == 1 and out[0].origin == "llm" and prop.errors == []
    assert "min_to_visited" in out[0].source
    path, auth, body = Handler.seen[-1]
    assert path == "/v1/chat/completions" and auth == "Bearer k123"
    assert body["model"] == "test-model"
    user = body["messages"][1]["content"]
    assert "return -s.d_cur" in user and "teacher picks node 3" in user


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("malformed_json", "malformed JSON"),
        ("no_choices", "malformed reply"),
        ("no_code", "no ```python code block"),
        ("bad_program", "imports are not allowed"),
        ("http500", "HTTP 500"),
    ],
)
def test_bad_replies_are_recorded_not_raised(server, request_, mode, reason):
    Handler.mode = mode
    prop = LLMProposer(base_url=server, timeout=5)
    assert prop.propose(request_) == []
    assert len(prop.errors) == 1 and reason in prop.errors[0]


def test_timeout_is_recorded(server, request_):
    Handler.mode = "slow"
    prop = LLMProposer(base_url=server, timeout=0.3)
    t0 = time.perf_counter()
    assert prop.propose(request_) == []
    assert time.perf_counter() - t0 < 1.4
    assert "timeout" in prop.errors[0] or "timed out" in prop.errors[0]


def test_connection_refused_and_config_errors(request_, monkeypatch):
    prop = LLMProposer(base_url="http://127.0.0.1:9/v1", timeout=1)
    assert prop.propose(request_) == [] and "connection error" in prop.errors[0]
    monkeypatch.delenv("EPB_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="base_url"):
        LLMProposer()
    monkeypatch.setenv("EPB_LLM_BASE_URL", "http://x/v1")
    assert LLMProposer().base_url == "http://x/v1"


def test_hostile_replies_are_counted_and_the_good_one_kept(server, request_):
    """Several completions in one reply: one honest, the rest hostile; nothing raises."""
    Handler.mode = "hostile"
    prop = LLMProposer(base_url=server, timeout=5, samples=len(HOSTILE) + 1)
    out = prop.propose(request_)
    assert [p.origin for p in out] == ["llm"] and "min_to_visited" in out[0].source
    assert prop.rejected == len(HOSTILE) and len(prop.errors) == len(HOSTILE)
    for reason in ("nested", "non-finite", "OverflowError", "imports", "time limit"):
        assert any(reason in e for e in prop.errors), (reason, prop.errors)
