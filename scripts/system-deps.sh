#!/usr/bin/env bash
# Debian packages the tests and the pipeline need: Java (Spark), MariaDB server (real-service tests),
# the JDBC drivers (Spark JDBC, used by the stream-static baseline of the benchmark), and what the
# Airflow MySQL provider's mysqlclient needs to build (a C compiler, pkg-config, libmariadb-dev).
# Installs only what is missing; needs root (or sudo) when something is missing.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v mariadbd >/dev/null 2>&1 || need+=(mariadb-server)
[ -e /usr/share/java/mariadb-java-client.jar ] || need+=(libmariadb-java)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
{ command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libmariadb; } || need+=(libmariadb-dev)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "missing Debian packages: ${need[*]} (run as root or install them)" >&2
    exit 2
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >/dev/null
# the package's own service start fails without an init system; the tests start their own server
$sudo apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null || {
  command -v mariadbd >/dev/null 2>&1 || exit 1
}
