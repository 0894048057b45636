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
#                          miss, L1, L2, L3 (deepest tier that served the prompt)
#   PREFIX-throughput.png  generated tokens/s and completed requests/s over time
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

# One CDF per hit tier that has requests.
ttft_col=$(col "$requests" ttft_ms)
hit_col=$(col "$requests" hit_tier)
ttft=""
for h in miss l1 l2 l3; do
  n=$(awk -F, -v h="$h" -v c="$hit_col" -v t="$ttft_col" \
      'NR > 1 && $c == h && $t != "" { n++ } END { print n + 0 }' "$requests")
  [ "$n" -gt 0 ] || continue
  ttft+="${ttft:+, }'$requests' using (strcol($hit_col) eq '$h' ? column($ttft_col) : NaN):(1.0/$n) smooth cumulative with steps lw 2 title '$h ($n)'"
done

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
${ttft:+plot $ttft}
set yrange [*:*]

set output '$prefix-throughput.png'
set title 'Throughput'
set xlabel 'seconds'
set ylabel 'tokens/s'
set y2label 'requests/s'
set y2tics
plot '$stats' using 1:$(col "$stats" tokens_per_s) with lines lw 2 title 'tokens/s', \
     '$stats' using 1:$(col "$stats" completed_per_s) axes x1y2 with lines lw 1 title 'requests/s'
GP
echo "wrote $prefix-occupancy.png $prefix-ttft.png $prefix-throughput.png"
