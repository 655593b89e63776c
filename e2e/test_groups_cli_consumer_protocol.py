"""`gregor groups` on a KIP-848 consumer group (`group.protocol=consumer`, confluent-kafka): two
members consume and commit, then --describe (offsets and lag per partition, the owning member),
--members --verbose (member epochs, current and target assignments), --state [--verbose]
(assignor, group and target assignment epochs), --list [--type], and --delete once the members
have closed. A classic group beside it is still described as before."""

import subprocess
import threading

import pytest
from confluent_kafka import Consumer

from clients import conf, create_topic, produce
from conftest import gregor_bin, wait_until

FAST_GROUPS = {
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
TOPIC, PARTITIONS, PER_PARTITION = "cli-kip848", 4, 5


def gregor(broker, *args, check=True):
    p = subprocess.run([gregor_bin(), "groups", "--bootstrap-server", broker.bootstrap, *args],
                       capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, f"gregor groups {' '.join(args)}: {p.returncode}\n" \
                                  f"{p.stdout}\n{p.stderr}"
    return p


def rows(text):
    """The table's lines split on whitespace, header first, blank lines left out."""
    return [line.split() for line in text.splitlines() if line.strip()]


class Member:
    """A confluent-kafka consumer in its own thread that commits each record it reads."""

    def __init__(self, broker, group, client_id, protocol):
        extra = {"group.id": group, "client.id": client_id, "enable.auto.commit": False,
                 "auto.offset.reset": "earliest", "group.protocol": protocol}
        if protocol == "classic":
            extra.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        self.client_id = client_id
        self.consumer = Consumer(conf(broker, extra))
        self.read = 0
        self.errors = []
        self.member_id = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.consumer.subscribe([TOPIC])
        self.thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            msg = self.consumer.poll(0.1)
            self.member_id = self.consumer.memberid()
            if msg is None:
                continue
            if msg.error():
                self.errors.append(msg.error())
                continue
            self.consumer.commit(message=msg, asynchronous=False)
            self.read += 1

    def close(self):
        self._stop.set()
        self.thread.join(20)
        assert not self.thread.is_alive(), "the member did not stop polling"
        self.consumer.close()
        assert not self.errors, self.errors


def start_members(broker, group, protocol):
    members = [Member(broker, group, f"{group}-{i}", protocol).start() for i in (1, 2)]
    # Done when every record is read and committed and each member owns half the partitions.
    def settled():
        if sum(m.read for m in members) < PARTITIONS * PER_PARTITION:
            return None
        offsets = rows(gregor(broker, "--describe", "--group", group).stdout)
        owners = {r[6] for r in offsets[1:]}
        lags = {r[5] for r in offsets[1:]}
        return offsets if len(offsets) == PARTITIONS + 1 and lags == {"0"} and \
            owners == {m.member_id for m in members} else None

    offsets = wait_until(settled, 60, f"group {group} to read and commit everything")
    return members, offsets


@pytest.mark.timeout(240)
def test_groups_cli_on_a_consumer_group(start_broker):
    broker = start_broker(overrides=FAST_GROUPS)
    create_topic(broker, TOPIC, PARTITIONS)
    produce(broker, TOPIC, [{"partition": p, "value": b"v%d" % i}
                            for p in range(PARTITIONS) for i in range(PER_PARTITION)])
    group, classic = "cli-848", "cli-classic"
    members, offsets = start_members(broker, group, "consumer")
    classic_members, _ = start_members(broker, classic, "classic")
    ids = {m.member_id: m for m in members}

    # --describe: a row per partition with its committed offset, lag and owning member.
    assert offsets[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                          "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert sorted(int(r[2]) for r in offsets[1:]) == list(range(PARTITIONS))
    for r in offsets[1:]:
        assert r[:2] == [group, TOPIC] and r[3:6] == [str(PER_PARTITION)] * 2 + ["0"], r
        assert r[7].startswith("/") and r[8] == ids[r[6]].client_id, r

    # --members --verbose: Kafka 4's columns for a consumer group; settled, each member's
    # current assignment is its target, and its epoch the target assignment epoch.
    state = rows(gregor(broker, "--describe", "--group", group, "--state", "--verbose").stdout)
    assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                        "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    g, _, _, strategy, st, group_epoch, target_epoch, n = state[1]
    assert (g, strategy, st, n) == (group, "uniform", "Stable", "2"), state
    assert int(group_epoch) >= 2 and target_epoch == group_epoch, state
    table = rows(gregor(broker, "--describe", "--group", group, "--members", "--verbose").stdout)
    assert table[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                        "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                        "TARGET-ASSIGNMENT"]
    owned = []
    for r in table[1:]:
        assert r[0] == group and r[1] in ids and r[4] == "2", r
        assert r[5] == target_epoch and r[7] == target_epoch and r[6] == r[8], r
        topic, parts = r[6].split(":")
        assert topic == TOPIC, r
        owned += [int(p) for p in parts.split(",")]
    assert sorted(owned) == list(range(PARTITIONS)) and len(table) == 3, table

    # --state without --verbose: the classic layout.
    plain = rows(gregor(broker, "--describe", "--group", group, "--state").stdout)
    assert plain[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                        "#MEMBERS"], plain
    assert [plain[1][0], *plain[1][-3:]] == [group, "uniform", "Stable", "2"], plain

    # The classic group is described as before: no epochs, its assignor, its assignments.
    ctable = rows(gregor(broker, "--describe", "--group", classic, "--members",
                         "--verbose").stdout)
    assert ctable[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                         "CURRENT-ASSIGNMENT"], ctable
    assert sorted(r[4] for r in ctable[1:]) == ["2", "2"], ctable
    cstate = rows(gregor(broker, "--describe", "--group", classic, "--state").stdout)
    assert cstate[1][0] == classic and cstate[1][-2:] == ["Stable", "2"], cstate
    cverbose = rows(gregor(broker, "--describe", "--group", classic, "--state",
                           "--verbose").stdout)
    assert cverbose[1][-3:] == ["-", "-", "2"], cverbose

    # --list, with types and states, and filtered by type.
    assert {group, classic} <= set(gregor(broker, "--list").stdout.split())
    listed = {r[0]: r[1:] for r in rows(gregor(broker, "--list", "--type", "--state").stdout)}
    assert listed["GROUP"] == ["TYPE", "STATE"]
    assert listed[group] == ["Consumer", "Stable"] and listed[classic] == ["Classic", "Stable"]
    only = [r[0] for r in rows(gregor(broker, "--list", "--type", "consumer").stdout)[1:]]
    assert group in only and classic not in only, only
    only = [r[0] for r in rows(gregor(broker, "--list", "--type", "classic").stdout)[1:]]
    assert classic in only and group not in only, only

    # --delete refuses a group with members, and deletes it once they have left.
    refused = gregor(broker, "--delete", "--group", group, check=False)
    assert refused.returncode != 0 and "NON_EMPTY_GROUP" in refused.stdout, refused
    for m in members + classic_members:
        m.close()
    empty = gregor(broker, "--describe", "--group", group, "--members")
    assert "Consumer group 'cli-848' has no active members." in empty.stderr, empty
    deleted = gregor(broker, "--delete", "--group", group)
    assert deleted.stdout.strip() == "Deletion of requested consumer groups ('cli-848') was " \
                                     "successful.", deleted.stdout
    gone = gregor(broker, "--describe", "--group", group, check=False)
    assert gone.returncode != 0 and "Consumer group 'cli-848' does not exist." in gone.stderr, gone
    assert group not in gregor(broker, "--list").stdout.split()
