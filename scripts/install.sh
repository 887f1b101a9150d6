#!/usr/bin/env bash
# Install cdml-edge as a systemd service on Raspberry Pi OS or NVIDIA JetPack (Debian based).
#
#   sudo scripts/install.sh                      # install, enable and start
#   sudo scripts/install.sh --ort-wheel FILE     # Jetson: NVIDIA's onnxruntime-gpu wheel
#   scripts/install.sh --dry-run                 # print every step, change nothing
#   sudo scripts/install.sh --uninstall [--purge]
#
# What it does: apt packages for building the C reader, a system user `cdml-edge`, the folders,
# a venv in /opt/cdml-edge/venv with the runtime dependencies only (no PyTorch), the config in
# /etc/cdml-edge (never overwritten), the systemd units with a memory limit sized to the board,
# then `systemctl enable --now cdml-edge.service cdml-edge-replay.timer`.
#
# Environment overrides (a staged install, tests): CDML_PREFIX, CDML_ETC, CDML_STATE, CDML_DATA,
# CDML_UNIT_DIR, CDML_USER, SYSTEMCTL (the systemctl command), PYTHON (makes the venv), and
# CDML_UNPRIVILEGED=1 (no root needed: files keep the caller as owner).
set -euo pipefail

PREFIX="${CDML_PREFIX:-/opt/cdml-edge}"
ETC="${CDML_ETC:-/etc/cdml-edge}"
STATE="${CDML_STATE:-/var/lib/cdml-edge}"
DATA="${CDML_DATA:-/srv/cdml}"
UNIT_DIR="${CDML_UNIT_DIR:-/etc/systemd/system}"
USER_NAME="${CDML_USER:-cdml-edge}"
SYSTEMCTL="${SYSTEMCTL:-systemctl}"
PYTHON="${PYTHON:-python3}"
UNPRIV="${CDML_UNPRIVILEGED:-0}"
UNITS=(cdml-edge.service cdml-edge-replay.service cdml-edge-replay.timer)

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SOURCE="$REPO"          # what pip installs: this checkout, or a wheel (--from)
CONFIG="$REPO/configs/factory.yaml"
ORT_WHEEL=""
BOARD=""
MEMORY_MAX=""
DRY_RUN=0
UNINSTALL=0
PURGE=0
START=1
APT=1

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'

Options:
  --dry-run            print what would be done; change nothing (no root needed)
  --uninstall          stop and remove the units and the venv; keep config, state and data
  --purge              with --uninstall: also remove /etc/cdml-edge, /var/lib/cdml-edge, the user
  --from PATH          install this wheel or source tree instead of the checkout
  --config FILE        configuration to install as /etc/cdml-edge/factory.yaml (if absent)
  --ort-wheel FILE     onnxruntime-gpu wheel (Jetson: from NVIDIA's JetPack index)
  --board pi|jetson|generic   override the board detection
  --memory-max SIZE    MemoryMax= of the agent (default: 40% of RAM, 512M..4G)
  --no-start           enable the units but do not start them
  --no-apt             do not install apt packages
  -h, --help           this help
EOF
}

die() { echo "install.sh: $*" >&2; exit 1; }
log() { echo "==> $*"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --uninstall) UNINSTALL=1 ;;
    --purge) PURGE=1 ;;
    --from) SOURCE="${2:?--from needs a path}"; shift ;;
    --config) CONFIG="${2:?--config needs a file}"; shift ;;
    --ort-wheel) ORT_WHEEL="${2:?--ort-wheel needs a file}"; shift ;;
    --board) BOARD="${2:?--board needs pi, jetson or generic}"; shift ;;
    --memory-max) MEMORY_MAX="${2:?--memory-max needs a size such as 1G}"; shift ;;
    --no-start) START=0 ;;
    --no-apt) APT=0 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
  shift
done

[[ $PURGE -eq 1 && $UNINSTALL -eq 0 ]] && die "--purge goes with --uninstall"
if [[ $DRY_RUN -eq 0 && $UNPRIV != 1 && $(id -u) -ne 0 ]]; then
  die "run as root (sudo), or with --dry-run to see the steps"
fi

# run CMD...: execute, or print it in a dry run.
run() {
  if [[ $DRY_RUN -eq 1 ]]; then
    printf '+'; printf ' %q' "$@"; printf '\n'
  else
    "$@"
  fi
}

# put_file MODE OWNER PATH: write stdin to PATH (atomically), or print it in a dry run.
put_file() {
  local mode="$1" owner="$2" path="$3" tmp
  if [[ $DRY_RUN -eq 1 ]]; then
    local body n
    body="$(cat)"
    n="$(printf '%s' "$body" | grep -c '' || true)"
    echo "+ write $path (mode $mode, owner $owner, $n lines)"
    # Short files are shown; the units are the ones in systemd/ with the prefix applied.
    (( n <= 8 )) && [[ -n "$body" ]] && printf '%s\n' "$body" | sed 's/^/|   /'
    return 0
  fi
  tmp="$(mktemp "$path.XXXXXX")"
  cat >"$tmp"
  chmod "$mode" "$tmp"
  [[ $UNPRIV == 1 ]] || chown "$owner" "$tmp"
  mv -f "$tmp" "$path"
}

detect_board() {
  if [[ -n "$BOARD" ]]; then
    echo "$BOARD"
  elif [[ -f /etc/nv_tegra_release ]] || grep -qs "NVIDIA Jetson" /proc/device-tree/model; then
    echo jetson
  elif grep -qs "Raspberry Pi" /proc/device-tree/model; then
    echo pi
  else
    echo generic
  fi
}

# 40% of RAM, clamped to 512M..4G: the rest is for the OS, the camera stack and (Jetson) the GPU.
default_memory_max() {
  local kib mib
  kib="$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || echo 2097152)"
  mib=$(( kib * 4 / 10 / 1024 ))
  (( mib < 512 )) && mib=512
  (( mib > 4096 )) && mib=4096
  echo "${mib}M"
}

# to_mib SIZE: 1024M, 1G, 1.5G -> MiB (integer).
to_mib() {
  local v="$1"
  case "$v" in
    *[Gg]) awk -v x="${v%?}" 'BEGIN { printf "%d", x * 1024 }' ;;
    *[Mm]) awk -v x="${v%?}" 'BEGIN { printf "%d", x }' ;;
    *) die "--memory-max: use a size such as 768M or 2G, not '$v'" ;;
  esac
}

systemd_version() {
  "$SYSTEMCTL" --version 2>/dev/null | awk 'NR==1 {print $2}' | sed 's/[^0-9].*//'
}

do_uninstall() {
  log "stopping and disabling the units"
  local u
  for u in "${UNITS[@]}"; do
    if [[ -f "$UNIT_DIR/$u" || $DRY_RUN -eq 1 ]]; then
      run "$SYSTEMCTL" disable --now "$u" || true
    fi
  done
  log "removing the units and the venv"
  for u in "${UNITS[@]}"; do
    run rm -f "$UNIT_DIR/$u"
  done
  run rm -rf "$UNIT_DIR/cdml-edge.service.d"
  run "$SYSTEMCTL" daemon-reload
  run rm -rf "$PREFIX"
  if [[ $PURGE -eq 1 ]]; then
    log "purging config, state and the user (source folders in $DATA are kept)"
    run rm -rf "$ETC" "$STATE"
    if id "$USER_NAME" >/dev/null 2>&1 || [[ $DRY_RUN -eq 1 ]]; then
      run userdel "$USER_NAME"
    fi
  else
    log "kept: $ETC (config, password), $STATE (spool, retention), $DATA"
  fi
  log "cdml-edge uninstalled"
}

do_install() {
  local board arch venv="$PREFIX/venv" memory sdv
  board="$(detect_board)"
  arch="$(uname -m)"
  memory="$(to_mib "${MEMORY_MAX:-$(default_memory_max)}")M"
  log "board: $board ($arch); agent MemoryMax=$memory"
  [[ "$arch" == "aarch64" || "$arch" == "x86_64" ]] || echo "warning: untested architecture $arch"
  [[ -f "$CONFIG" ]] || die "configuration not found: $CONFIG"
  [[ -e "$SOURCE" ]] || die "nothing to install at $SOURCE"
  if [[ -n "$ORT_WHEEL" && ! -f "$ORT_WHEEL" ]]; then
    die "onnxruntime-gpu wheel not found: $ORT_WHEEL"
  fi
  if [[ "$board" == "jetson" && -z "$ORT_WHEEL" ]]; then
    echo "warning: Jetson without --ort-wheel: onnxruntime runs on the CPU only" \
         "(get onnxruntime-gpu for your JetPack from NVIDIA, see docs/deploy.md)"
  fi
  sdv="$(systemd_version)"
  if [[ -n "$sdv" && "$sdv" -lt 247 ]]; then
    echo "warning: systemd $sdv has no LoadCredential= (needs 247, JetPack 6 / Pi OS 12);" \
         "point mqtt.password_file at $ETC/mqtt-password instead"
  fi

  if [[ $APT -eq 1 ]]; then
    log "apt packages: Python venv, a C compiler and libzstd for the native reader, libsndfile"
    run apt-get update
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv python3-dev build-essential libffi-dev libzstd-dev libdeflate0 \
      libsndfile1
  fi

  log "user $USER_NAME"
  if ! id "$USER_NAME" >/dev/null 2>&1; then
    run useradd --system --user-group --no-create-home --home-dir "$STATE" \
      --shell /usr/sbin/nologin --comment "cdml-edge agent" "$USER_NAME"
  fi
  if getent group video >/dev/null 2>&1 || [[ $DRY_RUN -eq 1 ]]; then
    run usermod -a -G video "$USER_NAME"
  fi

  log "folders"
  run install -d -m 0755 "${OWN_ROOT[@]}" "$PREFIX" "$PREFIX/models"
  run install -d -m 0750 "${OWN_ETC[@]}" "$ETC"
  run install -d -m 0750 "${OWN_USER[@]}" "$STATE"
  # Source folders: cameras and gateways drop files here (add their user to group cdml-edge).
  run install -d -m 2770 "${OWN_USER[@]}" "$DATA"

  log "venv $venv with the runtime dependencies (no PyTorch)"
  run "$PYTHON" -m venv "$venv"
  run "$venv/bin/pip" install --quiet --upgrade pip setuptools wheel cffi
  run "$venv/bin/pip" install --quiet "$SOURCE"
  if [[ -n "$ORT_WHEEL" ]]; then
    log "onnxruntime-gpu from $ORT_WHEEL in place of the CPU build"
    run "$venv/bin/pip" uninstall --yes onnxruntime
    run "$venv/bin/pip" install --quiet --force-reinstall --no-deps "$ORT_WHEEL"
  fi
  run "$venv/bin/python" -c \
    'import importlib.util as u, sys; sys.exit("torch must not be installed" if u.find_spec("torch") else 0)'
  run "$venv/bin/python" -c \
    'import onnxruntime as o; from cdml_edge.archive import native_available as n; print("onnxruntime", o.__version__, o.get_available_providers(), "native reader:", n())'

  log "models and the README (the units' Documentation=)"
  run install -m 0644 "${OWN_ROOT[@]}" "$REPO/README.md" "$PREFIX/README.md"
  if compgen -G "$REPO/models/*.onnx" >/dev/null; then
    run install -m 0644 "${OWN_ROOT[@]}" "$REPO"/models/*.onnx "$PREFIX/models/"
  else
    echo "no models in $REPO/models: copy your .onnx files to $PREFIX/models"
  fi

  log "configuration in $ETC (existing files are kept)"
  if [[ -f "$ETC/factory.yaml" ]]; then
    run install -m 0640 "${OWN_ETC[@]}" "$CONFIG" "$ETC/factory.yaml.new"
    echo "kept $ETC/factory.yaml; the shipped one is $ETC/factory.yaml.new"
  else
    run install -m 0640 "${OWN_ETC[@]}" "$CONFIG" "$ETC/factory.yaml"
  fi
  if [[ ! -f "$ETC/mqtt-password" ]]; then
    # Read by systemd (LoadCredential=) as root; the agent sees a private copy.
    put_file 0600 root:root "$ETC/mqtt-password" </dev/null
  fi
  if [[ ! -f "$ETC/environment" ]]; then
    put_file 0640 "root:$USER_NAME" "$ETC/environment" <<'EOF'
# Environment of cdml-edge.service: values used by ${VAR} in factory.yaml.
# MQTT_URL=mqtts://broker.example:8883
# CAM_B_URL=rtsp://192.0.2.21/stream1
EOF
  fi
  log "folders named in the configuration, and the unit's ReadWritePaths= for them"
  local conf="$ETC/factory.yaml" cfg_env dropin="$UNIT_DIR/cdml-edge.service.d"
  [[ -f "$conf" ]] || conf="$CONFIG"
  cfg_env=(env CDML_DATA="$DATA" CDML_STATE="$STATE" CDML_MODELS="$PREFIX/models"
           CREDENTIALS_DIRECTORY="$ETC" STATE_DIRECTORY="$STATE")
  run install -d -m 0755 "$dropin"
  if [[ $DRY_RUN -eq 1 && ! -x "$venv/bin/python" ]]; then
    echo "+ install -d -m 2770 -o $USER_NAME -g $USER_NAME (folders of $conf, once the venv exists)"
    echo "+ write $dropin/60-paths.conf (ReadWritePaths= for those folders)"
  else
    local folders paths f
    folders="$("${cfg_env[@]}" "$venv/bin/python" -m cdml_edge.doctor.unit dirs "$conf")" ||
      die "the configuration is invalid: $venv/bin/cdml-edge config validate $conf"
    while IFS= read -r f; do
      [[ -n "$f" ]] && run install -d -m 2770 "${OWN_USER[@]}" "$f"
    done <<<"$folders"
    paths="$("${cfg_env[@]}" "$venv/bin/python" -m cdml_edge.doctor.unit dropin "$conf")" ||
      die "the configuration is invalid: $conf"
    printf '%s\n' "$paths" | put_file 0644 root:root "$dropin/60-paths.conf"
  fi

  log "systemd units"
  local u
  for u in "${UNITS[@]}"; do
    sed -e "s#/opt/cdml-edge#$PREFIX#g" -e "s#/etc/cdml-edge#$ETC#g" \
        -e "s#/srv/cdml#$DATA#g" "$REPO/systemd/$u" |
      put_file 0644 root:root "$UNIT_DIR/$u"
  done
  put_file 0644 root:root "$UNIT_DIR/cdml-edge.service.d/50-memory.conf" <<EOF
# Written by install.sh for this board ($board); change with: systemctl edit cdml-edge
[Service]
MemoryMax=$memory
MemoryHigh=$(( ${memory%M} * 8 / 10 ))M
EOF
  run "$SYSTEMCTL" daemon-reload
  if [[ $START -eq 1 ]]; then
    run "$SYSTEMCTL" enable --now cdml-edge.service cdml-edge-replay.timer
  else
    run "$SYSTEMCTL" enable cdml-edge.service cdml-edge-replay.timer
  fi

  log "done"
  # The doctor runs as root, which can read the root-only password where LoadCredential= takes
  # it from, and judges folder access for the service's user (--user), not for root.
  cat <<EOF
Next (every check on one line):
  sudo env CREDENTIALS_DIRECTORY=$ETC $venv/bin/cdml-edge doctor --config $ETC/factory.yaml --user $USER_NAME
  systemctl status cdml-edge                                   # Active: active (running)
  journalctl -u cdml-edge -f
  curl -s http://127.0.0.1:9108/healthz                         # health.metrics_port
Broker password: write it to $ETC/mqtt-password, set mqtt.password_file to
\${CREDENTIALS_DIRECTORY:-$ETC}/mqtt-password in $ETC/factory.yaml (the unit sets
CREDENTIALS_DIRECTORY; the default serves the doctor), then: systemctl restart cdml-edge
EOF
}

# Owner and group of what install(1) creates; none in an unprivileged (staged) install.
if [[ $UNPRIV == 1 ]]; then
  OWN_ROOT=() OWN_ETC=() OWN_USER=()
else
  OWN_ROOT=(-o root -g root) OWN_ETC=(-o root -g "$USER_NAME") OWN_USER=(-o "$USER_NAME" -g "$USER_NAME")
fi
if [[ $DRY_RUN -eq 1 ]]; then
  echo "dry run: nothing is changed"
fi
if [[ $UNINSTALL -eq 1 ]]; then
  do_uninstall
else
  do_install
fi
