#!/usr/bin/env bash
# Turns the CSVs of bench/soak or bench/loadgen into PNGs (gnuplot from
# Debian's gnuplot-nox; scripts/install-deps.sh installs it):
#
#   scripts/plot_soak.sh [PREFIX]     # default soak-out/soak
#
# reads PREFIX-requests.csv and PREFIX-stats.csv and writes
#   PREFIX-occupancy.png   blocks held in L1 / L2 / L3 over time (the KV
#                          blocks of running requests when the daemon reports
#                          no tiers)
#   PREFIX-ttft.png        TTFT distribution (CDF) by the tier of the hit:
#                          miss, L1, L2, L3, remote (deepest tier that served
#                          the prompt)
#   PREFIX-throughput.png  generated tokens/s and completed requests/s over time
#                          (10-second means)
#   PREFIX-memory.png      daemon RSS and radix-tree nodes over time (what the
#                          soak's rss check is about)
# For --compare runs, pass soak-out/l1, soak-out/l1l2, soak-out/l1l2l3 in turn.
set -euo pipefail

prefix="${1:-soak-out/soak}"
requests="$prefix-requests.csv"
stats="$prefix-stats.csv"
for f in "$requests" "$stats"; do
  [ -r "$f" ] || { echo "plot_soak: cannot read $f" >&2; exit 2; }
done
command -v gnuplot >/dev/null || { echo "plot_soak: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 2; }

# Column number of a header name in a CSV.
col() { head -1 "$1" | tr ',' '\n' | grep -nx "$2" | cut -d: -f1; }

# Tiers with a known capacity somewhere in the run.
occupancy=""
for t in l1 l2 l3; do
  c=$(col "$stats" "${t}_used")
  if awk -F, -v c="$c" 'NR > 1 && $c >= 0 { found = 1 } END { exit !found }' "$stats"; then
    occupancy+="${occupancy:+, }'$stats' using 1:$c with lines lw 2 title '${t^^} blocks used'"
  fi
done
if [ -z "$occupancy" ]; then
  occupancy="'$stats' using 1:$(col "$stats" blocks_used) with lines lw 2 title 'KV blocks of running requests'"
fi

# One CDF per hit tier that has requests. Each tier's TTFTs go to a file of
# their own: gnuplot's smooth cumulative restarts its sum at every skipped
# (NaN) row, so filtering inside the plot command would draw fragments.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ttft_col=$(col "$requests" ttft_ms)
hit_col=$(col "$requests" hit_tier)
ttft=""
for h in miss l1 l2 l3 remote; do
  awk -F, -v h="$h" -v c="$hit_col" -v t="$ttft_col" \
      'NR > 1 && $c == h && $t != "" { print $t }' "$requests" > "$tmp/$h.dat"
  n=$(wc -l < "$tmp/$h.dat")
  [ "$n" -gt 0 ] || continue
  ttft+="${ttft:+, }'$tmp/$h.dat' using 1:(1.0/$n) smooth cumulative with steps lw 2 title '$h ($n)'"
done

# RSS, and the radix tree's nodes when the daemon has a prefix cache.
memory="'$stats' using 1:(column($(col "$stats" rss_kb)) / 1024.0) with lines lw 2 title 'RSS MiB'"
nodes_col=$(col "$stats" cache_nodes)
if [ -n "$nodes_col" ] && awk -F, -v c="$nodes_col" 'NR > 1 && $c >= 0 { found = 1 } END { exit !found }' "$stats"; then
  memory+=", '$stats' using 1:$nodes_col axes x1y2 with lines lw 1 title 'tree nodes'"
fi

# Per-second rates of a Poisson load are mostly noise: plot 10-second means.
awk -F, -v tc="$(col "$stats" tokens_per_s)" -v rc="$(col "$stats" completed_per_s)" '
  NR > 1 { i = (NR - 2) % 10; tok[i] = $tc; req[i] = $rc; n = NR - 1 < 10 ? NR - 1 : 10
           st = 0; sr = 0; for (j = 0; j < n; j++) { st += tok[j]; sr += req[j] }
           print $1 "," st / n "," sr / n }' "$stats" > "$tmp/rates.dat"

gnuplot <<GP
set datafile separator ','
set terminal pngcairo size 1000,600 noenhanced
set key top left
set grid

set output '$prefix-occupancy.png'
set title 'Tier occupancy'
set xlabel 'seconds'
set ylabel 'blocks'
plot $occupancy

set output '$prefix-ttft.png'
set title 'TTFT by the tier of the hit (CDF)'
set xlabel 'TTFT ms (from arrival)'
set ylabel 'share of requests'
set yrange [0:1]
set key bottom right
${ttft:+plot $ttft}
set yrange [*:*]
set key top left

set output '$prefix-throughput.png'
set title 'Throughput (10-second means)'
set xlabel 'seconds'
set ylabel 'tokens/s'
set y2label 'requests/s'
set y2tics
plot '$tmp/rates.dat' using 1:2 with lines lw 2 title 'tokens/s', \
     '$tmp/rates.dat' using 1:3 axes x1y2 with lines lw 1 title 'requests/s'

set output '$prefix-memory.png'
set title 'Daemon memory'
set xlabel 'seconds'
set ylabel 'RSS MiB'
set y2label 'radix tree nodes'
plot $memory
GP
echo "wrote $prefix-occupancy.png $prefix-ttft.png $prefix-throughput.png $prefix-memory.png"
