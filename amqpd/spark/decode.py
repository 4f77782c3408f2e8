"""Turning the `body` column into data: UTF-8 text, JSON with a schema, and (only when asked for by name)
pickle.

Pickle is off unless `allow_pickle=True`: unpickling runs whatever code the bytes name, so anyone who can
publish to the stream can run code on every executor that reads it. Use it only for streams that only
trusted producers can write to (check the vhost's write permissions), and prefer JSON.
"""

from __future__ import annotations

import pickle
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType


def body_text(column: str = "body") -> Column:
    """The body as a UTF-8 string (invalid bytes become U+FFFD)."""
    return F.col(column).cast("string")


def body_json(df: DataFrame, schema: StructType | str, column: str = "body") -> DataFrame:
    """The DataFrame with the JSON body's fields as columns (beside offset, timestamp and the other
    message columns); a body that is not JSON gives nulls, as from_json does."""
    parsed = F.from_json(body_text(column), schema).alias("_json")
    return df.select("*", parsed).select(*[c for c in df.columns if c != column], "_json.*")


def body_unpickled(return_type: DataType, *, allow_pickle: bool = False, column: str = "body") -> Column:
    """The body unpickled by a Python UDF. Refused unless allow_pickle=True: see the module's warning."""
    if not allow_pickle:
        raise ValueError(
            "body_unpickled runs code chosen by whoever published the message; pass "
            "allow_pickle=True only for streams that only trusted producers can write to"
        )

    def load(raw: bytes | None) -> Any:
        return None if raw is None else pickle.loads(raw)  # noqa: S301 - asked for explicitly, see above

    return F.udf(load, return_type)(F.col(column))
