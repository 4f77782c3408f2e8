"""examples/spark_pipeline.py at small scale on the test session: per-minute counts written back exactly
once (a second run of the query from its checkpoint adds nothing), the re-read by timestamp, and the body
decoding helpers it uses."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from amqpd.spark.decode import body_unpickled
from amqpd.testing import BrokerProcess
from examples import spark_pipeline as pipeline

pytestmark = pytest.mark.timeout(300)  # a Spark job on a busy 2-core machine can take a while


def test_the_example_pipeline_counts_every_event_once_per_minute_and_rereads_by_time(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    pipeline.declare_streams(broker.url)
    published = pipeline.publish_events(broker.url, 300, minutes=3)
    checkpoint = str(tmp_path / "checkpoint")
    pipeline.run_aggregation(spark, broker.url, None, checkpoint)

    def results() -> list:
        df = pipeline.source(spark, broker.url, None, pipeline.PER_MINUTE, streaming=False)
        return pipeline.body_json(df, StructType.fromDDL("minute string, action string, count long")).collect()

    first = results()
    assert sum(r["count"] for r in first) == published - 1  # all but the tick, whose minute is not final
    assert max(Counter((r.minute, r.action) for r in first).values()) == 1
    pipeline.run_aggregation(spark, broker.url, None, checkpoint)  # again, from its checkpoint
    assert len(results()) == len(first)
    by_action = {r.action: r["count"] for r in pipeline.reread_since_yesterday(spark, broker.url, None).collect()}
    assert sum(by_action.values()) == published and by_action["tick"] == 1


def test_unpickling_bodies_is_refused_unless_asked_for_by_name() -> None:
    with pytest.raises(ValueError, match="allow_pickle=True"):
        body_unpickled(StructType.fromDDL("a int"))
