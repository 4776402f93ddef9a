#!/bin/sh
# Generate an N-rule policy for launch-time measurements (issue #3 "Speed").
#
#   benches/rules-gen.sh N [BASE]
#
# Creates N sibling directories BASE/N/d00000 ... and BASE/N/policy.toml, which extends
# `default` and grants each of them read-only (`[fs] ro = [...]`). Prints the policy's
# path. BASE defaults to /var/tmp/cordon-rules: not under /tmp (the view's private /tmp
# covers it) and not under the current directory (a grant the rules would narrow).
#
#   p=$(benches/rules-gen.sh 10000)
#   hyperfine -N --runs 10 "target/release/cordon -p $p -- /bin/true"
#   hyperfine -N --runs 10 "target/release/cordon --no-view -p $p -- /bin/true"
set -eu
n=${1:?usage: rules-gen.sh N [BASE]}
base=${2:-/var/tmp/cordon-rules}
dir=$base/$n
mkdir -p "$dir"
policy=$dir/policy.toml
if [ ! -f "$policy" ]; then
    tmp=$policy.tmp.$$
    {
        echo 'extends = ["default"]'
        echo
        echo '[fs]'
        echo 'ro = ['
        i=0
        while [ "$i" -lt "$n" ]; do
            d=$(printf '%s/d%05d' "$dir" "$i")
            echo "  \"$d\","
            i=$((i + 1))
        done
        echo ']'
    } >"$tmp"
    # One mkdir for all directories (xargs batches the arguments).
    sed -n 's/^  "\(.*\)",$/\1/p' "$tmp" | xargs mkdir -p
    mv "$tmp" "$policy"
fi
echo "$policy"
