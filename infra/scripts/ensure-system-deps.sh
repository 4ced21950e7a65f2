#!/usr/bin/env bash
# Installs the Debian packages the tests and demos need, only when they are missing.
# redis-server: the real Redis every integration test and demo runs against; the Sentinel
# tests run it as a sentinel (`redis-server sentinel.conf --sentinel`).
# redis-cli (package redis-tools, which redis-server depends on): `redis-cli --cluster create`
# builds the cluster of tests/reliability/test_redis_cluster.py.
# promtool (package prometheus): alert-rule unit tests.
# dnsmasq (package dnsmasq-base: the binary without the system service): the real DNS server
# the endpoint-discovery tests start on loopback.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
for extra in "$@"; do
  case "$extra" in
    chromium) command -v chromium >/dev/null 2>&1 || need+=(chromium) ;;
    nginx) command -v nginx >/dev/null 2>&1 || need+=(nginx-light) ;;
    wrk) command -v wrk >/dev/null 2>&1 || need+=(wrk) ;;
    *) echo "ensure-system-deps: unknown extra '$extra'" >&2; exit 2 ;;
  esac
done
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "==> installing Debian packages: ${need[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
