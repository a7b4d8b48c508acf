"""cluster.yaml against Ray's launcher schema and against README's cluster settings: the resources
the settings name are advertised by a worker group, and that group mounts the data dir."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memory_core.settings import Settings

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]


def _cluster() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())  # type: ignore[no-any-return]


def _readme_settings() -> Settings:
    """The settings file README's "On a Ray cluster" writes on the head."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### On a Ray cluster\n", 1)[1].split("\n### ", 1)[0]
    found = re.search(r"<<'TOML'\n(.*?)\nTOML\n", section, re.S)
    assert found, "README's cluster section has no settings file"
    return Settings(**tomllib.loads(found.group(1)))


def _workers(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    types: dict[str, dict[str, Any]] = cluster["available_node_types"]
    return {name: spec for name, spec in types.items() if name != cluster["head_node_type"]}


def test_ray_up_accepts_it() -> None:
    # `ray up` validates against this schema (integer resources, known keys) before starting anything.
    ray = importlib.util.find_spec("ray")
    if ray is None or ray.origin is None:
        pytest.skip("ray is not installed")
    schema = json.loads((Path(ray.origin).parent / "autoscaler" / "ray-schema.json").read_text())
    cluster = _cluster()
    jsonschema.validate(cluster, schema)
    assert cluster["head_node_type"] in cluster["available_node_types"]
    workers = _workers(cluster)
    for name, spec in workers.items():
        assert spec.get("min_workers", 0) <= spec.get("max_workers", 0), name
    # The autoscaler never runs more workers than the cluster's max_workers, so every group's
    # minimum must fit in it.
    assert sum(spec.get("min_workers", 0) for spec in workers.values()) <= cluster["max_workers"]


def test_shard_resources_are_advertised_by_a_worker_group() -> None:
    settings = _readme_settings()
    workers = _workers(_cluster())
    assert settings.serve.shard_resources
    for resource in settings.serve.shard_resources:
        groups = [name for name, spec in workers.items() if resource in spec["resources"]]
        # A shard asking for a resource no node type has would wait for a node forever.
        assert groups, f"no worker group advertises {resource}"


def test_shard_nodes_mount_the_data_dir() -> None:
    # On a node that does not mount the share, a restarted shard would find an empty data dir.
    settings = _readme_settings()
    cluster = _cluster()
    for name, spec in _workers(cluster).items():
        if not set(spec["resources"]) & set(settings.serve.shard_resources):
            continue
        commands = spec.get("initialization_commands", cluster.get("initialization_commands", []))
        mounted = [
            Path(shlex.split(command)[-1]) for command in commands if re.search(r"\bmount -t nfs", command)
        ]
        assert any(settings.storage.data_dir.is_relative_to(point) for point in mounted), (
            f"{name} nodes do not mount {settings.storage.data_dir}"
        )
