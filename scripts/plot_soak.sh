#!/usr/bin/env bash
# Turns the CSVs of bench/soak or bench/loadgen into plots (gnuplot from
# Debian's gnuplot-nox; scripts/install-deps.sh installs it):
#
#   scripts/plot_soak.sh [PREFIX]        # default soak-out/soak
#   scripts/plot_soak.sh --compare DIR   # after soak --compare --out DIR
#
# PREFIX reads PREFIX-requests.csv, PREFIX-stats.csv and, when there is one,
# PREFIX-config.csv (the run's settings, for the titles), and writes
#   PREFIX-occupancy.png   blocks held in each tier over time (the KV blocks
#                          of running requests when the daemon reports no tiers)
#   PREFIX-hitrate.png     per tier, the share of looked-up prompt blocks it
#                          served, over 10-second windows
#   PREFIX-ttft.png        TTFT distribution (CDF, log x) by the tier of the
#                          hit: miss, L1, L2, L3, remote (deepest tier that
#                          served the prompt)
#   PREFIX-throughput.png  generated tokens/s and completed requests/s over time
#                          (10-second means)
#   PREFIX-memory.png      daemon RSS and radix-tree nodes over time (what the
#                          soak's rss check is about)
# --compare reads DIR/{l1,l1l2,l1l2l3}-requests.csv (and their config) and
# writes DIR/compare-ttft.png: the three configurations' TTFT CDFs overlaid
# on one log-scale axis.
#
# PLOT_FORMAT=svg writes .svg files instead of .png.
set -euo pipefail

die() { echo "plot_soak: $*" >&2; exit 2; }

case "${PLOT_FORMAT:-png}" in
  png) terminal="pngcairo size 1000,600 noenhanced"; ext=png ;;
  svg) terminal="svg size 1000,600 noenhanced"; ext=svg ;;
  *) die "PLOT_FORMAT is png or svg, not '$PLOT_FORMAT'" ;;
esac
command -v gnuplot >/dev/null || die "gnuplot not found (apt-get install gnuplot-nox)"

compare=""
if [ "${1:-}" = "--compare" ]; then
  [ $# -eq 2 ] || die "usage: plot_soak.sh --compare DIR"
  compare="$2"
elif [ $# -gt 1 ]; then
  die "usage: plot_soak.sh [PREFIX] | --compare DIR"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Column number of a header name in a CSV.
col() { head -1 "$1" | tr ',' '\n' | grep -nx "$2" | cut -d: -f1 || true; }

# A string as a gnuplot single-quoted literal (a quote inside is doubled).
quote() { printf "'%s'" "${1//\'/\'\'}"; }

# The value of `key` in PREFIX-config.csv (loadgen_report.cpp writes it), or
# nothing when the run wrote no such file or key.
setting() {
  local f="$1-config.csv"
  [ -r "$f" ] || return 0
  awk -F, -v k="$2" 'NR > 1 && $1 == k { print substr($0, length($1) + 2); exit }' "$f"
}

# What was run: model, workload, load and duration.
run_line() {
  local p="$1" line="" v
  v=$(setting "$p" model) && [ -n "$v" ] && line="model $v"
  v=$(setting "$p" workload)
  if [ -n "$v" ]; then
    line+="${line:+; }workload $v at $(setting "$p" rate)/s, $(setting "$p" concurrency) connections"
    local d api
    d=$(setting "$p" daemons) api=$(setting "$p" api)
    [ -n "$d" ] && [ "$d" != 1 ] && line+=" to each of $d daemons"
    [ -n "$api" ] && [ "$api" != jsonrpc ] && line+=" over $api"
    line+=", $(setting "$p" duration_s) s, seed $(setting "$p" seed)"
  fi
  printf '%s' "$line"
}

# The tiers' sizes and the preemption mode.
tier_line() {
  local p="$1" line="" v t
  for t in l1 l2 l3; do
    v=$(setting "$p" "${t}_blocks")
    [ -n "$v" ] && line+="${line:+, }${t^^} $v"
  done
  [ -n "$line" ] && line+=" blocks"
  v=$(setting "$p" remote) && [ -n "$v" ] && line+="${line:+, }remote $v"
  v=$(setting "$p" preemption) && [ -n "$v" ] && line+="${line:+; }preemption $v"
  printf '%s' "$line"
}

# A plot title: what, the run's label, and its settings on a second line.
title() {
  local what="$1" p="$2" label sub tiers
  label=$(setting "$p" label)
  sub=$(run_line "$p")
  tiers=$(tier_line "$p")
  [ -n "$tiers" ] && sub+="${sub:+; }$tiers"
  printf '%s' "$(quote "$what${label:+: $label}")"
  [ -n "$sub" ] && printf ' . "\\n" . %s' "$(quote "$sub")"
  return 0
}

# TTFTs (ms, > 0: the axis is logarithmic) of the requests whose hit_tier is
# `tier` (any when "") into `out`; each set goes to a file of its own because
# gnuplot's smooth cumulative restarts its sum at every skipped (NaN) row, so
# filtering inside the plot command would draw fragments.
ttfts() {
  local requests="$1" tier="$2" out="$3"
  awk -F, -v h="$tier" -v c="$(col "$requests" hit_tier)" -v t="$(col "$requests" ttft_ms)" \
    'NR > 1 && (h == "" || $c == h) && $t != "" && $t > 0 { print $t }' "$requests" |
    sort -g > "$out"
}

# "n=N, p50 X ms, p99 Y ms" of a sorted file of TTFTs (nearest rank).
ttft_summary() {
  awk '{ v[NR] = $1 }
       function rank(p,  k) { k = int(p * NR); if (k < p * NR) k++; if (k < 1) k = 1; return v[k] }
       END { printf "n=%d, p50 %.0f ms, p99 %.0f ms", NR, rank(0.5), rank(0.99) }' "$1"
}

if [ -n "$compare" ]; then
  series=""
  first=""
  i=0
  for tag in l1 l1l2 l1l2l3; do
    p="$compare/$tag"
    [ -r "$p-requests.csv" ] || die "cannot read $p-requests.csv"
    first="${first:-$p}"
    ttfts "$p-requests.csv" "" "$tmp/$tag.dat"
    n=$(wc -l < "$tmp/$tag.dat")
    [ "$n" -gt 0 ] || continue
    label=$(setting "$p" label)
    tiers=$(tier_line "$p")
    name="${label:-$tag}${tiers:+ ($tiers)}: $(ttft_summary "$tmp/$tag.dat")"
    i=$((i + 1))
    series+="${series:+, }'$tmp/$tag.dat' using 1:(1.0/$n) smooth cumulative with steps lw 2 lt $i title $(quote "$name")"
  done
  [ -n "$series" ] || die "no answered request in $compare/{l1,l1l2,l1l2l3}-requests.csv"
  heading=$(quote "TTFT by configuration (CDF)")
  sub=$(run_line "$first")
  [ -n "$sub" ] && heading+=' . "\n" . '"$(quote "$sub")"
  out="$compare/compare-ttft.$ext"
  gnuplot <<GP
set datafile separator ','
set terminal $terminal
set output '$out'
set title $heading
set xlabel 'TTFT ms from arrival (log scale)'
set ylabel 'share of requests'
set logscale x
set format x '%g'
set yrange [0:1]
set grid
set key below left Left reverse spacing 1.2
plot $series
GP
  echo "wrote $out"
  exit 0
fi

prefix="${1:-soak-out/soak}"
requests="$prefix-requests.csv"
stats="$prefix-stats.csv"
for f in "$requests" "$stats"; do
  [ -r "$f" ] || die "cannot read $f"
done

# The tiers the run had: a capacity, blocks held or hits somewhere in it (an
# absent tier reads 0 or -1 throughout; the remote tier has no capacity).
tiers=()
for t in l1 l2 l3 remote; do
  if awk -F, -v a="$(col "$stats" "${t}_capacity")" -v b="$(col "$stats" "${t}_used")" \
      -v c="$(col "$stats" "${t}_hits")" \
      'NR > 1 && ((a && $a > 0) || (b && $b > 0) || (c && $c > 0)) { found = 1 }
       END { exit !found }' "$stats"; then
    tiers+=("$t")
  fi
done

occupancy=""
for t in "${tiers[@]}"; do
  [ "$t" = remote ] && continue  # Redis's memory is its own: no capacity to fill
  occupancy+="${occupancy:+, }'$stats' using 1:$(col "$stats" "${t}_used") with lines lw 2 title '${t^^} blocks used'"
done
if [ -z "$occupancy" ]; then
  occupancy="'$stats' using 1:$(col "$stats" blocks_used) with lines lw 2 title 'KV blocks of running requests'"
fi

# Hit rates per 10-second window from the cumulative counters: a tier's
# hits over the window / the blocks looked up in it (every tier's hits plus
# missed_blocks), at the window's middle; NaN (a gap) when nothing was
# looked up. The stats' first row is the base (the daemon's counters may
# predate the run).
hitrate=""
if [ ${#tiers[@]} -gt 0 ] && [ -n "$(col "$stats" missed_blocks)" ]; then
  hit_cols=""
  for t in l1 l2 l3 remote; do hit_cols+="${hit_cols:+ }$(col "$stats" "${t}_hits")"; done
  shown=""
  for t in "${tiers[@]}"; do shown+="${shown:+ }$(col "$stats" "${t}_hits")"; done
  awk -F, -v all="$hit_cols" -v shown="$shown" -v miss="$(col "$stats" missed_blocks)" '
    BEGIN { na = split(all, a, " "); ns = split(shown, s, " ") }
    function emit(t,  looked, i, j) {
      looked = $miss - m0
      for (i = 1; i <= na; i++) looked += $(a[i]) - h0[a[i]]
      printf "%.1f", (t0 + t) / 2
      for (j = 1; j <= ns; j++)
        if (looked > 0) printf ",%.2f", 100 * ($(s[j]) - h0[s[j]]) / looked
        else printf ",NaN"
      printf "\n"
    }
    function base(  i) { t0 = $1; m0 = $miss; for (i = 1; i <= na; i++) h0[a[i]] = $(a[i]) }
    NR == 2 { base(); next }
    NR > 2 && $1 - t0 >= 10 { emit($1); base(); pending = 0; next }
    NR > 2 { pending = 1; last = $0 }
    END { if (pending) { $0 = last; emit($1) } }' "$stats" > "$tmp/hitrate.dat"
  i=2
  for t in "${tiers[@]}"; do
    label="${t^^}"
    [ "$t" = remote ] && label=remote
    hitrate+="${hitrate:+, }'$tmp/hitrate.dat' using 1:$i with linespoints lw 2 title '$label'"
    i=$((i + 1))
  done
fi

ttft=""
for h in miss l1 l2 l3 remote; do
  ttfts "$requests" "$h" "$tmp/$h.dat"
  n=$(wc -l < "$tmp/$h.dat")
  [ "$n" -gt 0 ] || continue
  ttft+="${ttft:+, }'$tmp/$h.dat' using 1:(1.0/$n) smooth cumulative with steps lw 2 title '$h ($n)'"
done

# RSS, and the radix tree's nodes when the daemon has a prefix cache.
memory="'$stats' using 1:(column($(col "$stats" rss_kb)) / 1024.0) with lines lw 2 title 'RSS MiB'"
nodes_col=$(col "$stats" cache_nodes)
nodes="unset y2tics; unset y2label"
if [ -n "$nodes_col" ] && awk -F, -v c="$nodes_col" 'NR > 1 && $c >= 0 { found = 1 } END { exit !found }' "$stats"; then
  memory+=", '$stats' using 1:$nodes_col axes x1y2 with lines lw 1 title 'tree nodes'"
  nodes="set y2tics; set y2label 'radix tree nodes'"
fi

# Per-second rates of a Poisson load are mostly noise: plot 10-second means.
awk -F, -v tc="$(col "$stats" tokens_per_s)" -v rc="$(col "$stats" completed_per_s)" '
  NR > 1 { i = (NR - 2) % 10; tok[i] = $tc; req[i] = $rc; n = NR - 1 < 10 ? NR - 1 : 10
           st = 0; sr = 0; for (j = 0; j < n; j++) { st += tok[j]; sr += req[j] }
           print $1 "," st / n "," sr / n }' "$stats" > "$tmp/rates.dat"

written=("$prefix-occupancy.$ext" "$prefix-ttft.$ext" "$prefix-throughput.$ext" "$prefix-memory.$ext")
hitplot=""
if [ -n "$hitrate" ]; then
  written+=("$prefix-hitrate.$ext")
  hitplot="set output '$prefix-hitrate.$ext'
set title $(title 'Hit rate by tier (10-second windows)' "$prefix")
set ylabel '% of looked-up prompt blocks'
set yrange [0:100]
set key top right
plot $hitrate
set key top left"
fi
gnuplot <<GP
set datafile separator ','
set terminal $terminal
set key top left
set grid

set output '$prefix-occupancy.$ext'
set title $(title 'Tier occupancy' "$prefix")
set xlabel 'seconds'
set ylabel 'blocks'
set yrange [0:*]
plot $occupancy

$hitplot

set output '$prefix-ttft.$ext'
set title $(title 'TTFT by the tier of the hit (CDF)' "$prefix")
set xlabel 'TTFT ms from arrival (log scale)'
set ylabel 'share of requests'
set logscale x
set format x '%g'
set yrange [0:1]
set key bottom right
${ttft:+plot $ttft}
unset logscale x
set format x
set key top left

set output '$prefix-throughput.$ext'
set title $(title 'Throughput (10-second means)' "$prefix")
set xlabel 'seconds'
set ylabel 'tokens/s'
set y2label 'requests/s'
set y2tics
set yrange [0:*]
set y2range [0:*]
plot '$tmp/rates.dat' using 1:2 with lines lw 2 title 'tokens/s', \
     '$tmp/rates.dat' using 1:3 axes x1y2 with lines lw 1 title 'requests/s'

set output '$prefix-memory.$ext'
set title $(title 'Daemon memory' "$prefix")
set ylabel 'RSS MiB'
set yrange [0:*]
set y2range [0:*]
$nodes
plot $memory
GP
echo "wrote ${written[*]}"
