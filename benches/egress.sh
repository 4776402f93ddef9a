#!/usr/bin/env bash
# Throughput of cordon's egress proxy against a direct download, on loopback only.
# Run from anywhere: `bash benches/egress.sh`.
#
#   SIZE_MB=200 REPS=15 CONCURRENT=100 QUIET_S=20 bash benches/egress.sh
#
# A python3 http.server on 127.0.0.1 (a random free port) serves a SIZE_MB file of zeros
# and a 4 KiB file from a temp dir. curl downloads the big file REPS times each:
#   direct                      curl on the host, no proxy
#   plain proxying              inside cordon, curl sends `GET http://bench.test:PORT/...`
#                               to the proxy cordon sets in http_proxy
#   CONNECT tunnelling          the same with `curl -p`: a CONNECT tunnel through the proxy
# with `--allow-host bench.test:PORT --add-host bench.test=127.0.0.1`, once with the default
# profile (view and network namespace) and once with --no-view --best-effort (Landlock only,
# the proxy on the host's loopback). Then CONCURRENT small requests at once through the
# proxy (xargs -P) inside one sandbox, counting the ones that did not get a 200.
# While each cordon run transfers, the supervisor's VmRSS is sampled every 0.1 s.
# One transfer takes ~0.15 s and single transfers on the 2-core VM swing by 2x with where
# the scheduler puts server, proxy and client, so: REPS rounds, each variant once per
# round in an order rotated by one every round, each transfer started only once the
# machine is idle (waiting at most QUIET_S seconds, then counted as taken on a busy
# machine), the median per variant, and the median of the per-round ratios to direct.
# Only 127.0.0.1 is ever contacted; bench.test is pinned to it.
set -euo pipefail

# shellcheck source=benches/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SIZE_MB=${SIZE_MB:-200}
REPS=${REPS:-15}
QUIET_S=${QUIET_S:-20} # per transfer: wait at most this long for an idle machine
CONCURRENT=${CONCURRENT:-100}
MAX_S=${MAX_S:-120} # per transfer: curl --max-time, cordon --timeout, the sampling loop
HOST=bench.test

TMP=$(mktemp -d /tmp/cordon-bench-egress.XXXXXX)
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

need_tools curl:curl python3:python3 jq:jq
build_release
cd "$REPO_ROOT"

# --- the server ---------------------------------------------------------------------------
mkdir "$TMP/www"
log "creating a ${SIZE_MB} MiB file"
head -c $((SIZE_MB * 1024 * 1024)) /dev/zero >"$TMP/www/file"
head -c 4096 /dev/zero >"$TMP/www/small"
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$TMP/www" >"$TMP/server.log" 2>&1 &
BG_PIDS+=($!)
PORT=""
for _ in $(seq 1 100); do
    PORT=$(sed -n 's/.*Serving HTTP on 127\.0\.0\.1 port \([0-9]*\).*/\1/p' "$TMP/server.log" | head -n 1)
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || { echo "bench: the http server did not start:" >&2; cat "$TMP/server.log" >&2; exit 1; }
log "server on 127.0.0.1:$PORT"

EGRESS=(--timeout "${MAX_S}s" --allow-host "$HOST:$PORT" --add-host "$HOST=127.0.0.1")
CURL=(curl -s -S --max-time "$MAX_S" -o /dev/null -w '%{speed_download}')

# A descriptor that never has data: `read -t` on it is a sleep without a fork.
exec {SLEEP_FD}<> <(:)
nap() { read -r -t "$1" -u "$SLEEP_FD" _ || true; }

# rss_kib PID — set RSS_KIB to the resident memory of PID in KiB (VmRSS), or to nothing
# when it is gone or a zombie. Shell builtins only: the sampler runs beside the transfer
# (direct ones too) and must not add forks to it. statm is one short line, read in one
# go; status is read in 128-byte pieces that can tear while the process changes.
PAGE_KIB=$(($(getconf PAGESIZE) / 1024))
rss_kib() {
    local _size rss
    RSS_KIB=""
    { read -r _size rss _ <"/proc/$1/statm"; } 2>/dev/null || return 0
    ((rss > 0)) && RSS_KIB=$((rss * PAGE_KIB))
    return 0
}

# run_sampled OUT ERR CMD... — run CMD in the background (its stdout to OUT, stderr to
# ERR), sample its VmRSS every 0.1 s until it ends; RSS_SAMPLES gets the KiB values.
# Returns CMD's exit status.
RSS_SAMPLES=()
run_sampled() {
    local out=$1 err=$2 pid v i rc=0 want
    shift 2
    want=$(readlink -f "$(command -v "$1")")
    "$@" >"$out" 2>"$err" &
    pid=$!
    BG_PIDS+=("$pid")
    RSS_SAMPLES=()
    for ((i = 0; i < MAX_S * 10 + 50; i++)); do
        # a zombie has no resident memory: the loop ends with the process
        rss_kib "$pid"
        v=$RSS_KIB
        [ -n "$v" ] || break
        # only once the forked shell has become the program (not before its exec)
        [ "/proc/$pid/exe" -ef "$want" ] && RSS_SAMPLES+=("$v")
        nap 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" || rc=$?
    return "$rc"
}

# wait_idle — wait until both CPUs are at least 85 % idle over 0.5 s (another build on
# the machine would slow one variant and not the others), at most QUIET_S seconds.
# Returns 1 if the machine stayed busy.
BUSY=0
wait_idle() {
    local a b t i idle busy end=$((SECONDS + QUIET_S))
    while :; do
        read -r -a a </proc/stat
        nap 0.5
        read -r -a b </proc/stat
        t=0
        for i in 1 2 3 4 5 6 7 8; do t=$((t + b[i] - a[i])); done
        idle=$((b[4] - a[4] + b[5] - a[5]))
        busy=$((t - idle))
        ((t > 0 && busy * 100 < t * 15)) && return 0
        ((SECONDS >= end)) && { BUSY=$((BUSY + 1)); return 1; }
    done
}

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

declare -A SPEED FAIL RSS SPEEDS RSSALL LAST RATIOS
# transfer_once NAME CMD... — one download of the big file; appends to SPEEDS[NAME] (bytes/s)
# and RSSALL[NAME] (KiB), or sets FAIL[NAME].
transfer_once() {
    local name=$1 rc=0 s
    shift
    [ -n "${FAIL[$name]:-}" ] && return 0
    wait_idle || true
    run_sampled "$TMP/out" "$TMP/err" "$@" || rc=$?
    s=$(tr -d '[:space:]' <"$TMP/out")
    if ((rc != 0)) || [ -z "$s" ] || ! fcmp "$s" '>' 0; then
        FAIL[$name]="exit $rc: $(last_line "$TMP/err")"
        log "$name: FAILED (${FAIL[$name]})"
        return 0
    fi
    SPEEDS[$name]+="$s "
    LAST[$name]=$s
    [[ $name == direct ]] || RSSALL[$name]+="${RSS_SAMPLES[*]} "
    log "$name: $(awk -v s="$s" 'BEGIN { printf "%.0f MiB/s", s / 1048576 }')"
}

# REPS rounds, each round every variant once, so that a change in the machine's load
# between rounds hits every variant alike; the order is rotated by one each round, so no
# variant always runs first or always after the same one.
URL="http://$HOST:$PORT/file"
CO_VIEW=("$CORDON" "${EGRESS[@]}" --)
CO_NOVIEW=("$CORDON" --no-view --best-effort -q "${EGRESS[@]}" --)
VARIANTS=(direct view-plain view-connect noview-plain noview-connect)
transfer_variant() {
    case $1 in
        direct) transfer_once direct "${CURL[@]}" "http://127.0.0.1:$PORT/file" ;;
        view-plain) transfer_once view-plain "${CO_VIEW[@]}" "${CURL[@]}" "$URL" ;;
        view-connect) transfer_once view-connect "${CO_VIEW[@]}" "${CURL[@]}" -p "$URL" ;;
        noview-plain) transfer_once noview-plain "${CO_NOVIEW[@]}" "${CURL[@]}" "$URL" ;;
        noview-connect) transfer_once noview-connect "${CO_NOVIEW[@]}" "${CURL[@]}" -p "$URL" ;;
    esac
}
for ((r = 1; r <= REPS; r++)); do
    log "round $r of $REPS"
    LAST=()
    for ((k = 0; k < ${#VARIANTS[@]}; k++)); do
        transfer_variant "${VARIANTS[(k + r - 1) % ${#VARIANTS[@]}]}"
    done
    # this round's ratio of each proxied variant to this round's direct transfer
    for name in "${VARIANTS[@]:1}"; do
        [ -n "${LAST[direct]:-}" ] && [ -n "${LAST[$name]:-}" ] &&
            RATIOS[$name]+="$(awk -v a="${LAST[$name]}" -v b="${LAST[direct]}" 'BEGIN { printf "%.3f", a / b }') "
    done
done
for name in "${!SPEEDS[@]}"; do
    [ -n "${FAIL[$name]:-}" ] && continue
    # shellcheck disable=SC2086  # a list of numbers
    SPEED[$name]=$(median ${SPEEDS[$name]})
done
for name in "${!RSSALL[@]}"; do
    [ -n "${FAIL[$name]:-}" ] && continue
    # shellcheck disable=SC2086
    RSS[$name]="$(printf '%s\n' ${RSSALL[$name]} | sort -n | awk 'NF { a[++n] = $1 } END { if (n) printf "%d samples, min %.2f / median %.2f / max %.2f MiB", n, a[1] / 1024, a[int((n + 1) / 2)] / 1024, a[n] / 1024; else print "no sample (transfers shorter than 0.1 s)" }')"
done

# --- concurrency --------------------------------------------------------------------------
# CONCURRENT requests for the small file at once; each prints its HTTP code on one line.
declare -A CONC
concurrent() {
    local name=$1 t0 t1 rc=0 ok
    shift
    wait_idle || true
    t0=$(date +%s%N)
    "$@" sh -c 'seq 1 "$1" | xargs -P "$1" -I{} curl -s -S --max-time "$2" -o /dev/null -w "%{http_code}\n" "$3"' \
        sh "$CONCURRENT" "$MAX_S" "$URL_SMALL" >"$TMP/codes" 2>"$TMP/err" || rc=$?
    t1=$(date +%s%N)
    ok=$(grep -c '^200$' "$TMP/codes" || true)
    if ((ok == 0)); then
        CONC[$name]="failed: exit $rc: $(last_line "$TMP/err")"
    else
        CONC[$name]="$((CONCURRENT - ok)) of $CONCURRENT failed, $(((t1 - t0) / 1000000)) ms in all"
    fi
    log "$name: ${CONC[$name]}"
}
URL_SMALL="http://127.0.0.1:$PORT/small"
concurrent direct
URL_SMALL="http://$HOST:$PORT/small"
concurrent view "$CORDON" "${EGRESS[@]}" --
concurrent noview "$CORDON" --no-view --best-effort -q "${EGRESS[@]}" --

# --- report -------------------------------------------------------------------------------
echo
echo "cordon egress benchmark — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cordon $(git -C "$REPO_ROOT" rev-parse --short HEAD) (binary ${CORDON#"$REPO_ROOT"/}), $(curl --version | head -n 1 | cut -d' ' -f1-2), $(python3 --version) http.server on 127.0.0.1"
echo "${SIZE_MB} MiB download, $REPS rounds (order rotated each round), idle-machine wait of up to ${QUIET_S} s before each transfer ($BUSY of them started on a busy machine)"
echo "x direct: ratio of the medians; per round: median of each round's ratio to that round's direct"
echo "target: proxied throughput >= 0.9 x direct by both measures"
echo
printf '%-44s %8s %13s %9s %10s  %s\n' "variant" "MiB/s" "min-max" "x direct" "per round" "target"
DIRECT=${SPEED[direct]:-}
for name in "${VARIANTS[@]}"; do
    case $name in
        direct) label="direct (curl on the host)" ;;
        view-plain) label="cordon default, plain proxying" ;;
        view-connect) label="cordon default, CONNECT tunnel (curl -p)" ;;
        noview-plain) label="cordon --no-view, plain proxying" ;;
        noview-connect) label="cordon --no-view, CONNECT tunnel (curl -p)" ;;
    esac
    if [ -n "${FAIL[$name]:-}" ]; then
        printf '%-44s %8s   %s\n' "$label" "failed" "${FAIL[$name]}"
        continue
    fi
    mibs=$(awk -v s="${SPEED[$name]}" 'BEGIN { printf "%.0f", s / 1048576 }')
    # shellcheck disable=SC2086  # a list of numbers
    range=$(printf '%s\n' ${SPEEDS[$name]} | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f-%.0f", lo / 1048576, hi / 1048576 }')
    if [ -n "$DIRECT" ] && [ "$name" != direct ]; then
        ratio=$(awk -v a="${SPEED[$name]}" -v b="$DIRECT" 'BEGIN { printf "%.2f", a / b }')
        # shellcheck disable=SC2086
        paired=$(printf '%.2f' "$(median ${RATIOS[$name]:-0})")
        if fcmp "$ratio" '>=' 0.9 && fcmp "$paired" '>=' 0.9; then t=PASS; else t=FAIL; fi
        printf '%-44s %8s %13s %9s %10s  %s\n' "$label" "$mibs" "$range" "${ratio}x" "${paired}x" "$t"
    else
        printf '%-44s %8s %13s %9s\n' "$label" "$mibs" "$range" "1.00x"
    fi
done
echo
echo "supervisor VmRSS during the transfers:"
for name in view-plain view-connect noview-plain noview-connect; do
    printf '  %-16s %s\n' "$name" "${RSS[$name]:-n/a (failed)}"
done
echo
echo "$CONCURRENT concurrent requests for a 4 KiB file:"
printf '  %-16s %s\n' direct "${CONC[direct]}" "cordon default" "${CONC[view]}" "cordon --no-view" "${CONC[noview]}"
