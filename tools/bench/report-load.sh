#!/bin/bash
# How long a browser takes to open the report of a large run (issue 6: a 1e6-token run must open in
# under 2 s). Builds a dump of 1000 sequences x 1000 response tokens, turns it into a run file with
# `rlparity compare`, renders it with `rlparity report`, then loads the page in Debian's headless
# chromium inside a wrapper page that times the report frame from navigation to its load event
# (HTML parsed, inline SVG built, the page's script run), best of 3 fresh browser starts.
#
# usage: tools/bench/report-load.sh [RLPARITY_BINARY]   (default: build/release/rlparity)
set -euo pipefail
bin=${1:-build/release/rlparity}
chromium=/usr/bin/chromium
[ -x "$bin" ] || { echo "no rlparity binary at $bin (build the release preset first)" >&2; exit 2; }
[ -x "$chromium" ] || { echo "$chromium is not installed (tools/setup.sh installs it)" >&2; exit 2; }
bin=$(realpath "$bin")
work=$(mktemp -d /tmp/rlparity-report-load.XXXXXX)
trap 'rm -rf "$work"' EXIT

/usr/bin/python3 - "$work/dump.jsonl" <<'EOF'
import json, math, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    for s in range(1000):
        n = 1000
        gen = [-abs(rng.gauss(0, 1.5)) for _ in range(n)]
        train = [g + rng.gauss(0, 0.05 if rng.random() > 0.01 else 1.0) for g in gen]
        train = [min(t, 0.0) for t in train]
        f.write(json.dumps({"id": f"s{s}", "prompt": [1, 2, 3], "response": [rng.randrange(1000) for _ in range(n)],
                            "gen_logprobs": [round(x, 6) for x in gen],
                            "train_logprobs": [round(x, 6) for x in train]}) + "\n")
EOF
(cd "$work" && "$bin" compare --dump dump.jsonl --out big.h5 -q)
(cd "$work" && "$bin" report big.h5 -o big.html > /dev/null)
tokens=$(/usr/bin/python3 -c "import h5py,sys; f=h5py.File(sys.argv[1]); print(sum(len(r['tokens/log_ratio']) for r in f['recipes'].values()))" "$work/big.h5")
size=$(stat -c %s "$work/big.html")

cat > "$work/wrapper.html" <<'EOF'
<!doctype html><html><body><pre id="t">pending</pre><script>
const t0 = performance.now();
const f = document.createElement("iframe");
f.style.width = "1400px"; f.style.height = "900px";
f.onload = () => { document.getElementById("t").textContent = "LOADED_MS " + (performance.now() - t0).toFixed(0); };
f.src = "big.html";
document.body.appendChild(f);
</script></body></html>
EOF

best=""
for i in 1 2 3; do
  prof=$(mktemp -d "$work/profile.XXXXXX")
  out=$(timeout 60 "$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run \
        --user-data-dir="$prof" --allow-file-access-from-files --dump-dom "file://$work/wrapper.html" 2>/dev/null || true)
  ms=$(grep -o 'LOADED_MS [0-9]*' <<< "$out" | awk '{print $2}')
  [ -n "$ms" ] || { echo "run $i: the report frame did not finish loading" >&2; exit 1; }
  echo "run $i: ${ms} ms"
  if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
done
echo "report of $tokens tokens: $size bytes of HTML, opened in $best ms (best of 3; goal < 2000 ms)"
