#!/usr/bin/env bash
# Install cdml-edge as a systemd service on Raspberry Pi OS or NVIDIA JetPack (Debian based).
#
#   sudo scripts/release/install.sh                   # install, enable and start
#   sudo scripts/release/install.sh --ort-wheel FILE  # Jetson: NVIDIA's onnxruntime-gpu wheel
#   scripts/release/install.sh --dry-run              # print every step, change nothing
#   sudo scripts/release/install.sh --upgrade FROM    # FROM: a wheel, dist/ or a source tree
#   sudo scripts/release/install.sh --rollback        # back to the release before
#   sudo scripts/release/install.sh --uninstall [--purge]
#
# What it does: apt packages for building the C reader, a system user `cdml-edge`, the folders,
# a venv per release in /opt/cdml-edge/releases/VERSION/venv with the runtime dependencies only
# (no PyTorch), installed from the lock with hash checking, the link /opt/cdml-edge/current the
# units use, the config in /etc/cdml-edge (never overwritten), the systemd units with a memory
# limit sized to the board, then `systemctl enable` and `systemctl restart` of cdml-edge.service
# and cdml-edge-replay.timer (a restart: run again, it puts what it installed in use).
#
# Environment overrides (a staged install, tests): CDML_PREFIX, CDML_ETC, CDML_STATE, CDML_DATA,
# CDML_UNIT_DIR, CDML_USER, SYSTEMCTL (the systemctl command), PYTHON (makes the venv),
# CDML_INSTALLER=uv (install with uv, the command UV, instead of the venv's pip) and CDML_UNPRIVILEGED=1 (no root
# needed: files keep the caller as owner).
set -euo pipefail

PREFIX="${CDML_PREFIX:-/opt/cdml-edge}"
ETC="${CDML_ETC:-/etc/cdml-edge}"
STATE="${CDML_STATE:-/var/lib/cdml-edge}"
DATA="${CDML_DATA:-/srv/cdml}"
UNIT_DIR="${CDML_UNIT_DIR:-/etc/systemd/system}"
USER_NAME="${CDML_USER:-cdml-edge}"
SYSTEMCTL="${SYSTEMCTL:-systemctl}"
PYTHON="${PYTHON:-python3}"
INSTALLER="${CDML_INSTALLER:-pip}"
UV="${UV:-uv}"          # the uv command, with CDML_INSTALLER=uv
UNPRIV="${CDML_UNPRIVILEGED:-0}"
UNITS=(cdml-edge.service cdml-edge-replay.service cdml-edge-replay.timer)

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"  # the checkout, two folders up
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
MODE=install            # install | upgrade | rollback | uninstall
LOCK=""                 # the lock file; default: lock/runtime-cpXY-ARCH.txt for PYTHON
NO_LOCK=0
READY_TIMEOUT=180

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'

Options:
  --dry-run            print what would be done; change nothing (no root needed)
  --uninstall          stop and remove the units and the releases; keep models, config,
                       state and data
  --purge              with --uninstall: also remove /opt/cdml-edge (models), /etc/cdml-edge,
                       /var/lib/cdml-edge and the user
  --from PATH          install this wheel or source tree instead of the checkout; a folder
                       of wheels (dist/): the one for this machine and Python
  --upgrade FROM       install the release FROM (wheel, folder of wheels, source tree)
                       beside the current one, switch to it, restart, and switch back by
                       itself unless the agent is ready (READY=1 and /healthz) within
                       --ready-timeout
  --rollback           switch back to the release before the current one and restart
  --ready-timeout S    seconds an upgrade waits for the agent to be ready (default 180)
  --lock FILE          install the runtime from this lock (default: lock/ for this Python)
  --no-lock            resolve the runtime afresh instead (not reproducible; a warning)
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
    --upgrade) MODE=upgrade; SOURCE="${2:?--upgrade needs a wheel or source tree}"; shift ;;
    --rollback) MODE=rollback ;;
    --ready-timeout) READY_TIMEOUT="${2:?--ready-timeout needs seconds}"; shift ;;
    --lock) LOCK="${2:?--lock needs a file}"; shift ;;
    --no-lock) NO_LOCK=1 ;;
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

# unit_env: UNIT_ENV=(env VAR=VALUE...), the environment the agent's unit gives factory.yaml's
# ${VAR}s: its Environment= values; and UNIT_ENV_FILE=(--env-file FILE --systemd N), the
# site's EnvironmentFile= $ETC/environment (MQTT_URL=..., a folder...), whose values override
# them as systemd does. The release's Python reads that file (cdml_edge.doctor.unit), by the
# same rules of systemd as the doctor: quotes, escapes, continued lines, names skipped. Without
# the file's values a configuration that is valid under the unit reads as invalid here, or
# names other folders.
unit_env() {
  UNIT_ENV=(env CDML_DATA="$DATA" CDML_STATE="$STATE" CDML_MODELS="$PREFIX/models"
            CREDENTIALS_DIRECTORY="$ETC" STATE_DIRECTORY="$STATE")
  UNIT_ENV_FILE=(--env-file "$ETC/environment" --systemd "$(systemd_version)")
}

do_uninstall() {
  log "stopping and disabling the units"
  local u
  for u in "${UNITS[@]}"; do
    if [[ -f "$UNIT_DIR/$u" || $DRY_RUN -eq 1 ]]; then
      run "$SYSTEMCTL" disable --now "$u" || true
    fi
  done
  log "removing the units and the releases"
  for u in "${UNITS[@]}"; do
    run rm -f "$UNIT_DIR/$u"
  done
  run rm -rf "$UNIT_DIR/cdml-edge.service.d"
  run "$SYSTEMCTL" daemon-reload
  # the releases, not the models: the kept configuration names them, and a site's own models
  # may exist nowhere else
  run rm -rf "$PREFIX/releases" "$PREFIX/current" "$PREFIX/previous" "$PREFIX/README.md" \
    "$PREFIX/docs"
  if [[ $PURGE -eq 1 ]]; then
    log "purging models, config, state and the user (source folders in $DATA are kept)"
    run rm -rf "$PREFIX" "$ETC" "$STATE"
    if id "$USER_NAME" >/dev/null 2>&1 || [[ $DRY_RUN -eq 1 ]]; then
      run userdel "$USER_NAME"
    fi
  else
    log "kept: $PREFIX/models, $ETC (config, password), $STATE (spool, retention), $DATA"
  fi
  log "cdml-edge uninstalled"
}

do_install() {
  local board arch venv="$PREFIX/current/venv" memory sdv release
  board="$(detect_board)"
  arch="$(uname -m)"
  memory="$(to_mib "${MEMORY_MAX:-$(default_memory_max)}")M"
  log "board: $board ($arch); agent MemoryMax=$memory"
  [[ "$arch" == "aarch64" || "$arch" == "x86_64" ]] || echo "warning: untested architecture $arch"
  [[ -f "$CONFIG" ]] || die "configuration not found: $CONFIG"
  [[ -e "$SOURCE" ]] || die "nothing to install at $SOURCE"
  release="$(release_name "$SOURCE")"
  select_lock
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
  run install -d -m 0755 "${OWN_ROOT[@]}" "$PREFIX" "$PREFIX/models" "$PREFIX/releases"
  run install -d -m 0750 "${OWN_ETC[@]}" "$ETC"
  run install -d -m 0750 "${OWN_USER[@]}" "$STATE"
  # Source folders: cameras and gateways drop files here (add their user to group cdml-edge).
  run install -d -m 2770 "${OWN_USER[@]}" "$DATA"

  build_release "$release"
  switch_to "$release"
  prune_releases "$release" "$(basename "$(readlink "$PREFIX/previous" 2>/dev/null || true)")"

  log "models, the README and docs/ (the units' Documentation=)"
  run install -m 0644 "${OWN_ROOT[@]}" "$REPO/README.md" "$PREFIX/README.md"
  if compgen -G "$REPO/docs/*.md" >/dev/null; then
    run install -d -m 0755 "${OWN_ROOT[@]}" "$PREFIX/docs"
    run install -m 0644 "${OWN_ROOT[@]}" "$REPO"/docs/*.md "$PREFIX/docs/"
  fi
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
  local conf="$ETC/factory.yaml" cfg_env cfg_file dropin="$UNIT_DIR/cdml-edge.service.d"
  [[ -f "$conf" ]] || conf="$CONFIG"
  unit_env
  cfg_env=("${UNIT_ENV[@]}")
  cfg_file=("${UNIT_ENV_FILE[@]}")
  run install -d -m 0755 "$dropin"
  if [[ $DRY_RUN -eq 1 && ! -x "$venv/bin/python" ]]; then
    echo "+ install -d -m 2770 -o $USER_NAME -g $USER_NAME (folders of $conf, once the venv exists)"
    echo "+ write $dropin/60-paths.conf (ReadWritePaths= for those folders)"
  else
    local folders paths f
    folders="$("${cfg_env[@]}" "$venv/bin/python" -I -m cdml_edge.doctor.unit \
      "${cfg_file[@]}" dirs "$conf")" ||
      die "the configuration is invalid: $venv/bin/cdml-edge config validate $conf"
    while IFS= read -r f; do
      [[ -n "$f" ]] && run install -d -m 2770 "${OWN_USER[@]}" "$f"
    done <<<"$folders"
    paths="$("${cfg_env[@]}" "$venv/bin/python" -I -m cdml_edge.doctor.unit \
      "${cfg_file[@]}" dropin "$conf")" ||
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
  run "$SYSTEMCTL" enable cdml-edge.service cdml-edge-replay.timer
  if [[ $START -eq 1 ]]; then
    # restart, not start: on a board where the agent runs already (install.sh run again after
    # a new checkout or a folder moved), a start would leave it on the release, the unit and
    # the ReadWritePaths= of before. reset-failed: a unit that used up its start limit
    # refuses any start until then.
    run "$SYSTEMCTL" reset-failed cdml-edge.service || true
    run "$SYSTEMCTL" restart cdml-edge.service cdml-edge-replay.timer
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

# -- releases: one venv per release under $PREFIX/releases, $PREFIX/current the units use ----

# release_name SOURCE: the version of a wheel (from its name) or a source tree (__version__).
release_name() {
  local src="$1" name=""
  if [[ "$src" == *.whl ]]; then
    name="$(basename "$src")"; name="${name#*-}"; name="${name%%-*}"
  elif [[ -f "$src/cdml_edge/__init__.py" ]]; then
    name="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$src/cdml_edge/__init__.py")"
  fi
  [[ -n "$name" ]] || die "no version found in $src (a cdml_edge wheel or source tree)"
  echo "$name"
}

# pick_wheel SOURCE: SOURCE, or for a folder of wheels (make dist: one per architecture) the
# wheel for PYTHON's version and this machine (cdml_edge-V-cpXY-cpXY-*_ARCH.whl).
pick_wheel() {
  local src="$1" pyver arch found=() w
  if [[ ! -d "$src" || -f "$src/cdml_edge/__init__.py" ]] || ! compgen -G "$src/*.whl" >/dev/null
  then
    echo "$src"
    return 0
  fi
  pyver="$("$PYTHON" -c 'import sys; print("%d%d" % sys.version_info[:2])')" ||
    die "cannot run $PYTHON"
  arch="$(uname -m)"
  for w in "$src"/cdml_edge-*-cp"$pyver"-*.whl; do
    [[ -f "$w" && "$w" == *_"$arch".whl ]] && found+=("$w")
  done
  (( ${#found[@]} == 1 )) && { echo "${found[0]}"; return 0; }
  die "no wheel for cp$pyver on $arch in $src" \
    "(${#found[@]} fit; there: $(cd "$src" && echo *.whl))"
}

# The lock for PYTHON on this machine: lock/runtime-cpXY-ARCH.txt (--lock, --no-lock).
select_lock() {
  [[ $NO_LOCK -eq 1 ]] && { LOCK=""; echo "warning: --no-lock: dependencies resolved afresh" \
    "(not reproducible; doctor reports no lock)"; return 0; }
  if [[ -z "$LOCK" ]]; then
    local pyver
    pyver="$("$PYTHON" -c 'import sys; print("%d%d" % sys.version_info[:2])')" ||
      die "cannot run $PYTHON"
    LOCK="$REPO/lock/runtime-cp$pyver-$(uname -m).txt"
  fi
  [[ -f "$LOCK" ]] || die "no lock for this Python and machine: $LOCK (the boards' Pythons" \
    "3.10, 3.11 and 3.13 on aarch64 and x86_64 are locked; PYTHON=python3.X, or --no-lock)"
  log "lock: $LOCK"
}

# pip_venv VENV ARGS...: the installer (the venv's pip, or uv with CDML_INSTALLER=uv) in VENV.
pip_venv() {
  local venv="$1" cmd="$2"; shift 2
  if [[ $INSTALLER == uv ]]; then
    [[ "$cmd" == uninstall ]] && { run "$UV" pip uninstall --python "$venv/bin/python" "$@"; return; }
    run "$UV" pip "$cmd" --quiet --python "$venv/bin/python" "$@"
  else
    [[ "$cmd" == uninstall ]] && { run "$venv/bin/pip" uninstall --yes "$@"; return; }
    run "$venv/bin/pip" "$cmd" --quiet "$@"
  fi
}

# build_release NAME: the venv of release NAME from the lock (kept if already complete).
build_release() {
  local name="$1" rel="$PREFIX/releases/$1" venv="$PREFIX/releases/$1/venv" replaced=""
  if [[ -f "$venv/cdml-edge-release.json" && $DRY_RUN -eq 0 ]]; then
    log "release $name is installed already: $rel"
    return 0
  fi
  log "release $name: venv $venv with the runtime dependencies (no PyTorch)"
  run rm -rf "$rel"
  run install -d -m 0755 "${OWN_ROOT[@]}" "$rel"
  run "$PYTHON" -m venv "$venv"
  if [[ -n "$LOCK" ]]; then
    # the lock pins every dependency: --no-deps installs exactly it (older pips otherwise
    # trip over a pinned package asked for with an extra), then check that it is complete
    pip_venv "$venv" install --require-hashes --no-deps -r "$LOCK"
    pip_venv "$venv" install --no-deps "$SOURCE"
    pip_venv "$venv" check
  else
    pip_venv "$venv" install "$SOURCE"
  fi
  if [[ -n "$ORT_WHEEL" ]]; then
    log "onnxruntime-gpu from $ORT_WHEEL in place of the CPU build"
    pip_venv "$venv" uninstall onnxruntime
    pip_venv "$venv" install --force-reinstall --no-deps "$ORT_WHEEL"
    replaced='"onnxruntime", "onnxruntime-gpu"'
  fi
  run "$venv/bin/python" -I -c \
    'import importlib.util as u, sys; sys.exit("torch must not be installed" if u.find_spec("torch") else 0)'
  run "$venv/bin/python" -I -c \
    'import onnxruntime as o; from cdml_edge.archive import native_available as n; print("onnxruntime", o.__version__, o.get_available_providers(), "native reader:", n())'
  if [[ -n "$LOCK" ]]; then
    run install -m 0644 "$LOCK" "$venv/cdml-edge.lock"
  fi
  # Last: its presence marks the release complete (doctor and the status payload read it).
  printf '{"release": "%s", "lock": "%s", "replaced": [%s]}\n' "$name" \
    "$(basename "${LOCK:-none}")" "$replaced" | put_file 0644 root:root "$venv/cdml-edge-release.json"
}

current_release() {
  local target
  target="$(readlink "$PREFIX/current" 2>/dev/null)" || return 0
  basename "$target"
}

# set_link NAME RELEASE: $PREFIX/NAME -> releases/RELEASE, replaced atomically.
set_link() {
  run ln -sfn "releases/$2" "$PREFIX/.$1.new"
  run mv -T "$PREFIX/.$1.new" "$PREFIX/$1"
}

# switch_to NAME: current -> NAME; the release it replaces becomes `previous`.
switch_to() {
  local was
  was="$(current_release)"
  if [[ -n "$was" && "$was" != "$1" ]]; then
    set_link previous "$was"
  fi
  set_link current "$1"
  log "current release: $1${was:+ (was $was)}"
}

# The agent's /healthz URL from the configuration (empty: no metrics port), asked of PY.
healthz_url() {
  local py="$1" conf="$ETC/factory.yaml"
  [[ -x "$py" && -f "$conf" ]] || return 0
  unit_env
  # a release from before --env-file answers its usage (2): asked again without the file
  "${UNIT_ENV[@]}" "$py" -I -m cdml_edge.doctor.unit "${UNIT_ENV_FILE[@]}" healthz "$conf" \
    2>/dev/null || "${UNIT_ENV[@]}" "$py" -I -m cdml_edge.doctor.unit healthz "$conf" \
    2>/dev/null || true
}

http_ok() {
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "$1" >/dev/null 2>&1
}

# wait_ready URL: the unit active (Type=notify: after READY=1) and /healthz 200, twice in a row.
wait_ready() {
  local url="$1" deadline=$((SECONDS + READY_TIMEOUT)) good=0
  while (( SECONDS < deadline )); do
    if "$SYSTEMCTL" is-active --quiet cdml-edge.service && { [[ -z "$url" ]] || http_ok "$url"; }
    then
      good=$((good + 1))
      (( good >= 2 )) && return 0
    else
      good=0
    fi
    sleep 1
  done
  return 1
}

# restart_and_wait: restart the agent on the current release; 0 once it is ready.
restart_and_wait() {
  local url="$1"
  # A release that crash-looped (Restart=on-failure) used up the unit's start limit (5 in
  # 10 min): without the reset, systemd refuses this start ("Start request repeated too
  # quickly") and a rollback would leave the agent down.
  run "$SYSTEMCTL" reset-failed cdml-edge.service || true
  run "$SYSTEMCTL" restart cdml-edge.service || true
  if [[ $DRY_RUN -eq 1 ]]; then
    echo "+ wait up to ${READY_TIMEOUT}s for READY=1 (systemctl is-active) and ${url:-/healthz}"
    return 0
  fi
  wait_ready "$url"
}

do_upgrade() {
  local from to url before
  from="$(current_release)"
  before="$(basename "$(readlink "$PREFIX/previous" 2>/dev/null || true)")"
  [[ -n "$from" || $DRY_RUN -eq 1 ]] || die "no release installed in $PREFIX: install first"
  [[ -e "$SOURCE" ]] || die "nothing to install at $SOURCE"
  to="$(release_name "$SOURCE")"
  [[ "$to" != "$from" ]] || die "release $to is the current one already"
  select_lock
  # the known-good release reads the configuration (a broken new one may not)
  url="$(healthz_url "$PREFIX/current/venv/bin/python")"
  build_release "$to"
  switch_to "$to"
  if restart_and_wait "$url"; then
    log "upgraded ${from:-?} -> $to; back with: $0 --rollback"
    prune_releases "$to" "$from"
    return 0
  fi
  echo "install.sh: release $to did not become ready within ${READY_TIMEOUT}s:" \
       "rolling back to $from" >&2
  switch_to "$from"
  # `previous` goes back to what it was: --rollback must not land on the broken release
  if [[ -n "$before" ]]; then set_link previous "$before"; else run rm -f "$PREFIX/previous"; fi
  restart_and_wait "$url" || echo "install.sh: $from is not ready either" >&2
  log "rolled back to $from; release $to is kept in $PREFIX/releases/$to"
  exit 1
}

# prune_releases KEEP...: remove the releases other than KEEP (current and previous). A venv
# is about 570 MB: kept forever, the releases of a few years of upgrades fill an SD card.
prune_releases() {
  local d name keep
  for d in "$PREFIX"/releases/*/; do
    [[ -d "$d" ]] || continue
    name="$(basename "$d")"
    for keep in "$@"; do
      [[ "$name" == "$keep" ]] && continue 2
    done
    log "removing release $name (neither current nor previous)"
    run rm -rf "$PREFIX/releases/$name"
  done
}

do_rollback() {
  local from to url
  from="$(current_release)"
  to="$(basename "$(readlink "$PREFIX/previous" 2>/dev/null || true)")"
  [[ -n "$to" && -d "$PREFIX/releases/$to" ]] || die "no previous release in $PREFIX"
  url="$(healthz_url "$PREFIX/releases/$to/venv/bin/python")"
  switch_to "$to"
  if restart_and_wait "$url"; then
    log "rolled back $from -> $to"
  else
    die "release $to did not become ready within ${READY_TIMEOUT}s (now current; see journalctl -u cdml-edge)"
  fi
}

# Every Python of a release's venv runs isolated (-I): run from the checkout, as users do, the
# current folder would otherwise come first on sys.path and the checks would import the
# checkout's cdml_edge (no compiled C core) instead of the release's.

# Owner and group of what install(1) creates; none in an unprivileged (staged) install.
if [[ $UNPRIV == 1 ]]; then
  OWN_ROOT=() OWN_ETC=() OWN_USER=()
else
  OWN_ROOT=(-o root -g root) OWN_ETC=(-o root -g "$USER_NAME") OWN_USER=(-o "$USER_NAME" -g "$USER_NAME")
fi
if [[ $DRY_RUN -eq 1 ]]; then
  echo "dry run: nothing is changed"
fi
if [[ $UNINSTALL -eq 0 && $MODE != rollback ]]; then
  SOURCE="$(pick_wheel "$SOURCE")"
fi
if [[ $UNINSTALL -eq 1 ]]; then
  do_uninstall
elif [[ $MODE == upgrade ]]; then
  do_upgrade
elif [[ $MODE == rollback ]]; then
  do_rollback
else
  do_install
fi
