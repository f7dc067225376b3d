#!/usr/bin/env bash
# Runs a command while N busy loops load the machine (LOAD, default 13: with
# the command's own processes, a load average of about 15 on 2 cores, as CI
# machines and laptops often are), and stops the loops after it, by their
# process ids. `make test-loaded` runs make test so; every timing bound of
# the tests must hold there.
#   hack/loaded.sh make test
set -euo pipefail
n=${LOAD:-13}
pids=()
stop() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap stop EXIT
for _ in $(seq "$n"); do
  (while :; do :; done) &
  pids+=($!)
done
echo "loaded: $n busy loops (pids ${pids[*]}) while: $*" >&2
start=$SECONDS
set +e
"$@"
rc=$?
set -e
echo "loaded: $* exited $rc after $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit $rc
