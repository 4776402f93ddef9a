#!/usr/bin/env bash
# Launch cost of cordon against bare exec, bubblewrap and firejail, in one hyperfine run,
# and the supervisor's resident memory. Run from anywhere: `bash benches/launch.sh`.
#
#   RUNS=50 WARMUP=5 bash benches/launch.sh
#
# Variants that fail (e.g. a feature not merged yet) are reported as "failed" with
# cordon's message, and the others are still measured.
set -euo pipefail

# shellcheck source=benches/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}
OUT_DIR="$REPO_ROOT/target/bench"

TMP=$(mktemp -d /tmp/cordon-bench-launch.XXXXXX)
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

need_tools bwrap:bubblewrap firejail:firejail hyperfine:hyperfine jq:jq
build_release
mkdir -p "$OUT_DIR"
cd "$REPO_ROOT"

# --- the variants ------------------------------------------------------------------------
# bubblewrap: the same shape as cordon's default profile. /bin, /lib... are symlinks into
# /usr on merged-/usr systems and real directories elsewhere: mirror what this machine has.
BWRAP=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr)
for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [ -L "$d" ]; then
        BWRAP+=(--symlink "$(readlink "$d")" "$d")
    elif [ -d "$d" ]; then
        BWRAP+=(--ro-bind "$d" "$d")
    fi
done
BWRAP+=(--ro-bind /etc /etc --bind "$PWD" "$PWD" --tmpfs /tmp --dev /dev --proc /proc -- /bin/true)

FIREJAIL=(firejail --quiet --noprofile --net=none --private-tmp --read-only=/ --read-write="$PWD" /bin/true)

# Two references, for reading the numbers (not targets): a Rust program that only spawns
# and waits (what any Rust launcher pays), and a C launcher that applies exactly the
# Landlock rules of `cordon --no-view` and nothing else (what the kernel charges for them).
REF_SPAWN="$TMP/ref-spawn"
REF_LANDLOCK="$TMP/ref-landlock"
rustc -O --edition 2021 -o "$REF_SPAWN" "$BENCH_DIR/ref-spawn.rs" 2>"$TMP/ref.err" || log "ref-spawn: $(last_line "$TMP/ref.err")"
cc -O2 -o "$REF_LANDLOCK" "$BENCH_DIR/ref-landlock.c" 2>"$TMP/ref.err" || log "ref-landlock: $(last_line "$TMP/ref.err")"
"$CORDON" explain --no-view --json -- /bin/true |
    jq -r '.landlock | "\(.handled_fs) \(.handled_net) \(.scoped)", (.rules[] | "\(.rights) \(.path)")' >"$TMP/rules.txt"

NAMES=(bare ref-spawn ref-landlock cordon-landlock cordon-default bwrap firejail)
declare -A LABEL=(
    [bare]="/bin/true (bare exec)"
    [ref-spawn]="reference: Rust spawn-and-wait only"
    [ref-landlock]="reference: C, same Landlock rules only"
    [cordon-landlock]="cordon --no-view (Landlock only, strict)"
    [cordon-default]="cordon, default profile (view)"
    [bwrap]="bubblewrap, equivalent policy"
    [firejail]="firejail, equivalent policy"
)
declare -A CMD
CMD[bare]=$(printf '%q ' /bin/true)
CMD[ref-spawn]=$(printf '%q ' "$REF_SPAWN" /bin/true)
CMD[ref-landlock]=$(printf '%q ' "$REF_LANDLOCK" "$TMP/rules.txt" /bin/true)
CMD[cordon-landlock]=$(printf '%q ' "$CORDON" --no-view -q -- /bin/true)
CMD[cordon-default]=$(printf '%q ' "$CORDON" -- /bin/true)
CMD[bwrap]=$(printf '%q ' "${BWRAP[@]}")
CMD[firejail]=$(printf '%q ' "${FIREJAIL[@]}")

# --- which variants run at all here ------------------------------------------------------
declare -A FAILED
HF_ARGS=()
for n in "${NAMES[@]}"; do
    # shellcheck disable=SC2086  # the string was built with printf %q for hyperfine -N
    if try_run "$n" bash -c "exec ${CMD[$n]}"; then
        HF_ARGS+=(-n "$n" "${CMD[$n]}")
    else
        FAILED[$n]=$TRY_REASON
    fi
done
if [ -n "${FAILED[firejail]:-}" ]; then
    log "firejail refuses to run here: ${FAILED[firejail]}"
fi

# --- timing: one hyperfine run, every working variant side by side -----------------------
JSON="$OUT_DIR/launch.json"
log "hyperfine: $RUNS runs each, $WARMUP warm-up, no shell (-N)"
hyperfine -N --style basic --runs "$RUNS" --warmup "$WARMUP" --export-json "$JSON" "${HF_ARGS[@]}" >&2

declare -A MEDIAN MIN MAX COUNT
while IFS=$'\t' read -r name med mn mx cnt; do
    MEDIAN[$name]=$med MIN[$name]=$mn MAX[$name]=$mx COUNT[$name]=$cnt
done < <(hf_medians "$JSON")

# --- supervisor memory --------------------------------------------------------------------
# cordon runs `sleep 2`; its own process is the supervisor (the command is a child).
rss_of() { # LABEL CORDON-ARGS... → prints "max VmRSS KiB" or "failed: ..."
    local label=$1 pid i cur max=0 exe
    shift
    "$CORDON" "$@" -- sleep 2 >/dev/null 2>"$TMP/rss.err" &
    pid=$!
    BG_PIDS+=("$pid")
    sleep 0.3
    for i in 1 2 3 4 5 6; do
        exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
        [ "$exe" = "$CORDON" ] || break
        cur=$(vm_kib "$pid" VmRSS)
        [ -n "$cur" ] && ((cur > max)) && max=$cur
        sleep 0.2
    done
    local rc=0
    wait "$pid" || rc=$?
    if ((rc != 0 || max == 0)); then
        echo "failed: exit $rc: $(tail -n 1 "$TMP/rss.err")"
    else
        echo "$max"
    fi
}
RSS_DEFAULT=$(rss_of default)
RSS_LANDLOCK=$(rss_of landlock --no-view -q)

# --- report -------------------------------------------------------------------------------
fmt_rss() { case $1 in failed*) echo "$1" ;; *) awk -v k="$1" 'BEGIN { printf "%.2f MiB (%d KiB)", k / 1024, k }' ;; esac; }

echo
echo "cordon launch benchmark — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cordon $(git -C "$REPO_ROOT" rev-parse --short HEAD) (binary ${CORDON#"$REPO_ROOT"/}), $(bwrap --version), $(firejail --version | head -n 1), $(hyperfine --version)"
echo "median of $RUNS runs each (after $WARMUP warm-up runs), hyperfine -N; raw data: ${JSON#"$REPO_ROOT"/}"
echo
printf '%-48s %12s %10s %10s %10s\n' "variant" "median ms" "x bare" "min ms" "max ms"
BARE=${MEDIAN[bare]:-}
for n in "${NAMES[@]}"; do
    if [ -n "${FAILED[$n]:-}" ]; then
        printf '%-48s %12s   %s\n' "${LABEL[$n]}" "failed" "${FAILED[$n]}"
    else
        ratio=$(awk -v a="${MEDIAN[$n]}" -v b="$BARE" 'BEGIN { printf "%.1f", a / b }')
        printf '%-48s %12.3f %10s %10.3f %10.3f\n' "${LABEL[$n]}" "${MEDIAN[$n]}" "${ratio}x" "${MIN[$n]}" "${MAX[$n]}"
    fi
done
echo
echo "supervisor resident memory (max VmRSS of the cordon process while it runs 'sleep 2'):"
echo "  default profile (view):       $(fmt_rss "$RSS_DEFAULT")"
echo "  --no-view (Landlock only):    $(fmt_rss "$RSS_LANDLOCK")"

# --- targets ------------------------------------------------------------------------------
verdict() { if "$@"; then echo "PASS"; else echo "FAIL"; fi; }
echo
echo "targets:"
LL=${MEDIAN[cordon-landlock]:-}
DF=${MEDIAN[cordon-default]:-}
BW=${MEDIAN[bwrap]:-}
if [ -n "$LL" ]; then
    echo "  Landlock-only <= 2 ms:                  $(verdict fcmp "$LL" '<=' 2) ($LL ms)"
else
    echo "  Landlock-only <= 2 ms:                  n/a (variant failed)"
fi
if [ -n "$DF" ] && [ -n "$BW" ]; then
    half=$(awk -v b="$BW" 'BEGIN { printf "%.3f", b / 2 }')
    echo "  default <= half of bubblewrap:          $(verdict fcmp "$DF" '<=' "$half") ($DF ms vs $half ms)"
    echo "  default < 4 ms and below bubblewrap:    $(verdict fcmp "$DF" '<' "$(awk -v b="$BW" 'BEGIN { print (b < 4 ? b : 4) }')") ($DF ms; bubblewrap $BW ms)"
else
    echo "  default <= half of bubblewrap:          n/a (${FAILED[cordon-default]:+default failed}${FAILED[bwrap]:+ bubblewrap failed})"
    echo "  default < 4 ms and below bubblewrap:    n/a"
fi
for pair in "default:$RSS_DEFAULT" "no-view:$RSS_LANDLOCK"; do
    v=${pair#*:}
    case $v in
        failed*) echo "  supervisor RSS < 4 MiB (${pair%%:*}): n/a (failed)" ;;
        *) echo "  supervisor RSS < 4 MiB (${pair%%:*}): $(verdict fcmp "$v" '<' 4096) ($(fmt_rss "$v"))" ;;
    esac
done
