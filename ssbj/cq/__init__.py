"""Continuous queries under inserts and deletes (Cquirrel live-tuple maintenance)."""
