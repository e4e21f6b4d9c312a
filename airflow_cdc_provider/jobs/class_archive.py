"""Build the class data archive that ``contract.jvm`` hands a local driver's JVM.

``python -m airflow_cdc_provider.jobs.class_archive`` (``scripts/install.sh`` runs it) replays the
bundled sample in a child process whose JVM, told ``-XX:ArchiveClassesAtExit``, writes the classes
it loaded as it exits: the classes every replay needs, whatever the format.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from airflow_cdc_provider.contract.jvm import (
    archive_outlived,
    archive_source,
    class_archive_path,
    write_archive_source,
)

_MODULE = "airflow_cdc_provider.jobs.class_archive"


def build_class_archive() -> Path:
    """Replay the bundled sample in a child process whose JVM writes its loaded classes on exit.

    The archive is written beside its final name and renamed into place, so a JVM starting
    meanwhile sees either no archive or a whole one. Archives built for a JDK or PySpark
    installation that has since gone or changed (about 170 MiB each) are removed.
    """
    archive = class_archive_path()
    if archive is None:
        raise RuntimeError("no java found (JAVA_HOME or PATH): cannot build the class archive")
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory(prefix="cdc-class-archive-") as work:
            subprocess.run(
                [sys.executable, "-m", _MODULE, "--replay-sample", str(partial), work],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        if not partial.is_file():
            raise RuntimeError(f"the JVM wrote no class archive at {partial}")
        write_archive_source(archive)
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    remove_outlived_archives(archive.parent)
    return archive


def remove_outlived_archives(folder: Path) -> list[Path]:
    """Remove the archives in ``folder`` whose JDK or PySpark installation is gone or changed."""
    removed = []
    for archive in sorted(folder.glob("spark-*.jsa")):
        if archive_outlived(archive):
            archive.unlink(missing_ok=True)
            archive_source(archive).unlink(missing_ok=True)
            removed.append(archive)
    return removed


def _replay_sample(partial: str, work: str) -> None:
    """The child of ``build_class_archive``: the quickstart's rebuild, then wait for the JVM's exit."""
    from airflow_cdc_provider.jobs import cli
    from airflow_cdc_provider.sample_data import replay_arguments
    from airflow_cdc_provider.spark.session import build_session

    # Started first, so the command's own session is this one, whose JVM writes the archive.
    spark = build_session(java_options=[f"-XX:ArchiveClassesAtExit={partial}"])
    if cli.main(replay_arguments(os.path.join(work, "snapshot"))) != cli.EXIT_OK:
        raise RuntimeError("the sample's rebuild failed: no class archive")
    gateway = spark.sparkContext._gateway
    spark.stop()
    # The JVM dumps the archive as it exits, which it does once its stdin closes.
    gateway.shutdown()
    gateway.proc.stdin.close()
    gateway.proc.wait()


def main(argv: list[str]) -> int:
    """``python -m airflow_cdc_provider.jobs.class_archive [--rebuild]``: build the archive unless it exists."""
    if argv[:1] == ["--replay-sample"]:
        _replay_sample(argv[1], argv[2])
        return 0
    archive = class_archive_path()
    if archive is None or not archive.is_file() or "--rebuild" in argv:
        archive = build_class_archive()
    print(f"class archive for cdc-replay's JVM: {archive} ({archive.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
