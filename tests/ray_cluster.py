"""A Ray cluster of several nodes on this one machine, for what must work across nodes.

Each node is a ``ray start --block`` process in a process group of its own, with its own
resources. Stopping ends those groups (SIGTERM, then SIGKILL); never ``ray stop``, which ends
every Ray on the machine, the test session's own included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.serve_app import free_port

RAY = str(Path(sys.executable).with_name("ray"))
# A throwaway cluster on loopback: no token to hand from the head to the other nodes.
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}
_STARTED = "Ray runtime started."


@dataclass
class LocalCluster:
    """The head's address and every node's ``ray start`` process."""

    root: Path
    address: str = ""
    ray_dir: Path | None = None
    nodes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def _start(self, name: str, args: list[str], resources: dict[str, float], cpus: int) -> None:
        log = self.root / f"{name}.log"
        command = [RAY, "start", "--block", "--disable-usage-stats", "--num-cpus", str(cpus)]
        command += ["--resources", json.dumps(resources), "--object-store-memory", str(200 << 20), *args]
        # Nodes on one machine must not share the ports Ray would otherwise fix.
        command += ["--dashboard-agent-listen-port", str(free_port())]
        with log.open("wb") as out:
            node = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=ENV, start_new_session=True
            )
        self.nodes[name] = node
        deadline = time.monotonic() + 120
        while _STARTED not in log.read_text(errors="replace"):
            if node.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"ray node {name} did not start:\n{log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.5)

    def start_head(self, resources: dict[str, float], cpus: int = 2) -> None:
        port = free_port()
        # Ray's socket paths live under its temp dir and may not pass 107 bytes: a short one.
        self.ray_dir = Path(tempfile.mkdtemp(prefix="lmray-"))
        args = [
            "--head",
            "--port",
            str(port),
            "--temp-dir",
            str(self.ray_dir),
            "--include-dashboard",
            "false",
        ]
        self._start("head", args, resources, cpus)
        self.address = f"127.0.0.1:{port}"

    def add_node(self, name: str, resources: dict[str, float], cpus: int = 1) -> None:
        self._start(name, ["--address", self.address], resources, cpus)

    def python(self, code: str, timeout: float = 120) -> str:
        """Run ``code`` in a fresh driver joined to the cluster (``ADDRESS`` is defined); its stdout."""
        done = subprocess.run(
            [sys.executable, "-c", f"ADDRESS = {self.address!r}\n{code}"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=ENV,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def kill_node(self, name: str) -> None:
        """kill -9 of every process of node ``name``: a machine that died."""
        node = self.nodes.pop(name)
        os.killpg(node.pid, signal.SIGKILL)
        node.wait()

    def stop(self) -> None:
        for node in reversed(self.nodes.values()):
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for node in self.nodes.values():
            try:
                node.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            # Whatever the node started (raylet, workers) is in its group too.
            try:
                os.killpg(node.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            node.wait()
        if self.ray_dir is not None:
            shutil.rmtree(self.ray_dir, ignore_errors=True)
