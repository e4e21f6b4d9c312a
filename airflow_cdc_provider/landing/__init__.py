"""The Spark-free view of a landing (probe, coverage, event time) that the sensor and trigger use."""
