"""The streaming pipeline: source micro-batches -> SSBJ operator -> idempotent warehouse sinks."""
