#!/usr/bin/env bash
# Run every fuzz target for SECONDS (default 30) each; exit non-zero on the first crash.
# For CI and by hand:  fuzz/run.sh 60
# Needs the nightly toolchain; installs cargo-fuzz (about 2 minutes) when it is missing.
# Seeds are committed in seeds/<target>; what a run finds goes to corpus/ and artifacts/
# (both ignored by git). A crash prints the input's path and the command to replay it.
set -euo pipefail

seconds="${1:-30}"
case "$seconds" in
  '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")"

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: installing cargo-fuzz (cargo +nightly install cargo-fuzz --locked)" >&2
  cargo +nightly install cargo-fuzz --locked
fi

for target in $(cargo +nightly fuzz list); do
  mkdir -p "corpus/$target"
  echo "fuzz/run.sh: $target for ${seconds}s" >&2
  # New inputs go to the first directory (ignored by git); the seeds are only read.
  cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1
done
echo "fuzz/run.sh: every target ran ${seconds}s without a crash" >&2
