"""A consumer group's own settings (KIP-848 group configs, config resource type GROUP):
`gregor configs --entity-type groups` and confluent-kafka's AdminClient set, describe and
delete `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` for a group, whether
or not it exists; values outside the broker's `group.consumer.min.*`/`max.*` bounds are refused
with INVALID_CONFIG and change nothing."""

import subprocess

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)

from clients import admin
from conftest import gregor_bin

BOUNDS = {
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


def configs(broker, *args, check=True):
    p = subprocess.run([gregor_bin(), "configs", "--bootstrap-server", broker.bootstrap,
                        "--entity-type", "groups", *args],
                       capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, f"gregor configs {' '.join(args)}: {p.returncode}\n" \
                                  f"{p.stdout}\n{p.stderr}"
    return p


def described(a, group):
    res = ConfigResource(ResourceType.GROUP, group)
    entries = a.describe_configs([res])[res].result(30)
    return {k: (e.value, e.source) for k, e in entries.items()}


@pytest.mark.timeout(120)
def test_group_configs_set_describe_and_delete(start_broker):
    broker = start_broker(overrides=BOUNDS)
    group = "orders-app"
    configs(broker, "--entity-name", group, "--alter", "--add-config",
            "consumer.session.timeout.ms=20000,consumer.heartbeat.interval.ms=2000")
    out = configs(broker, "--entity-name", group, "--describe").stdout
    assert "consumer.session.timeout.ms=20000" in out, out
    assert "consumer.heartbeat.interval.ms=2000" in out, out

    a = admin(broker)  # kept alive until every answer: a destroyed client fails its futures
    seen = described(a, group)
    # 8: GROUP_CONFIG, as Kafka names a group's own value.
    assert seen["consumer.session.timeout.ms"][0] == "20000", seen
    assert int(seen["consumer.session.timeout.ms"][1]) == 8, seen
    # A group never configured reads the broker's settings.
    other = described(a, "never-configured")
    assert other["consumer.session.timeout.ms"][0] == "45000", other
    assert other["consumer.heartbeat.interval.ms"][0] == "5000", other

    # Out of the broker's bounds, or not below the session timeout: refused, nothing changes.
    bad = configs(broker, "--entity-name", group, "--alter", "--add-config",
                  "consumer.session.timeout.ms=1000", check=False)
    assert bad.returncode != 0, bad.stdout
    assert "greater than or equal to group.consumer.min.session.timeout.ms" in bad.stderr, \
        bad.stderr
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.heartbeat.interval.ms", "20000",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        a.incremental_alter_configs([res])[res].result(30)
    assert "INVALID_CONFIG" in str(e.value) or "nvalid" in str(e.value), e.value
    assert described(a, group)["consumer.heartbeat.interval.ms"][0] == "2000"

    configs(broker, "--entity-name", group, "--alter", "--delete-config",
            "consumer.session.timeout.ms,consumer.heartbeat.interval.ms")
    seen = described(a, group)
    assert seen["consumer.session.timeout.ms"][0] == "45000", seen
    assert int(seen["consumer.session.timeout.ms"][1]) != 8, seen
