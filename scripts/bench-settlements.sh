#!/usr/bin/env bash
# Settlement matching against a ledger of 1,000,000 captures (Benchmarks/SettlementBench): in memory next to the bare
# hash join of the same lookups, then through a real SQLite store as the daemon's settlement service does.
# Usage: scripts/bench-settlements.sh  (after `swift build -c release`; `make bench` runs it last).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.build/release
CAPTURES=${BENCH_LEDGER_CAPTURES:-1000000}
SETTLE=$($BIN/klarna-settlement-bench --captures "$CAPTURES" --payout-orders "${BENCH_PAYOUT_ORDERS:-5000}" \
    --payouts "${BENCH_PAYOUTS:-20}" --folder "$(mktemp -d "${TMPDIR:-/tmp}/klarna-settlement-bench.XXXXXX")")
settle() { echo "$SETTLE" | awk -v k="$1" '$1 == k { print $2 }'; }
echo
echo "== klarna-reconciler settlements: $(settle settlement_lines) transactions in ${BENCH_PAYOUTS:-20} payouts (a SALE per capture, a FEE per order)"
echo "   matched against a ledger of $(settle ledger_captures) captures"
printf "%-58s %s\n" "matcher, ledger in memory" "$(settle memory_lines_per_second) transactions/s"
printf "%-58s %s\n" "  SALEs matched/s, next to the bare hash join of their captures" "$(settle memory_sales_per_second)/s vs $(settle memory_join_sales_per_second)/s (ratio $(awk -v a="$(settle memory_sales_per_second)" -v b="$(settle memory_join_sales_per_second)" 'BEGIN { printf "%.2f", a/b }'))"
printf "%-58s %s\n" "  memory the ledger takes" "$(( $(settle memory_ledger_kib) / 1024 )) MiB ($(settle memory_bytes_per_capture) bytes per capture; peak RSS $(( $(settle peak_rss_kib) / 1024 )) MiB)"
printf "%-58s %s\n" "through SQLite: ledger read per payout, matched, recorded" "$(settle store_lines_per_second) transactions/s (ratio to in memory $(awk -v a="$(settle store_lines_per_second)" -v b="$(settle memory_lines_per_second)" 'BEGIN { printf "%.2f", a/b }'))"
printf "%-58s %s\n" "  the store with that ledger" "$(settle store_mib) MiB, filled in $(settle store_fill_seconds) s; peak RSS $(( $(settle store_peak_rss_kib) / 1024 )) MiB (from $(( $(settle store_rss_before_kib) / 1024 )) MiB before)"
