"""Adapters that connect the SSBJ pipeline to external systems (Kafka, databases, Spark)."""
