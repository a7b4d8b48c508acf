"""Shards spread over data nodes: which node each shard goes to, and the guards that keep a
changed placement from opening shards on nodes without their files (the real cluster is in
tests/test_multinode.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.stores import (
    _check_files_there,
    _check_no_stray_shards,
    data_placement,
    shard_data_dir,
    shard_resource,
)
from memory_core.errors import ConfigError
from memory_core.settings import ServeSettings, Settings, StorageSettings
from memory_core.store.facts import open_manifest, read_manifest, shard_dir

SPREAD = ["longmem_data_a", "longmem_data_b"]


def test_shard_i_goes_to_entry_i_mod_n_and_one_resource_may_be_a_string(tmp_path: Path) -> None:
    assert [shard_resource(SPREAD, n) for n in range(4)] == SPREAD * 2
    assert shard_resource([], 3) is None
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path / "a", node_data_dirs={SPREAD[1]: tmp_path / "b"}),
        serve=ServeSettings(shard_resources=SPREAD),
    )
    assert data_placement(settings, 3) == {"num_cpus": 0, "resources": {SPREAD[1]: 0.001}}
    assert data_placement(settings) == {"num_cpus": 0, "resources": {SPREAD[0]: 0.001}}
    assert [shard_data_dir(settings, n) for n in range(3)] == [tmp_path / "a", tmp_path / "b", tmp_path / "a"]
    with pytest.raises(ValueError, match="now serve.shard_resources"):
        ServeSettings.model_validate({"shard_resource": "longmem_data"})
    assert ServeSettings.model_validate({"shard_resources": "a, b"}).shard_resources == ["a", "b"]
    assert ServeSettings.model_validate({"shard_resources": "longmem_data"}).shard_resources == [
        "longmem_data"
    ]


def test_the_manifest_keeps_the_placement_and_refuses_another(tmp_path: Path) -> None:
    open_manifest(tmp_path, 4, 384, "e", SPREAD)
    assert read_manifest(tmp_path)["placement"] == SPREAD  # type: ignore[index]
    open_manifest(tmp_path, 4, 384, "e", SPREAD)
    # A store opened in one process would create the other node's shards here, empty.
    with pytest.raises(ConfigError, match="ask the server"):
        open_manifest(tmp_path, 4, 384, "e")
    with pytest.raises(ConfigError, match="shards would open on nodes without their files"):
        open_manifest(tmp_path, 4, 384, "e", list(reversed(SPREAD)))
    # A data dir made for one node learns its placement when it is spread.
    single = tmp_path / "single"
    open_manifest(single, 4, 384, "e", ["longmem_data"])
    assert "placement" not in read_manifest(single)  # type: ignore[operator]


def test_a_node_holding_another_nodes_shard_refuses_to_open(tmp_path: Path) -> None:
    shard_dir(tmp_path, 0).mkdir(parents=True)
    shard_dir(tmp_path, 2).mkdir(parents=True)
    _check_no_stray_shards(tmp_path, 0, 4, SPREAD)  # shards 0 and 2 both belong on node a
    shard_dir(tmp_path, 1).mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds shard 1"):
        _check_no_stray_shards(tmp_path, 0, 4, SPREAD)
    _check_no_stray_shards(tmp_path, 0, 4, [])  # one machine: every shard is here


def test_a_restarted_shard_refuses_a_node_without_its_files(tmp_path: Path) -> None:
    _check_files_there(tmp_path, 1, restarted=False)  # a new shard: its directory is made
    with pytest.raises(ConfigError, match="does not hold it"):
        _check_files_there(tmp_path, 1, restarted=True)  # the share is not mounted here
    shard_dir(tmp_path, 1).mkdir(parents=True)
    _check_files_there(tmp_path, 1, restarted=True)
