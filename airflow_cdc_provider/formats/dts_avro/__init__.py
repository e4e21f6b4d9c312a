"""Alibaba DTS Avro (``--format dts-avro``), in three parts: ``decoder`` (the Spark side: which
layout each file has, message bytes per record, typed images), ``records`` (the Python workers'
side: Avro bytes to plain columns) and ``values`` (DTS value records to typed texts). ``schema``
is the Avro schema of DTS's ``Record``.

Importing this package loads no PySpark (the sensor reads ``schema`` without Spark); the decoder
is ``airflow_cdc_provider.formats.dts_avro.decoder.DtsAvroDecoder``.
"""
