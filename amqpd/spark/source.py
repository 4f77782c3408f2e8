"""`AmqpdDataSource`: Spark's `format("amqpd")`, reading and writing amqpd streams."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from amqpd.spark.options import ReadOptions, headers_format
from amqpd.spark.reader import BatchReader, StreamingReader
from amqpd.spark.rows import schema_ddl
from amqpd.spark.writer import (
    OVERWRITE_REFUSED,
    ArrowBatchWriter,
    BatchWriter,
    StreamingWriter,
    WriteOptions,
    arrow_columns,
)


class AmqpdDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "amqpd"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", self.options.get("includeheaders", "false")))
        return schema_ddl(include.strip().lower() == "true", headers_format(dict(self.options)) == "array")

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(ReadOptions.parse(dict(self.options), streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamingReader(ReadOptions.parse(dict(self.options), streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError(OVERWRITE_REFUSED)
        opts = WriteOptions.parse(dict(self.options))
        opts.check_target()
        columns = arrow_columns(schema, opts, streaming=False)
        return BatchWriter(opts) if columns is None else ArrowBatchWriter(opts, columns)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            raise ValueError(OVERWRITE_REFUSED)
        opts = WriteOptions.parse(dict(self.options))
        opts.check_target()
        columns = arrow_columns(schema, opts, streaming=True)
        if columns is None:
            return StreamingWriter(opts)
        from amqpd.spark.writer import ArrowStreamingWriter  # defined where pyspark has it (>= 4.1)

        return ArrowStreamingWriter(opts, columns)
