"""The job contract: arguments, AS OF, partition and path rules, metrics keys. Pure Python: no Spark, no Airflow."""
