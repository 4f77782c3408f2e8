"""PySpark data source for amqpd streams (the `spark` extra: pyspark >= 4.0, pyarrow).

    from amqpd.spark import register
    register(spark)                    # once per SparkSession
    spark.read.format("amqpd").option("uri", "amqp://guest:guest@host:5672/%2F").option("queue", "events").load()

Nothing in the broker imports this package.
"""

from __future__ import annotations

from typing import Any

from amqpd.spark.source import AmqpdDataSource

__all__ = ["AmqpdDataSource", "register"]


def register(spark: Any) -> None:
    """Make format("amqpd") available in this session (Spark keeps Python data sources per session)."""
    spark.dataSource.register(AmqpdDataSource)
