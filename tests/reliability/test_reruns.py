"""Idempotent reruns: the same landing and AS OF give the same rows and metrics, whatever the
number of Spark partitions and the order the files are listed in; files that land late are picked
up by the next run."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.reliability.test_accounting import assert_accounted

from reference.histories import ENCODERS, INSERT, T0, Change, fold_history, land, random_history

FORMAT = "datahub-tuple"  # update halves are paired across files: the most order-sensitive decoder


@contextmanager
def spark_conf(spark, **conf: str) -> Iterator[None]:
    """Set session properties for a block, then put back what was there."""
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def shuffled_copy(source: Path, target: Path, rng: random.Random) -> None:
    """The same files under new names whose sorted order is a random permutation of the old one."""
    files = sorted(source.iterdir())
    order = list(range(len(files)))
    rng.shuffle(order)
    target.mkdir()
    for rank, path in zip(order, files):
        suffix = "".join(path.suffixes)
        shutil.copyfile(path, target / f"{rank:03d}-landed{suffix}")


def without_time(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k != "written_at"}


def test_reruns_agree_whatever_the_partitions_and_file_order_and_pick_up_late_files(spark, replay, tmp_path):
    encoder = ENCODERS[FORMAT]
    rng = random.Random("reruns")
    landing = tmp_path / "in"
    landing.mkdir()
    as_of_ms = T0 + 8500
    histories = {f"h{i}": random_history(rng) for i in range(3)}
    expected = {h: land(encoder, landing, h, changes, as_of_ms, rng) for h, changes in histories.items()}
    output = tmp_path / "out"

    first, first_rows = replay(FORMAT, landing, as_of_ms, key=list(encoder.key), output=output)
    assert_accounted(first, first_rows, output, FORMAT, expected)

    # The same records under shuffled file names, one shuffle partition, one file per input split.
    shuffled = tmp_path / "shuffled"
    shuffled_copy(landing, shuffled, rng)
    conf = {
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.files.maxPartitionBytes": "1024",
        "spark.sql.files.openCostInBytes": "1024",
        "spark.sql.adaptive.enabled": "false",
    }
    with spark_conf(spark, **conf):
        second, second_rows = replay(FORMAT, shuffled, as_of_ms, key=list(encoder.key), output=output)
    assert second_rows == first_rows
    assert without_time(second) == without_time(first)

    # Late files: an event before AS OF (applied by the rerun) and one after it (counted, not applied).
    late = [Change(INSERT, 9, "late", 5, 2), Change(INSERT, 8, "later", 6, 9)]
    lines = [line for change in late for line in encoder.write("h0", change, None)]
    (landing / "h0-late.json").write_text("".join(line.text + "\n" for line in lines))
    h0 = expected["h0"]
    h0.rows, h0.counts = fold_history(encoder, histories["h0"] + late, as_of_ms)
    for line in lines:
        h0.count(line, encoder)
    third, third_rows = replay(FORMAT, landing, as_of_ms, key=list(encoder.key), output=output)
    assert_accounted(third, third_rows, output, FORMAT, expected)
    assert {"id": 9, "name": "late", "qty": 5} in third_rows["h0"]
    assert third["events"]["read"] == first["events"]["read"] + 2
