"""The LSM-tree waiting store of the multi-way join (UMJoin's state backend), on RocksDB.

Chunks of waiting rows are kept in memory while they fit the store's limit; a chunk that
does not fit is written to a RocksDB instance (Arrow IPC bytes under the key
``edge | chunk``, its left-edge matched flags under ``edge | chunk | f``) and read back
each time a partition probes it. RocksDB's own memory is capped by its options (memtables
of ``memtable_bytes``, at most two, and a block cache of ``block_cache_bytes``) and that
cap is counted as held memory, so the store stays within its limit whatever it holds on
disk. Durability comes from the operator's checkpoints (chunks written once to the
checkpoint directory), so the write-ahead log is off and the database is scratch space,
deleted on :meth:`close`.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.adapters.lsm_shim import rocksdict
from ssbj.core.multiway.store import WaitingStateOverflow, chunk_nbytes
from ssbj.errors import ConfigError


def _key(edge: int, chunk: int, flags: bool = False) -> bytes:
    return struct.pack(">iq", edge, chunk) + (b"f" if flags else b"")


def _dumps(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _loads(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.BufferReader(data)).read_all()


class LsmStore:
    """Waiting chunks in memory up to the limit, the rest in an LSM tree on disk."""

    def __init__(
        self,
        directory: str | Path | None = None,
        memtable_bytes: int = 1 << 20,
        block_cache_bytes: int = 1 << 20,
        spill_all: bool = False,
    ) -> None:
        if memtable_bytes < 64 << 10 or block_cache_bytes < 0:
            raise ConfigError("LsmStore: memtable_bytes must be >= 64 KiB and block_cache_bytes >= 0")
        rd: Any = rocksdict()
        self._own = directory is None
        self.path = Path(tempfile.mkdtemp(prefix="ssbj-lsm-")) if directory is None else Path(directory)
        opts = rd.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(memtable_bytes)
        opts.set_max_write_buffer_number(2)
        table = rd.BlockBasedOptions()
        table.set_block_cache(rd.Cache(max(block_cache_bytes, 1)))
        opts.set_block_based_table_factory(table)
        self._db = rd.Rdict(str(self.path / "db"), opts)
        wo = rd.WriteOptions()
        wo.disable_wal = True
        self._db.set_write_options(wo)
        self.reserve = 2 * memtable_bytes + block_cache_bytes  # most RocksDB holds in memory
        self._hot: dict[tuple[int, int], tuple[pa.Table, np.ndarray | None]] = {}
        self._hot_bytes = 0
        self._cold: dict[tuple[int, int], int] = {}  # serialized bytes of spilled chunks
        self._cold_rows: dict[tuple[int, int], int] = {}
        self._limit: int | None = None
        self._spill_all = spill_all
        self.spilled_chunks = 0
        self.reads = 0

    def set_limit(self, nbytes: int) -> None:
        """Bytes of memory the store may hold (its hot chunks plus RocksDB's capped memory)."""
        if nbytes < self.reserve:
            raise WaitingStateOverflow(
                f"the LSM-tree store needs at least {self.reserve} bytes of memory for RocksDB's memtables and "
                f"block cache; the budget leaves it {nbytes}"
            )
        self._limit = nbytes
        self._shed()

    def _shed(self) -> None:
        # the limit shrank (a cache grew): move the oldest hot chunks to the LSM tree
        while self._limit is not None and self._hot and self._hot_bytes + self.reserve > self._limit:
            (edge, chunk), (table, matched) = next(iter(self._hot.items()))
            del self._hot[(edge, chunk)]
            self._hot_bytes -= chunk_nbytes(table, matched)
            self._spill(edge, chunk, table, matched)

    def _spill(self, edge: int, chunk: int, table: pa.Table, matched: np.ndarray | None) -> None:
        data = _dumps(table)
        self._db.put(_key(edge, chunk), data)
        if matched is not None:
            self._db.put(_key(edge, chunk, True), np.packbits(matched).tobytes())
        self._cold[(edge, chunk)] = len(data)
        self._cold_rows[(edge, chunk)] = table.num_rows
        self.spilled_chunks += 1

    def put(self, edge: int, chunk: int, table: pa.Table, matched: np.ndarray | None) -> None:
        """Keep the chunk in memory if it fits, else write it to the LSM tree."""
        size = chunk_nbytes(table, matched)
        room = None if self._limit is None else self._limit - self.reserve - self._hot_bytes
        if not self._spill_all and (room is None or size <= room):
            self._hot[(edge, chunk)] = (table, matched)
            self._hot_bytes += size
            return
        self._spill(edge, chunk, table, matched)

    def get(self, edge: int, chunk: int) -> tuple[pa.Table, np.ndarray | None]:
        """Rows and flags of a chunk (read from disk when spilled)."""
        hot = self._hot.get((edge, chunk))
        if hot is not None:
            return hot
        self.reads += 1
        table = _loads(self._db.get(_key(edge, chunk)))
        f = self._db.get(_key(edge, chunk, True))
        matched = None if f is None else np.unpackbits(np.frombuffer(f, np.uint8))[: table.num_rows].astype(bool)
        return table, matched

    def set_matched(self, edge: int, chunk: int, matched: np.ndarray) -> None:
        """Replace a chunk's matched flags."""
        if (edge, chunk) in self._hot:
            table, _ = self._hot[(edge, chunk)]
            self._hot[(edge, chunk)] = (table, matched)
        else:
            self._db.put(_key(edge, chunk, True), np.packbits(matched).tobytes())

    def delete(self, edge: int, chunk: int) -> None:
        """Drop a chunk."""
        hot = self._hot.pop((edge, chunk), None)
        if hot is not None:
            self._hot_bytes -= chunk_nbytes(*hot)
            return
        self._db.delete(_key(edge, chunk))
        self._db.delete(_key(edge, chunk, True))
        del self._cold[(edge, chunk)]
        del self._cold_rows[(edge, chunk)]

    def memory_bytes(self) -> int:
        """Hot chunks plus the cap of RocksDB's memtables and block cache."""
        return self._hot_bytes + self.reserve

    def rocksdb_memory(self) -> int:
        """Return what RocksDB reports holding now (memtables and block cache), at most ``reserve``."""
        mem = self._db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
        cache = self._db.property_int_value("rocksdb.block-cache-usage") or 0
        return int(mem + cache)

    def disk_bytes(self) -> int:
        """Return the serialized bytes of the chunks spilled to the LSM tree."""
        return sum(self._cold.values())

    def close(self) -> None:
        """Close RocksDB and delete its files (scratch space: checkpoints are elsewhere)."""
        self._hot.clear()
        self._hot_bytes = 0
        try:
            self._db.close()
        finally:
            shutil.rmtree(self.path / "db", ignore_errors=True)
            if self._own:
                shutil.rmtree(self.path, ignore_errors=True)
