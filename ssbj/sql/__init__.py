"""SQL front end: SELECT queries over named streams and master tables, parsed with sqlglot into plans."""
