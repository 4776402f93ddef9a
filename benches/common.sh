# shellcheck shell=bash
# Sourced by the bench scripts in this directory: where things are, the tools they need,
# the release build, and reading hyperfine's JSON. Not meant to be run on its own.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$BENCH_DIR/.." && pwd)
# CORDON=/path/to/cordon benches another build (the release build is still made).
CORDON=${CORDON:-"$REPO_ROOT/target/release/cordon"}

log() { printf '== %s\n' "$*" >&2; }

# need_tools CMD:PACKAGE ... — install the Debian packages of the commands that are
# missing (apt-get update first, only when something must be installed). Nothing else
# is ever downloaded.
need_tools() {
    local pair cmd pkg missing=()
    for pair in "$@"; do
        cmd=${pair%%:*}
        pkg=${pair#*:}
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "bench: missing ${missing[*]} and not root: install them first" >&2
        exit 1
    fi
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

build_release() {
    log "cargo build --release"
    (cd "$REPO_ROOT" && cargo build --release --quiet)
    [ -x "$CORDON" ] || { echo "bench: $CORDON was not built" >&2; exit 1; }
}

# hf_medians FILE.json — one line per command: NAME<TAB>MEDIAN_MS<TAB>MIN_MS<TAB>MAX_MS<TAB>RUNS
hf_medians() {
    jq -r '.results[] | [.command,
        (.median * 1000 | . * 1000 | round / 1000),
        (.min * 1000 | . * 1000 | round / 1000),
        (.max * 1000 | . * 1000 | round / 1000),
        (.times | length)] | @tsv' "$1"
}

# last_line [FILE] — the last non-empty line of FILE (or stdin); never fails.
last_line() { awk 'NF { l = $0 } END { print l }' "$@" 2>/dev/null || true; }

# try_run LABEL CMD... — run once, quietly; on failure print why and return non-zero.
# Sets TRY_REASON to the last line cordon (or the peer) printed on stderr.
TRY_REASON=""
try_run() {
    local label=$1 err rc=0
    shift
    err=$("$@" 2>&1 >/dev/null) || rc=$?
    if ((rc != 0)); then
        TRY_REASON="exit $rc: $(printf '%s\n' "$err" | last_line)"
        log "$label: FAILED ($TRY_REASON)"
        return 1
    fi
    TRY_REASON=""
    return 0
}

# vm_kib PID FIELD — VmRSS/VmHWM of PID in KiB, or empty when it is gone.
vm_kib() {
    awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null || true
}

# ms_cmp A OP B — floating-point comparison for the target checks.
fcmp() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }"; }
