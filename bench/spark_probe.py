"""`python -m bench.spark_probe`: what Spark's JVM and its Python workers cost per row for the record batches
amqpd.spark yields, with no I/O, beside the bench's floor batch, in one Spark session on local[2].

    python -m bench.spark_probe [--rows 1000000] [--rounds 3] [--traffic real|bare] [--drop COLUMN,...]

Fills a broker with `--capture` messages (`--traffic real`: the bench's headline traffic, bench.spark's
real_messages; `bare`: `--size`-byte bodies, no properties), keeps the chunk deliveries a first read after
publishing receives, stops the broker, then has Spark read `--rows` rows through no-I/O Python sources that
each yield:
  floor   the bench's floor batch (bench/spark.py floor_source), 32,768 rows again and again;
  chunks  chunk_batch's batches of the captured chunks, built once per worker and yielded again and again
          (what read_range yields, without the socket and the broker);
  each    the same, with chunk_batch run again for every batch (its cost lands in the workers' share);
  slow    as chunks, with a sleep of 0.2 µs per row after each batch: a worker as slow as `each` without
          its CPU, to tell the JVM's cost of waiting for a slow worker from its cost of sharing the cores.
A mode given as mode:N reads in N partitions instead of --parts (Spark's own cost per task shows), as
mode-a+b without the columns a and b.
`--drop` leaves columns out of every source's schema and batches (what each column costs Spark's JVM);
`--batch N` re-cuts the captured batches into batches of N rows (what the batch size costs). Each
round prints the CPU µs per row of the JVM and of the Python workers, the sources alternating, so a difference
between floor and chunks is the batches' own cost to Spark, not the machine's load. The JVM's share falls
over the first rounds whatever the source (its JIT): compare sources within a round.
"""

from __future__ import annotations

import argparse
import os
import pickle
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from amqpd.spark.wire import Chunks, Endpoint, StreamReader
from amqpd.testing import BrokerProcess
from bench import procstat
from bench.spark import STREAM, fill, fill_real, local_session

_CACHE: dict[str, list] = {}  # per Python worker (Spark reuses them): the batches built from the capture


def capture(path: Path, messages: int, size: int, traffic: str, batch_rows: int = 32_768) -> None:
    """The chunk deliveries of one read of `messages` messages, as StreamReader yields them, pickled."""
    with BrokerProcess() as broker:
        if traffic == "real":
            fill_real(broker.url, STREAM, messages)
        else:
            fill(broker.url, messages, size)
        reader = StreamReader(
            Endpoint.parse(broker.url), STREAM, 0, messages, with_headers=False, batch_rows=batch_rows
        )
        got = [c for c in reader.batches() if isinstance(c, Chunks)]  # each body with its layout
    path.write_bytes(pickle.dumps(got))


def _captured(path: str) -> list[Chunks]:
    return pickle.loads(Path(path).read_bytes())  # type: ignore[no-any-return]


def probe_source(size: int) -> type:
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from amqpd.spark.chunk_rows import chunk_batch
    from amqpd.spark.rows import schema_ddl
    from bench.spark import floor_source

    floor_reader = floor_source(0, size)({}).reader(None)

    class Part(InputPartition):
        def __init__(self, mode: str, rows: int, path: str) -> None:
            super().__init__(rows)
            self.mode, self.rows, self.path = mode, rows, path

    class Reader(DataSourceReader):
        def __init__(self, options: dict[str, str]) -> None:
            self.mode, self.path = options["mode"], options["path"]
            self.rows, self.parts = int(options["rows"]), int(options["parts"])
            self.drop = [c for c in options.get("drop", "").split(",") if c]
            self.batch = int(options.get("batch", "0"))

        def partitions(self) -> list[InputPartition]:
            each = [self.rows // self.parts] * self.parts
            each[-1] += self.rows - sum(each)
            return [Part(self.mode, n, self.path) for n in each]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            assert isinstance(partition, Part)
            for batch in self._batches(partition):
                yield batch.drop_columns(self.drop) if self.drop else batch

        def _batches(self, partition: Part) -> Iterator[pa.RecordBatch]:
            if partition.mode == "floor":
                yield from floor_reader.read(InputPartition(partition.rows))
                return
            # this module by name: run with -m it is __main__, whose globals Spark ships with each task
            from bench import spark_probe

            cache = spark_probe._CACHE  # noqa: SLF001
            if partition.path not in cache:
                cache[partition.path] = _captured(partition.path)
                cache[partition.path + "#built"] = [chunk_batch(STREAM, c, False) for c in cache[partition.path]]
            captured, built = cache[partition.path], cache[partition.path + "#built"]
            if self.batch and partition.mode != "each":
                key = f"{partition.path}#{self.batch}"
                if key not in cache:
                    cache[key] = pa.Table.from_batches(built).combine_chunks().to_batches(self.batch)
                built = cache[key]
            left, k = partition.rows, 0
            while left > 0:
                batch = built[k] if partition.mode != "each" else chunk_batch(STREAM, captured[k], False)
                if partition.mode == "slow":  # as slow as `each`, without its CPU
                    time.sleep(batch.num_rows * 0.2e-6)
                k = (k + 1) % len(built)
                keep = min(batch.num_rows, left)
                yield batch.slice(0, keep)  # as read_range cuts a partition's last batch
                left -= keep

    class Probe(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_probe"

        def schema(self) -> str:
            drop = set(self.options.get("drop", "").split(","))
            return ", ".join(c for c in schema_ddl(False).split(", ") if c.split(" ")[0] not in drop)

        def reader(self, schema: object) -> DataSourceReader:
            return Reader(dict(self.options))

    return Probe


def jvm_shares() -> dict[str, float]:
    jvm = [p for p in procstat.children(os.getpid()) if procstat.command_line(p)[0].endswith("java")]
    own = sum(procstat.cpu_seconds(p) for p in jvm)
    return {"JVM": own, "workers": sum(procstat.tree_cpu_seconds(p) for p in jvm) - own}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--capture", type=int, default=250_000, help="messages read once from a broker")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--parts", type=int, default=4, help="partitions per read")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    parser.add_argument("--modes", default="floor,chunks,each,slow", help="sources, each as mode[:partitions]")
    parser.add_argument("--traffic", choices=("real", "bare"), default="real", help="the messages captured")
    parser.add_argument("--drop", default="", help="columns left out of every source, comma-separated")
    parser.add_argument("--capture-rows", type=int, default=32_768, help="the capture's rows per batch at most")
    parser.add_argument("--keep", help="the capture's file: made if missing, else read (no broker)")
    parser.add_argument("--batch", type=int, default=0, help="rows per yielded batch (0: as captured)")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    with tempfile.TemporaryDirectory(prefix="bench-probe-") as tmp:
        path = Path(args.keep or Path(tmp) / "chunks.pickle")
        if not path.exists():
            capture(path, args.capture, args.size, args.traffic, args.capture_rows)
        spark = local_session("bench.spark_probe", dict(setting.split("=", 1) for setting in args.conf))
        spark.dataSource.register(probe_source(args.size))
        modes = args.modes.split(",")

        def read(spec: str, rows: int) -> tuple[float, dict[str, float]]:
            spec, _, dropped = spec.partition("-")
            mode, _, parts = spec.partition(":")
            drop = ",".join(c for c in (args.drop, dropped.replace("+", ",")) if c)
            before = jvm_shares()
            started = time.perf_counter()
            df = (
                spark.read.format("bench_probe")
                .option("mode", mode)
                .option("rows", str(rows))
                .option("parts", parts or str(args.parts))
                .option("path", str(path))
                .option("drop", drop)
                .option("batch", str(args.batch))
                .load()
            )
            row = df.agg(F.count("*").alias("n"), F.sum(F.length(df.columns[-1])).alias("b")).collect()[0]
            elapsed = time.perf_counter() - started
            assert row.n == rows, (row.n, rows)
            after = jvm_shares()
            return rows / elapsed, {k: (after[k] - before[k]) / rows * 1e6 for k in before}

        for mode in modes:  # warm: the workers' imports, the capture's load and the JIT
            read(mode, min(args.rows, 200_000))
        for round_ in range(args.rounds):
            for mode in modes:
                rate, used = read(mode, args.rows)
                shares = "  ".join(f"{k} {v:.2f}" for k, v in used.items())
                print(f"round {round_ + 1} {mode:<24}{rate:>12,.0f} rows/s  µs CPU per row: {shares}", flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
