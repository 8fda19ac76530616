#!/usr/bin/env bash
# Installs what tenure's make targets need, only what is missing: Debian packages
# through apt-get (as root), Python packages into .venv. A second run does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(postgresql-15 postgresql-client-15 sqitch libdbd-pg-perl postgresql-15-pgtap
          libtap-parser-sourcehandler-pgtap-perl postgresql-15-plpgsql-check python3-venv
          haproxy pgbouncer patroni etcd-server faketime libfaketime
          nftables  # the partition tests: a blackhole inside a network namespace of their own
          chromium chromium-driver  # chromium + its driver: the dashboard's browser tests (Selenium)
          libpostgresql-jdbc-java)  # the JDBC driver of examples/java (/usr/share/java/postgresql.jar)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
# python3 may come from elsewhere (pyenv) with venv built in: then python3-venv is not needed.
if python3 -c 'import venv, ensurepip' 2>/dev/null; then
    missing=("${missing[@]/python3-venv}")
fi
# Node.js and npm run examples/node; they may come from elsewhere (NodeSource bundles npm with nodejs).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# javac compiles examples/java; a JDK 17 may come from elsewhere too.
command -v javac >/dev/null || missing+=(default-jdk-headless)
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "missing Debian packages: ${missing[*]}; run as root (or sudo make ...)" >&2
        exit 1
    fi
    echo "installing Debian packages: ${missing[*]}"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    # The postgresql package starts a system cluster on 5432; tenure never uses it.
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's etcd-server, patroni and pgbouncer start system daemons where the init system
# lets them (etcd on 2379, pgbouncer on 6432). The tests start their own on free ports,
# so stop and disable the system ones; where none runs this does nothing.
if [ "$(id -u)" = 0 ]; then
    for service in etcd patroni pgbouncer pgbouncer.socket; do
        if [ -d /run/systemd/system ]; then
            if systemctl is-enabled --quiet "$service" 2>/dev/null || systemctl is-active --quiet "$service"; then
                echo "stopping and disabling the system service $service"
                systemctl disable --now --quiet "$service" || true
            fi
        elif [ -x "/etc/init.d/$service" ] && "/etc/init.d/$service" status >/dev/null 2>&1; then
            echo "stopping and disabling the system service $service"
            "/etc/init.d/$service" stop >/dev/null || true
            update-rc.d "$service" disable >/dev/null 2>&1 || true
        fi
    done
fi

stamp=.venv/.installed
want=$(sha256sum python/pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "preparing .venv"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check --upgrade pip
    .venv/bin/pip install -q --disable-pip-version-check -e 'python[test,plots,dashboard]'
    echo "$want" >"$stamp"
fi

stamp=examples/node/node_modules/.installed
want=$(sha256sum examples/node/package-lock.json | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "preparing examples/node/node_modules"
    (cd examples/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$want" >"$stamp"
fi
