# Shared by the merge benchmarks (scripts/bench-merge.sh,
# scripts/bench-merge-json.sh); sourced, not run. Makes sure GNU time is
# there (for peak RSS) and defines the units both tables print.

if ! /usr/bin/time -f %M true >/dev/null 2>&1; then
    echo "installing GNU time" >&2
    if [ "$(id -u)" -eq 0 ]; then
        apt-get install -y time >/dev/null
    else
        sudo apt-get install -y time >/dev/null
    fi
fi

now() { date +%s%N; }
# mb_per_s BYTES NANOSECONDS
mb_per_s() { awk -v b="$1" -v ns="$2" 'BEGIN { printf "%.0f", b / 1e6 / (ns / 1e9) }'; }
# mib KIB
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
