"""`gregor lab load`: the server-side assignors and the load-aware one side by side, run as the
binary, output read back (text and JSON)."""

import json
import subprocess

from conftest import gregor_bin


def lab_load(*args):
    out = subprocess.run([gregor_bin(), "lab", "load", *args], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_seed_002_skew_side_by_side():
    text = lab_load("seed-002-skew")
    assert "scenario seed-002-skew (load threshold 10%)" in text
    assert "== summary (all steps, same run) ==" in text
    # Range piles both topics' remainders on one member: half of the load at the first step.
    first = text.split("step 2:")[0]
    assert [l for l in first.splitlines() if l.strip().startswith("range")][0].split()[1] == "50.0%"
    # The load assignor explains its moves.
    assert "load round 1: " in text and "balance (" in text and "owner left" in text

    report = json.loads(lab_load("seed-002-skew", "--json"))
    runs = {r["strategy"]: r for r in report["strategies"]}
    assert set(runs) == {"uniform", "range", "load"}
    worst = {s: max(step["max_share"] for step in r["steps"]) for s, r in runs.items()}
    assert worst["load"] < worst["uniform"] and worst["load"] < worst["range"]
    for r in runs.values():
        for step in r["steps"]:
            parts = [p for ps in step["assignment"].values() for p in ps]
            assert sorted(parts) == sorted(set(parts)) and len(parts) == 8


def test_hot_partitions_and_bad_input():
    report = json.loads(lab_load("hot-partitions", "--members", "6", "--hot", "2", "--json"))
    runs = {r["strategy"]: r for r in report["strategies"]}
    for r in runs.values():
        assert len(r["steps"]) == 5
    # Load converges within one round of moves per step and stays closest to the bound.
    assert all(step["rounds"] <= 1 for step in runs["load"]["steps"])
    excess = {s: max(st["max_share"] - st["bound_share"] for st in r["steps"])
              for s, r in runs.items()}
    assert excess["load"] < excess["uniform"] and excess["load"] < excess["range"]

    bad = subprocess.run([gregor_bin(), "lab", "load", "--threshold", "1.5"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "threshold" in bad.stderr
