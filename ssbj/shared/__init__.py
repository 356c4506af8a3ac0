"""Many enrichment jobs, one set of scans: sharing and its ILP optimizer (CLASH)."""
