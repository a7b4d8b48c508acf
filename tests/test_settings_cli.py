"""Settings from env and file; the data dir manifest; the command line end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.errors import ConfigError
from memory_core.routing import shard_of
from memory_core.settings import Settings, StorageSettings, load_settings
from memory_core.store.facts import LocalFactStore, open_manifest

ROOT = Path(__file__).resolve().parents[1]


def test_env_overrides_file_and_every_field_is_described(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "longmem.toml"
    config.write_text('[storage]\ndata_dir = "/srv/mem"\nshards = 2\n[recall]\nk = 3\n')
    monkeypatch.setenv("LONGMEM_STORAGE__SHARDS", "16")
    settings = load_settings(config)
    assert (settings.storage.data_dir, settings.storage.shards, settings.recall.k) == (
        Path("/srv/mem"),
        16,
        3,
    )

    def undescribed(model: type, prefix: str = "") -> list[str]:
        missing = []
        for name, field in model.model_fields.items():
            if not field.description:
                missing.append(prefix + name)
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                missing += undescribed(annotation, f"{prefix}{name}.")
        return missing

    assert undescribed(Settings) == []


def test_bad_settings_are_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGMEM_RECALL__K", "0")
    with pytest.raises(ConfigError):
        load_settings()
    monkeypatch.delenv("LONGMEM_RECALL__K")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError):
        load_settings(broken)


def test_ingress_autoscaling_is_read_checked_and_sizes_the_writers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGMEM_SERVE__INGRESS_AUTOSCALING", '{"min_replicas": 2, "max_replicas": 6}')
    serve = load_settings().serve
    assert serve.ingress_autoscaling is not None and serve.ingress_autoscaling.min_replicas == 2
    assert serve.most_ingress_replicas == 6  # writers take calls from up to six replicas
    monkeypatch.setenv("LONGMEM_SERVE__INGRESS_AUTOSCALING", '{"min_replicas": 3, "max_replicas": 2}')
    with pytest.raises(ConfigError, match="min_replicas 3 is above max_replicas 2"):
        load_settings()
    monkeypatch.delenv("LONGMEM_SERVE__INGRESS_AUTOSCALING")
    monkeypatch.setenv("LONGMEM_SERVE__INGRESS_REPLICAS", "3")
    assert load_settings().serve.most_ingress_replicas == 3


def test_data_dir_refuses_another_shard_count(tmp_path: Path) -> None:
    store = LocalFactStore(StorageSettings(data_dir=tmp_path, shards=2), Settings().limits, 8, "emb")
    store.close()
    with pytest.raises(ConfigError, match="shards=2"):
        open_manifest(tmp_path, 3, 8, "emb")
    with pytest.raises(ConfigError, match="embedder"):
        open_manifest(tmp_path, 2, 8, "other-embedder")


def test_routing_is_stable_across_processes() -> None:
    users = [f"user-{i}" for i in range(50)] + ["张三", "tenant:alice"]
    here = [shard_of(u, 7) for u in users]
    code = f"from memory_core.routing import shard_of; print([shard_of(u, 7) for u in {users!r}])"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(there.stdout) == here
    assert len(set(here)) == 7  # spreads over every shard


def _cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "longmem", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_cli_remember_recall_forget_sweep(tmp_path: Path) -> None:
    data = tmp_path / "d"
    out = _cli(data, "remember", "--user", "zoe", "我对海鲜过敏", "--tag", "identity")
    assert out.returncode == 0, out.stderr
    fact = json.loads(out.stdout)
    assert fact["text"] == "我对海鲜过敏" and fact["expire_at"] is None
    temp = json.loads(_cli(data, "remember", "--user", "zoe", "Meeting Thursday 3pm", "--ttl", "2d").stdout)
    assert temp["expire_at"] is not None

    hits = [
        json.loads(line)
        for line in _cli(data, "recall", "--user", "zoe", "我有什么过敏？").stdout.splitlines()
    ]
    assert hits[0]["text"] == "我对海鲜过敏" and hits[0]["score"] > 0
    assert _cli(data, "recall", "--user", "someone-else", "我有什么过敏？").stdout == ""

    due = json.loads(_cli(data, "sweep", "--dry-run", "--now", "2999-01-01T00:00:00+00:00").stdout)
    assert (due["due"], due["deleted"], due["status"]) == (1, 0, "ok")
    swept = json.loads(_cli(data, "sweep", "--now", "2999-01-01T00:00:00+00:00").stdout)
    assert (swept["deleted"], swept["status"], swept["dry_run"]) == (1, "ok", False)

    denied = _cli(data, "forget", "--user", "someone-else", str(fact["id"]))
    assert denied.returncode == 2 and denied.stderr.startswith("error:")
    assert json.loads(_cli(data, "forget", "--user", "zoe", str(fact["id"])).stdout) == {
        "deleted": [fact["id"]]
    }
    assert _cli(data, "facts", "--user", "zoe").stdout == ""


def test_cli_reports_bad_input_clearly(tmp_path: Path) -> None:
    data = tmp_path / "d"
    empty = _cli(data, "remember", "--user", "zoe", "   ")
    assert empty.returncode == 2 and "must not be empty" in empty.stderr
    bad_user = _cli(data, "recall", "--user", "a/b", "hi")
    assert bad_user.returncode == 2 and "invalid user id" in bad_user.stderr
    bad_ttl = _cli(data, "remember", "--user", "zoe", "x", "--ttl", "soon")
    assert bad_ttl.returncode == 2 and "not a duration" in bad_ttl.stderr
    assert _cli(data, "facts", "--user", "zoe").stdout == ""


def test_cli_demo_runs_on_a_throwaway_dir(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "longmem", "demo"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    assert "泉州" in out.stdout and "deleted 1 expired" in out.stdout
    assert list(tmp_path.iterdir()) == []  # nothing left behind
