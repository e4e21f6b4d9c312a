#!/usr/bin/env bash
# Install airflow-cdc-provider into ./.venv with its test extra, with one plain `pip install`.
#
# Usage: scripts/install.sh            (PYTHON=python3.11 and VENV=.venv can be overridden)
#
# pyproject.toml pins pyspark and pyspark-client (which the apache-spark provider pulls in) to the
# same release: both install into the same pyspark/ folder, so the pair must match. The check at
# the end compares the Python package's version with the spark-core jar's and with the pin.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
LOG="$(mktemp -t cdc-install.XXXXXX)"
trap 'rm -f "$LOG"' EXIT

say() { printf '==> %s\n' "$*"; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# pip on this kind of machine prints many harmless "Location ... is ignored" warnings: keep the
# full output in a log and show it (filtered) only when a step fails.
quiet() {
    if ! "$@" >"$LOG" 2>&1; then
        grep -v -e 'is ignored' "$LOG" | tail -n 60 >&2
        die "command failed: $*"
    fi
}

# --- Java: PySpark 4 needs a JDK/JRE 17 or newer -------------------------------------------------
java_bin=""
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    java_bin="$JAVA_HOME/bin/java"
elif command -v java >/dev/null 2>&1; then
    java_bin="$(command -v java)"
fi
if [ -z "$java_bin" ]; then
    cat >&2 <<'MSG'
ERROR: Java was not found. PySpark 4 needs Java 17 or 21.
  Debian/Ubuntu:  sudo apt-get install -y openjdk-17-jre-headless
  RHEL/Fedora:    sudo dnf install -y java-17-openjdk-headless
  macOS:          brew install openjdk@17
or point JAVA_HOME at an installed JDK (its bin/java is used), then run this script again.
MSG
    exit 1
fi
java_major="$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)"
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
    die "Java 17 or newer is required by PySpark 4; $java_bin reports version '${java_major:-unknown}'. Install openjdk-17 or set JAVA_HOME."
fi
say "Java $java_major ($java_bin)"

# --- Python and the virtual environment ----------------------------------------------------------
if [ -z "${PYTHON:-}" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.11 or set PYTHON=/path/to/python3.11"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); Python 3.10 or newer is required (3.11 is what this is tested with)"
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $("$PYTHON" -V 2>&1)"
    quiet "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

# --- The package with its test extra: one pip install ---------------------------------------------
start=$(date +%s)
say "installing airflow-cdc-provider[test] (editable) into $VENV; the first time takes a few minutes"
quiet "$PY" -m pip install --disable-pip-version-check -e ".[test]"

# --- Verify: Python code and jars are the pinned Spark release ------------------------------------
pyspark_pin="$(sed -n 's/^[[:space:]]*"pyspark==\([^"]*\)".*/\1/p' pyproject.toml | head -n 1)"
[ -n "$pyspark_pin" ] || die "could not read the pyspark==VERSION pin from pyproject.toml"
pkg_dir="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
py_version="$("$PY" -c 'import pyspark; print(pyspark.__version__)')"
core_jar="$(ls "$pkg_dir"/jars/spark-core_*.jar 2>/dev/null | head -n 1 || true)"
[ -n "$core_jar" ] || die "no spark-core jar under $pkg_dir/jars: the pyspark install is broken"
jar_version="$(basename "$core_jar" .jar | sed 's/^spark-core_[0-9.]*-//')"
if [ "$py_version" != "$pyspark_pin" ] || [ "$jar_version" != "$pyspark_pin" ]; then
    die "inconsistent PySpark: python package $py_version, jars $jar_version, pin $pyspark_pin (an older venv? remove $VENV and run this again)"
fi
say "PySpark $py_version: python package and jars agree ($(basename "$core_jar"))"
# --- Optional: a class data archive that makes every local cdc-replay JVM start faster -------------
# (about 45 s once, about 170 MiB under ~/.cache/airflow-cdc-provider; see contract/jvm.py). A
# failure here costs only speed, so it warns and the install stands.
say "building the JVM class archive for cdc-replay (once per JDK and PySpark installation)"
if ! "$PY" -m airflow_cdc_provider.jobs.class_archive >"$LOG" 2>&1; then
    grep -v -e 'is ignored' "$LOG" | tail -n 20 >&2
    say "WARNING: no class archive; cdc-replay works without it, each local run starts a few seconds slower"
fi
say "installed in $(( $(date +%s) - start )) s; run the tests with: $PY -m pytest -q"
