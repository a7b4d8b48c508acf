"""The main-environment side of mem0 as a benchmark peer: its runner, and an LLM server for it.

mem0 (mem0ai 2.2.1) lives in its own environment, ``.venv-mem0`` (``make mem0-env``), so that
its pins never constrain longmem's. :func:`run_mem0` hands a request to
``peers/mem0/runner.py`` inside that environment and returns its out JSON; the runner's
module docstring says what each subcommand does and what mem0 does underneath.
:class:`LlamaServer` serves longmem's GGUF through llama-cpp-python's OpenAI-compatible server,
which is how mem0's ``openai`` LLM provider reaches the same model longmem uses.

Errors::

    LongmemError
    ├── ConfigError
    │   └── Mem0NotBuiltError   .venv-mem0 is missing: run `make mem0-env`
    ├── LLMUnavailableError
    │   └── LlamaServerError    the server exited or did not answer in time (with its log tail)
    └── Mem0RunnerError         the runner failed or timed out (with its stderr tail)
"""

from __future__ import annotations

import collections
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

from memory_core.errors import ConfigError, LLMUnavailableError, LongmemError

REPO = Path(__file__).resolve().parents[1]
MEM0_VENV = REPO / ".venv-mem0"
MEM0_PYTHON = MEM0_VENV / "bin" / "python"
RUNNER = REPO / "peers" / "mem0" / "runner.py"
SUBCOMMANDS = ("locomo", "search")
_TAIL_LINES = 40
_LOG_TAIL_CHARS = 3000


class Mem0NotBuiltError(ConfigError):
    """mem0's environment has not been built."""

    def __init__(self) -> None:
        super().__init__(f"mem0 is not built ({MEM0_PYTHON} is missing): run `make mem0-env`")


class Mem0RunnerError(LongmemError):
    """The mem0 runner exited with an error or ran past its time limit."""

    def __init__(self, subcommand: str, returncode: int | None, stderr_tail: str) -> None:
        self.subcommand = subcommand
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        how = "timed out" if returncode is None else f"exited with {returncode}"
        super().__init__(f"mem0 runner {subcommand!r} {how}; last stderr lines:\n{stderr_tail}")


class LlamaServerError(LLMUnavailableError):
    """llama-cpp-python's server exited early or did not answer before its deadline."""

    def __init__(self, reason: str, log_tail: str) -> None:
        self.reason = reason
        self.log_tail = log_tail
        super().__init__(f"llama_cpp.server {reason}; log tail:\n{log_tail}")


def mem0_available() -> bool:
    """Whether ``make mem0-env`` has finished (its stamp is written after the last install)."""
    return MEM0_PYTHON.exists() and (MEM0_VENV / ".installed").exists()


def _relay(stream: IO[bytes], tail: collections.deque[str]) -> None:
    # Pass the runner's progress through as it comes, and keep the end for an error message.
    for raw in stream:
        line = raw.decode("utf-8", errors="replace")
        sys.stderr.write(line)
        sys.stderr.flush()
        tail.append(line)


def run_mem0(subcommand: str, request: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
    """Run ``peers/mem0/runner.py SUBCOMMAND`` in mem0's environment and return its out JSON.

    Args:
        subcommand: ``"locomo"`` or ``"search"``; the runner's docstring gives each request.
        request: the request, written to a temporary JSON file for the runner.
        timeout_s: wall-clock limit for the runner; ``None`` waits as long as it takes.

    Returns:
        The runner's out JSON.

    Raises:
        Mem0NotBuiltError: ``.venv-mem0`` is missing.
        ValueError: ``subcommand`` is not one of :data:`SUBCOMMANDS`.
        Mem0RunnerError: the runner exited non-zero, wrote no output, or passed ``timeout_s``;
            the message holds the tail of its stderr.
    """
    if subcommand not in SUBCOMMANDS:
        raise ValueError(f"unknown mem0 subcommand {subcommand!r}; expected one of {SUBCOMMANDS}")
    if not mem0_available():
        raise Mem0NotBuiltError()
    with tempfile.TemporaryDirectory(prefix="longmem-mem0-") as tmp:
        request_path = Path(tmp) / "request.json"
        out_path = Path(tmp) / "out.json"
        request_path.write_text(json.dumps(request, ensure_ascii=False), encoding="utf-8")
        command = [str(MEM0_PYTHON), str(RUNNER), subcommand, "--request", str(request_path)]
        command += ["--out", str(out_path)]
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        proc = subprocess.Popen(command, cwd=REPO, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None  # stderr=PIPE
        relay = threading.Thread(target=_relay, args=(proc.stderr, tail), daemon=True)
        relay.start()
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            returncode = None
        relay.join(timeout=10)
        if returncode != 0 or not out_path.exists():
            raise Mem0RunnerError(subcommand, returncode, "".join(tail).rstrip())
        out: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
        return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """llama-cpp-python's OpenAI-compatible server on a free loopback port, for one GGUF.

    Use as a context manager; ``url`` (``http://127.0.0.1:PORT/v1``) and ``model`` (the name
    the server answers to) are set once it is ready. The server's output goes to a log file
    whose tail is raised with :class:`LlamaServerError` if it fails to start.

    ``n_ctx`` is 16384 by default, not 8192: mem0 2.2.1's extraction system prompt alone is
    about 7,900 Qwen tokens, and with the turn, the last messages and the nearest memories one
    call passes 8,192. The server keeps the previous prompt's KV cache, so that shared prefix is
    evaluated once, not on every call. ``--logits_all false``: by default the server keeps the
    logits of every prompt token (n_ctx x vocabulary floats, 10 GB at 16k for Qwen); mem0 never
    asks for them.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        n_ctx: int = 16384,
        n_threads: int = 2,
        start_timeout_s: float = 180.0,
        log_path: Path | None = None,
    ) -> None:
        """Args:
        model_path: the GGUF to serve (e.g. ``ensure_qwen(settings.llm.models_dir)``).
        n_ctx: context size in tokens.
        n_threads: CPU threads for generation and prompt evaluation.
        start_timeout_s: how long to wait for ``GET /v1/models`` to answer.
        log_path: where the server's output goes; a temporary file when ``None``.
        """
        self.model_path = model_path
        self.model = model_path.stem
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.start_timeout_s = start_timeout_s
        self.log_path = log_path
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL_CHARS:]

    def __enter__(self) -> LlamaServer:
        """Start the server and wait until it answers.

        Raises:
            LlamaServerError: the server exited or did not answer within ``start_timeout_s``
                (it is stopped first).
        """
        if not self.model_path.is_file():
            raise LlamaServerError(f"has no model file at {self.model_path}", "(not started)")
        if self.log_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="longmem-llama-server-")
            self.log_path = Path(self._tmp.name) / "server.log"
        port = free_port()
        command = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model_path), "--model_alias", self.model,
            "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            # The server keeps logits of every prompt token by default: n_ctx x 151,936 floats.
            "--logits_all", "false",
            "--host", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        url = f"http://127.0.0.1:{port}/v1"
        try:
            self._wait_ready(url)
        except BaseException:
            self._stop()
            raise
        self.url = url
        return self

    def _wait_ready(self, url: str) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LlamaServerError(
                    f"exited with {self._proc.returncode} while starting", self._log_tail()
                )
            try:
                if httpx.get(f"{url}/models", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet
            time.sleep(0.25)
        raise LlamaServerError(f"did not answer within {self.start_timeout_s:.0f} s", self._log_tail())

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=15)
        self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.log_path = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server (terminate, then kill after 15 s)."""
        self._stop()
        self.url = ""
