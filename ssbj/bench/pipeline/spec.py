"""What one run measures: the scale presets and the two join cases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY")
NEW_SEGMENT = "UPDATED"
PASSWORD_ENV = "SSBJ_BENCH_DB_PASSWORD"  # noqa: S105 - the name of a variable, not a password
JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
JDBC_DRIVER = "org.mariadb.jdbc.Driver"
TOPIC = "orders"
TOPIC_PARTITIONS = 2


@dataclass(frozen=True)
class Scale:
    """Sizes of one run."""

    master_rows: int
    tuples: int
    batch: int  # maxOffsetsPerTrigger
    memory: str  # the join's budget(s): "24MiB", "1%" of R's Arrow size, or a comma list "1%,5%"
    hot_keys: int  # customers whose c_segment is updated mid-run
    buffer_pool: str
    ttl_s: float = 60.0
    key_space_factor: float = 1.05  # keys drawn from 1..factor*universe; the rest have no master row
    warm_up: bool = True  # run a small unmeasured job first (Spark workers, Kafka source, numba kernels)
    zip_share: int = 4  # case b: customers per zip code on average

    def budgets(self) -> list[str]:
        """Return the memory budgets of the run, in order."""
        return [b.strip() for b in self.memory.split(",") if b.strip()]


# The memory budget is about half of R's Arrow size (51 B per projected row) at every scale, so
# master rows read per stream tuple are comparable across scales.  item5 is issue 11's run at
# scale: R = 20M rows, 5M tuples, budgets of 1% and 5% of R.
SCALES = {
    "tiny": Scale(5_000, 5_000, 1_250, "128KiB", 10, "256M", warm_up=False),
    "small": Scale(100_000, 100_000, 20_000, "2560KiB", 50, "512M"),
    "full": Scale(1_000_000, 1_000_000, 200_000, "24MiB", 100, "2G"),
    "item5": Scale(20_000_000, 5_000_000, 500_000, "1%,5%", 1_000, "8G"),
}


@dataclass(frozen=True)
class Case:
    """Which master attribute the stream joins on.

    a: ``customer_id`` = ``c_custkey``, the indexed primary key (one-to-many: <= 1 row per tuple);
    b: ``zip`` = ``c_zip``, an attribute without an index shared by several customers (many-to-many).
    ``row_id`` is the warehouse column that names the master row an output row was enriched with.
    """

    name: str
    stream_key: str
    master_key: str
    stream_schema: tuple[tuple[str, str], ...]
    master_columns: tuple[str, ...]
    row_id: str

    @property
    def out_columns(self) -> list[str]:
        """Warehouse columns (before the sink's batch and segment columns)."""
        return [n for n, _ in self.stream_schema] + list(self.master_columns)

    def describe(self) -> str:
        """One line for the report."""
        if self.name == "a":
            return "case a: one-to-many on the indexed primary key (customer_id = c_custkey)"
        return "case b: many-to-many on a non-indexed attribute (zip = c_zip, several customers per zip)"


CASES = {
    "a": Case(
        "a",
        "customer_id",
        "c_custkey",
        (("order_id", "int64"), ("customer_id", "int64"), ("amount", "float64"), ("placed_at", "timestamp")),
        ("c_name", "c_segment", "c_balance"),
        "customer_id",
    ),
    "b": Case(
        "b",
        "zip",
        "c_zip",
        (("order_id", "int64"), ("zip", "int64"), ("amount", "float64"), ("placed_at", "timestamp")),
        ("c_custkey", "c_name", "c_segment", "c_balance"),
        "c_custkey",
    ),
}
