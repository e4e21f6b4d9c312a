"""AWS DMS CSV, Parquet and JSON landings (``--format aws-dms``; ``decoder`` chooses among them)."""
