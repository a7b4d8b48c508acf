"""Schemathesis over longmem's OpenAPI document: the loop shared by the bounded run in the test
suite (in-process app) and the longer one against a served URL (``python -m tests.fuzz_served``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

PUBLIC = {"GET /livez", "GET /healthz", "GET /metrics"}
# Some rules the schema does not state (user ids of letters and digits of any script, which
# Python's and JSON Schema's ``\w`` disagree on; a text blank once stripped; an expiry not after
# ``at``; a chat ending on the assistant): a valid-looking request may get a 422 for them.
# Pydantic's lax mode also takes "0.5" for a number and 1700000000 for an instant: left open.
LENIENT = [schemathesis.checks.positive_data_acceptance, schemathesis.checks.negative_data_rejection]


def fuzz(
    schema: schemathesis.BaseSchema,
    modes: list[schemathesis.GenerationMode],
    call: Callable[[schemathesis.Case], int],
    examples: int,
) -> tuple[int, Counter[str], dict[str, str]]:
    """Runs ``call`` on up to ``examples`` cases per operation and mode; returns the operations, the
    count of answers per status class, and one failure message per distinct failure."""
    statuses: Counter[str] = Counter()
    failures: dict[str, str] = {}
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        for mode in modes:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=examples, suppress_health_check=list(HealthCheck), deadline=None, database=None
            )
            def run(case: schemathesis.Case) -> None:
                try:
                    statuses[f"{call(case) // 100}xx"] += 1
                except (AssertionError, schemathesis.errors.FailureGroup) as exc:
                    statuses["failed"] += 1
                    failures.setdefault(f"{case.operation.label}: {str(exc)[:800]}", case.as_curl_command())
                except requests.RequestException as exc:  # over HTTP: no answer (a timeout, say)
                    statuses["no answer"] += 1
                    failures.setdefault(
                        f"{case.operation.label}: {type(exc).__name__} {exc}", case.as_curl_command()
                    )
                except Exception as exc:  # the in-process app raised: a 500 over HTTP
                    statuses["5xx"] += 1
                    failures.setdefault(
                        f"{case.operation.label}: {type(exc).__name__} {exc}", case.as_curl_command()
                    )

            try:
                run()
            except Unsatisfiable:  # nothing to make invalid: no parameters, no body
                pass
    return len(operations), statuses, failures


@dataclass
class Run:
    """What one fuzzing pass saw."""

    operations: int
    statuses: Counter[str]
    failures: dict[str, str]

    def report(self, label: str) -> str:
        """One line of figures."""
        cases = sum(self.statuses.values())
        return f"{label}: {self.operations} operations, {cases} cases, {dict(self.statuses)}"


def with_key(schema: schemathesis.BaseSchema, headers: dict[str, str], examples: int, **send: float) -> Run:
    """Positive and negative cases with a valid key: each answer must fit its documented schema.
    ``send`` goes to each request (``timeout=`` over HTTP: the LLM's calls take longer than the
    default 10 s on a CPU)."""
    modes = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
    return Run(
        *fuzz(
            schema,
            modes,
            lambda case: case.call_and_validate(headers=headers, excluded_checks=LENIENT, **send).status_code,
            examples,
        )
    )


def without_key(schema: schemathesis.BaseSchema, examples: int, **send: float) -> Run:
    """Positive cases with no key: every operation but the public probes must answer 401."""
    reached: set[str] = set()

    def call(case: schemathesis.Case) -> int:
        status = case.call(**send).status_code
        if case.operation.label not in PUBLIC:
            assert status == 401, f"{case.operation.label} answered {status} without a key"
        reached.add(case.operation.label)
        return status

    run = Run(*fuzz(schema, [schemathesis.GenerationMode.POSITIVE], call, examples))
    for label in sorted({op.ok().label for op in schema.get_all_operations()} - reached):
        run.failures[f"{label}: never called"] = ""
    return run
