"""Run memory scenarios (``../shared/eval/FORMAT.md``) and report what passed.

A scenario is a user's history (``turns``, ``forget``, ``clock`` steps) with checks
(``recall``, ``absent``, ``profile``). All scenarios of a file run in order against one
service, each under its own user id derived from the scenario id. The runner talks to a
:class:`MemoryTarget`, so the same file runs in-process or against a server.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from memory_core.errors import ValidationError
from memory_core.models import Role, Turn

CHECKED_OPS = ("recall", "absent", "profile")
ACTION_OPS = ("turns", "forget", "clock")


class MemoryTarget(Protocol):
    """What the runner needs from a memory service."""

    def ingest(self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime) -> None:
        """Feed turns through the write path and wait until writing is done."""
        ...

    def recall_texts(self, user_id: str, query: str, k: int) -> list[str]:
        """Texts the prompt builder would get for ``query``: top-k facts and the profile."""
        ...

    def profile_text(self, user_id: str) -> str:
        """The user's profile as text."""
        ...

    def advance_and_sweep(self, to: datetime) -> None:
        """Move the service clock to ``to`` and run the expiry sweep."""
        ...

    def llm_usage(self) -> tuple[int, float]:
        """LLM calls and LLM seconds so far."""
        ...


def user_id_for(scenario_id: str) -> str:
    """A valid, collision-free user id derived from a scenario id."""
    slug = re.sub(r"[^\w.-]+", "-", scenario_id)[:60].strip("-") or "scenario"
    digest = hashlib.blake2b(scenario_id.encode("utf-8"), digest_size=4).hexdigest()
    return f"scn-{slug}-{digest}"


def load_scenarios(path: Path) -> list[dict[str, Any]]:
    """Read a JSON Lines scenario file.

    Raises:
        ValidationError: a line is not JSON or misses ``id``/``steps``.
    """
    scenarios = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            scenario = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{path}:{number}: not JSON: {exc}") from exc
        if (
            not isinstance(scenario, dict)
            or "id" not in scenario
            or not isinstance(scenario.get("steps"), list)
        ):
            raise ValidationError(f"{path}:{number}: a scenario needs an id and a list of steps")
        scenarios.append(scenario)
    return scenarios


@dataclass
class _Tally:
    steps: int = 0
    passed: int = 0

    def add(self, ok: bool) -> None:
        self.steps += 1
        self.passed += ok

    def as_dict(self) -> dict[str, int]:
        return {"steps": self.steps, "passed": self.passed}


@dataclass
class ScenarioReport:
    """Results of a scenario file."""

    total: _Tally = field(default_factory=_Tally)
    by_op: dict[str, _Tally] = field(default_factory=dict)
    by_lang: dict[str, _Tally] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    user_turns: int = 0
    llm_calls: int = 0
    llm_seconds: float = 0.0
    wall_seconds: float = 0.0

    def record(self, lang: str, op: str, ok: bool) -> None:
        self.total.add(ok)
        self.by_op.setdefault(op, _Tally()).add(ok)
        self.by_lang.setdefault(lang, _Tally()).add(ok)

    def as_dict(self) -> dict[str, Any]:
        """The JSON report (a public interface: keep field names stable)."""

        def rate(t: _Tally) -> dict[str, Any]:
            return {**t.as_dict(), "pass_rate": round(t.passed / t.steps, 4) if t.steps else None}

        return {
            "summary": {
                "steps": self.total.steps,
                "passed": self.total.passed,
                "pass_rate": round(self.total.passed / self.total.steps, 4) if self.total.steps else None,
                "by_op": {op: t.as_dict() for op, t in sorted(self.by_op.items())},
                "by_lang": {lang: rate(t) for lang, t in sorted(self.by_lang.items())},
                "llm_calls": self.llm_calls,
                "llm_seconds": round(self.llm_seconds, 2),
                "user_turns": self.user_turns,
                "llm_calls_per_user_turn": round(self.llm_calls / self.user_turns, 3)
                if self.user_turns
                else None,
                "wall_seconds": round(self.wall_seconds, 2),
            },
            "failures": self.failures,
        }

    def table(self) -> str:
        """A readable summary."""
        data = self.as_dict()["summary"]
        lines = [f"{'group':<12} {'steps':>6} {'passed':>7} {'rate':>7}"]
        rows: list[tuple[str, _Tally]] = [("all", self.total)]
        rows += [(f"op:{op}", t) for op, t in sorted(self.by_op.items())]
        rows += [(f"lang:{lang}", t) for lang, t in sorted(self.by_lang.items())]
        for name, t in rows:
            pct = f"{100 * t.passed / t.steps:.1f}%" if t.steps else "-"
            lines.append(f"{name:<12} {t.steps:>6} {t.passed:>7} {pct:>7}")
        lines.append(
            f"user turns {data['user_turns']}, LLM calls {data['llm_calls']} "
            f"({data['llm_calls_per_user_turn']} per user turn), LLM {data['llm_seconds']} s, "
            f"wall {data['wall_seconds']} s"
        )
        for failure in self.failures:
            lines.append(
                f"FAIL {failure['scenario']} step {failure['step']} {failure['op']}: "
                f"{failure['query']!r} -> {failure['recalled']}"
            )
        return "\n".join(lines)


def _contains_any(texts: Iterable[str], needles: Sequence[str]) -> bool:
    lowered = [t.casefold() for t in texts]
    return any(n.casefold() in t for n in needles for t in lowered)


def run_scenarios(
    target: MemoryTarget,
    scenarios: Sequence[dict[str, Any]],
    progress: Callable[[str], None] | None = None,
) -> ScenarioReport:
    """Run every scenario in order against ``target``; ``progress`` gets a line per scenario.

    Raises:
        ValidationError: a step has an unknown op or misses a field.
    """
    report = ScenarioReport()
    start = time.perf_counter()
    calls0, seconds0 = target.llm_usage()
    for scenario in scenarios:
        user = user_id_for(str(scenario["id"]))
        lang = str(scenario.get("lang", "unknown"))
        passed_before, steps_before, began = report.total.passed, report.total.steps, time.perf_counter()
        for number, step in enumerate(scenario["steps"], 1):
            op = step.get("op")
            try:
                _run_step(target, report, user, lang, str(scenario["id"]), number, step)
            except KeyError as exc:
                raise ValidationError(
                    f"scenario {scenario['id']!r} step {number} ({op}) misses {exc}"
                ) from exc
        if progress is not None:
            passed, checked = report.total.passed - passed_before, report.total.steps - steps_before
            seconds = time.perf_counter() - began
            progress(f"{scenario['id']}: {passed}/{checked} checks passed ({seconds:.1f} s)")
    calls1, seconds1 = target.llm_usage()
    report.llm_calls, report.llm_seconds = calls1 - calls0, seconds1 - seconds0
    report.wall_seconds = time.perf_counter() - start
    return report


def _run_step(
    target: MemoryTarget, report: ScenarioReport, user: str, lang: str, sid: str, number: int, step: dict
) -> None:
    op = step["op"]
    if op == "turns":
        at = datetime.fromisoformat(step["time"])
        turns = [
            Turn(role=Role(t["role"]), content=t["content"], at=at, turn_id=f"{step.get('session', 's')}:{i}")
            for i, t in enumerate(step["turns"])
        ]
        report.user_turns += sum(t.role is Role.USER for t in turns)
        target.ingest(user, str(step.get("session", "s")), turns, at)
    elif op == "forget":
        # Said in a new turn, as FORMAT.md has it: the write path must see that it asks to forget.
        at = datetime.fromisoformat(step["time"])
        said = Turn(role=Role.USER, content=step["utterance"], at=at, turn_id=f"forget:{number}")
        report.user_turns += 1
        target.ingest(user, f"forget-{number}", [said], at)
    elif op == "clock":
        target.advance_and_sweep(datetime.fromisoformat(step["time"]))
    elif op in ("recall", "absent"):
        recalled = target.recall_texts(user, step["query"], int(step.get("k", 5)))
        if op == "recall":
            ok = _contains_any(recalled, step["expect_any"])
        else:
            ok = not _contains_any(recalled, step["forbid"])
        report.record(lang, op, ok)
        if not ok:
            report.failures.append(
                {"scenario": sid, "step": number, "op": op, "query": step["query"], "recalled": recalled}
            )
    elif op == "profile":
        profile = target.profile_text(user)
        ok = _contains_any([profile], step["expect_any"])
        report.record(lang, op, ok)
        if not ok:
            report.failures.append(
                {"scenario": sid, "step": number, "op": op, "query": "", "recalled": [profile]}
            )
    else:
        raise ValidationError(f"scenario {sid!r} step {number}: unknown op {op!r}")
