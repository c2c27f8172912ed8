"""The ``[temporal]`` table of the service configuration (docs/DURABLE.md "Configuration")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aptix_pipeline.adapters.config.service import (
    ConfigError,
    TemporalConfig,
    parse_service_config,
)
from aptix_pipeline.adapters.temporal import DEFAULT_TASK_QUEUE


def _temporal(table: dict[str, Any], env: dict[str, str] | None = None) -> TemporalConfig | None:
    return parse_service_config(
        {"temporal": table}, source="aptix.toml", base_dir="/srv/aptix", env=env or {}
    ).temporal


@pytest.mark.decision("D550")
def test_the_table_gives_the_address_the_queue_and_the_workers_settings() -> None:
    found = _temporal(
        {
            "address": "temporal.internal:7233",
            "namespace": "prod",
            "task_queue": "turns",
            "blobs": "blobs",
            "identity": "worker-a",
            "heartbeat_seconds": 4,
            "model_timeout_seconds": 60,
            "commit_attempts": 2,
            "turn_timeout_seconds": 900,
            "max_concurrent_turns": 8,
        }
    )
    assert found == TemporalConfig(
        address="temporal.internal:7233",
        namespace="prod",
        task_queue="turns",
        blobs=Path("/srv/aptix/blobs"),
        identity="worker-a",
        heartbeat_seconds=4.0,
        model_timeout_seconds=60.0,
        commit_attempts=2,
        turn_timeout_seconds=900.0,
        max_concurrent_turns=8,
    )


@pytest.mark.decision("D550")
def test_without_the_table_turns_run_in_process_and_the_defaults_match_the_runtimes() -> None:
    assert parse_service_config({}, env={}).temporal is None
    found = _temporal({"address": "127.0.0.1:7233"})
    assert found is not None
    assert (found.namespace, found.task_queue, found.blobs) == ("default", DEFAULT_TASK_QUEUE, None)


@pytest.mark.decision("D550")
def test_the_address_may_come_from_the_environment() -> None:
    found = _temporal({"address_env": "TEMPORAL_ADDRESS"}, {"TEMPORAL_ADDRESS": " [::1]:7233 "})
    assert found is not None
    assert found.address == "[::1]:7233"


@pytest.mark.decision("D550")
@pytest.mark.parametrize(
    ("table", "env", "message"),
    [
        ({}, {}, "[temporal]: give exactly one of address and address_env"),
        (
            {"address": "a:1", "address_env": "X"},
            {},
            "[temporal]: give exactly one of address and address_env",
        ),
        (
            {"address": "http://temporal:7233"},
            {},
            "[temporal].address: 'http://temporal:7233' is not host:port",
        ),
        ({"address": "temporal"}, {}, "[temporal].address: 'temporal' is not host:port"),
        (
            {"address_env": "NOPE"},
            {},
            "[temporal].address_env: environment variable NOPE is not set",
        ),
        (
            {"address_env": "ADDR"},
            {"ADDR": "nohost"},
            "[temporal].address_env: $ADDR: 'nohost' is not host:port",
        ),
        (
            {"address": "a:1", "heartbeat_seconds": 0},
            {},
            "[temporal].heartbeat_seconds: Input should be greater than 0",
        ),
        (
            {"address": "a:1", "commit_attempts": 0},
            {},
            "[temporal].commit_attempts: Input should be greater than or equal to 1",
        ),
        (
            {"address": "a:1", "task_queue": ""},
            {},
            "[temporal].task_queue: String should have at least 1 character",
        ),
        ({"address": "a:1", "queue": "x"}, {}, "[temporal].queue: Extra inputs are not permitted"),
    ],
)
def test_a_wrong_table_is_a_config_error_naming_the_key(
    table: dict[str, Any], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        _temporal(table, env)
    assert str(raised.value).startswith(f"aptix.toml: {message}")
