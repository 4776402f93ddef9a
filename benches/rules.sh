#!/usr/bin/env bash
# Launch time as the number of granted paths grows: 10, 100, 1000, 10000 `ro` paths, for
# cordon (with the view and --no-view) and bubblewrap (one --ro-bind each).
# Run from anywhere: `bash benches/rules.sh`.
#
#   RUNS=20 WARMUP=3 COUNTS="10 100 1000 10000" BUDGET_S=60 bash benches/rules.sh
#
# Each variant gets one trial run first (killed after TRIAL_TIMEOUT seconds). When that
# run shows that RUNS runs would not fit in BUDGET_S seconds, fewer runs are made (at
# least one) and the table says how many: a launch that takes seconds is not worth
# timing to the millisecond, and the script must end in bounded time.
#
# The granted directories live under /var/tmp (not under /tmp, which cordon's view
# replaces by the private tmp dir, and not under the current directory, which the default
# profile already grants read-write). cordon gets them as a generated policy file
# (`extends = ["default"]`, `[fs] ro = [...]`, via -p FILE). bubblewrap gets them through
# `--args FD` from a NUL-separated file, because 10000 binds do not fit in the one command
# string hyperfine takes; so bubblewrap is timed through `sh -c 'exec bwrap --args 3 ...
# 3<FILE'` and hyperfine subtracts the shell's own start-up, which it measures.
set -euo pipefail

# shellcheck source=benches/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RUNS=${RUNS:-20}
WARMUP=${WARMUP:-3}
COUNTS=${COUNTS:-"10 100 1000 10000"}
BUDGET_S=${BUDGET_S:-60}          # per variant and count: fewer runs when one is slow
TRIAL_TIMEOUT=${TRIAL_TIMEOUT:-180}
OUT_DIR="$REPO_ROOT/target/bench"

TMP=$(mktemp -d /var/tmp/cordon-bench-rules.XXXXXX)
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT INT TERM

need_tools bwrap:bubblewrap hyperfine:hyperfine jq:jq
build_release
mkdir -p "$OUT_DIR"
cd "$REPO_ROOT"

MAXN=0
for n in $COUNTS; do ((n > MAXN)) && MAXN=$n; done
((MAXN <= 100000)) || { echo "bench: at most 100000 rules" >&2; exit 1; }
log "creating $MAXN directories under $TMP/r"
mkdir "$TMP/r"
(cd "$TMP/r" && seq -f 'd%05g' 0 $((MAXN - 1)) | xargs mkdir)

BWRAP_BASE=(--unshare-all --die-with-parent --ro-bind /usr /usr)
for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [ -L "$d" ]; then
        BWRAP_BASE+=(--symlink "$(readlink "$d")" "$d")
    elif [ -d "$d" ]; then
        BWRAP_BASE+=(--ro-bind "$d" "$d")
    fi
done
BWRAP_BASE+=(--ro-bind /etc /etc --bind "$PWD" "$PWD" --tmpfs /tmp --dev /dev --proc /proc)

VARIANTS=(cordon-view cordon-noview bwrap)
declare -A MED FAIL NRUNS

# bench NAME N SHELL CMD — time one variant: one trial run first (bounded by TRIAL_TIMEOUT);
# if it fails, record why; else as many runs as fit in BUDGET_S seconds, at most RUNS.
# SHELL is "none" (hyperfine -N, CMD split like a shell would) or "sh" (CMD run by sh -c,
# hyperfine subtracting the shell's start-up).
bench() {
    local name=$1 n=$2 shell=$3 cmd=$4 t0 t1 trial_ms runs warmup json ok=1
    t0=$(date +%s%N)
    if [ "$shell" = none ]; then
        try_run "$name/$n" timeout "$TRIAL_TIMEOUT" bash -c "exec $cmd" || ok=0
    else
        try_run "$name/$n" timeout "$TRIAL_TIMEOUT" sh -c "$cmd" || ok=0
    fi
    t1=$(date +%s%N)
    trial_ms=$(((t1 - t0) / 1000000))
    if ((!ok)); then
        case $TRY_REASON in
            "exit 124: "*) FAIL[$name/$n]="did not finish within TRIAL_TIMEOUT=${TRIAL_TIMEOUT} s (killed)" ;;
            *) FAIL[$name/$n]="$TRY_REASON (after ${trial_ms} ms)" ;;
        esac
        return 0
    fi
    runs=$RUNS warmup=$WARMUP
    if ((trial_ms > 0 && BUDGET_S * 1000 / trial_ms < RUNS)); then
        runs=$((BUDGET_S * 1000 / trial_ms))
        warmup=0
        if ((runs < 2)); then
            # Too slow to repeat: the trial run is the measurement.
            log "$name/$n: one run took ${trial_ms} ms: that run is the measurement"
            MED[$name/$n]=$trial_ms NRUNS[$name/$n]=1
            return 0
        fi
        log "$name/$n: one run took ${trial_ms} ms: only $runs runs fit in the ${BUDGET_S} s budget"
    fi
    json="$OUT_DIR/rules-$n-$name.json"
    hyperfine --shell "$shell" --style basic --runs "$runs" --warmup "$warmup" \
        --export-json "$json" -n "$name" "$cmd" >&2
    while IFS=$'\t' read -r _ med _ _ cnt; do MED[$name/$n]=$(printf '%.3f' "$med") NRUNS[$name/$n]=$cnt; done < <(hf_medians "$json")
}

for n in $COUNTS; do
    policy="$TMP/policy-$n.toml"
    args="$TMP/bwrap-$n.args"
    {
        echo 'extends = ["default"]'
        echo '[fs]'
        echo 'ro = ['
        seq -f "  \"$TMP/r/d%05g\"," 0 $((n - 1))
        echo ']'
    } >"$policy"
    {
        printf '%s\0' "${BWRAP_BASE[@]}"
        seq -f "$TMP/r/d%05g" 0 $((n - 1)) | while IFS= read -r p; do printf -- '--ro-bind\0%s\0%s\0' "$p" "$p"; done
    } >"$args"

    log "$n rules"
    bench cordon-view "$n" none "$(printf '%q ' "$CORDON" -p "$policy" -- /bin/true)"
    bench cordon-noview "$n" none "$(printf '%q ' "$CORDON" -p "$policy" --no-view -q -- /bin/true)"
    bench bwrap "$n" sh "exec bwrap --args 3 -- /bin/true 3<$(printf '%q' "$args")"
done

echo
echo "cordon rules benchmark — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cordon $(git -C "$REPO_ROOT" rev-parse --short HEAD) (binary ${CORDON#"$REPO_ROOT"/}), $(bwrap --version), $(hyperfine --version)"
echo "median launch time of '/bin/true' in ms, $RUNS runs each (after $WARMUP warm-up runs) unless"
echo "a run count is shown (slow variants get fewer, within ${BUDGET_S} s); raw data: target/bench/rules-*.json"
echo
printf '%8s %22s %22s %22s\n' "ro rules" "cordon (view)" "cordon --no-view" "bubblewrap"
for n in $COUNTS; do
    row=()
    for v in "${VARIANTS[@]}"; do
        if [ -n "${FAIL[$v/$n]:-}" ]; then
            row+=("failed")
        else
            cell=${MED[$v/$n]}
            if ((NRUNS[$v/$n] == 1)); then
                cell="$cell (1 run)"
            elif ((NRUNS[$v/$n] < RUNS)); then
                cell="$cell (${NRUNS[$v/$n]} runs)"
            fi
            row+=("$cell")
        fi
    done
    printf '%8s %22s %22s %22s\n' "$n" "${row[@]}"
done
reasons=$(for k in "${!FAIL[@]}"; do printf '  %s: %s\n' "$k" "${FAIL[$k]}"; done | sort -V)
if [ -n "$reasons" ]; then
    echo
    echo "failed:"
    echo "$reasons"
fi

echo
echo "target: launch with 10000 rules under 30 ms"
for v in cordon-view cordon-noview; do
    if [[ " $COUNTS " != *" 10000 "* ]]; then
        echo "  $v: n/a (10000 not in COUNTS)"
    elif [ -n "${FAIL[$v/10000]:-}" ]; then
        echo "  $v: n/a (failed)"
    elif fcmp "${MED[$v/10000]}" '<' 30; then
        echo "  $v: PASS (${MED[$v/10000]} ms)"
    else
        echo "  $v: FAIL (${MED[$v/10000]} ms)"
    fi
done
