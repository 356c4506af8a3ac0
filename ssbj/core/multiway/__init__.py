"""One operator joining a stream with several master tables (UMJoin-style multi-way node)."""
