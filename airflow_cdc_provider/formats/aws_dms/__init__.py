"""AWS DMS CSV and JSON landings (``--format aws-dms``)."""
