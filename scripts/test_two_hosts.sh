#!/usr/bin/env bash
# Tensor parallelism across two hosts, on one machine: two network namespaces joined by a veth
# pair (iproute2) stand for two hosts, each with its own address and hostname, and Open MPI
# starts one rank in each, over TCP between those addresses only (its remote-shell agent is
# `ip netns exec`, so no ssh is needed). Checks, through `quantserve serve --tensor-parallel-size
# 2` with rank 0 on host 1 and rank 1 on host 2:
#   1. a greedy completion asked from host 2 equals the single-process `quantserve generate`;
#   2. killing rank 1 mid-stream fails the stream with a 503 error event (no [DONE]), /health
#      answers 503, and rank 0 exits within the collective timeout plus a few seconds.
# The namespaces, the veth pair and every process are removed at the end, however it ends.
# Needs root (CAP_NET_ADMIN) and openmpi-bin; skips (exit 0, saying why) without them.
# Usage: scripts/test_two_hosts.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${1:-build/quantserve}")"
tag="qs$$"
ns1="${tag}h1" ns2="${tag}h2"
a1=10.213.77.1 a2=10.213.77.2
work="$(mktemp -d)"
port=18007
timeout_s=3

skip() { echo "test_two_hosts: SKIPPED: $*"; exit 0; }
command -v mpirun >/dev/null || skip "no mpirun (apt-get install openmpi-bin)"
command -v ip >/dev/null || skip "no ip (apt-get install iproute2)"
ip netns add "${tag}probe" 2>/dev/null || skip "cannot create network namespaces (needs root)"
ip netns del "${tag}probe"

cleanup() {
  set +e
  for ns in "$ns1" "$ns2"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$ns1"
ip netns add "$ns2"
ip link add "${tag}v1" type veth peer name "${tag}v2"
ip link set "${tag}v1" netns "$ns1"
ip link set "${tag}v2" netns "$ns2"
ip -n "$ns1" addr add "$a1/24" dev "${tag}v1"
ip -n "$ns2" addr add "$a2/24" dev "${tag}v2"
for ns in "$ns1" "$ns2"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns1" link set "${tag}v1" up
ip -n "$ns2" link set "${tag}v2" up

# mpirun's remote shell: `rsh HOST CMD...` runs CMD in that host's namespace, under its name.
cat >"$work/rsh" <<RSH
#!/bin/sh
host="\$1"; shift
case "\$host" in
  $a1) ns=$ns1 ;;
  $a2) ns=$ns2 ;;
  *) echo "rsh: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
RSH
chmod +x "$work/rsh"
printf '%s slots=1\n%s slots=1\n' "$a1" "$a2" >"$work/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --hostfile "$work/hosts" -np 2 --enable-recovery --mca plm_rsh_agent "$work/rsh"
     --mca btl tcp,self --mca btl_tcp_if_include "$a1/24" --mca oob_tcp_if_include "$a1/24")

# A model slow enough to kill a rank mid-stream: Llama-shaped, random, with stories260K's
# tokenizer.
cat >"$work/shape.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 1024,
 "intermediate_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 16,
 "num_key_value_heads": 4, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
 "bos_token_id": 1, "eos_token_id": 2}
JSON
"$BIN" make-model --config "$work/shape.json" --out "$work/model" >/dev/null 2>&1
cp models/stories260K/tokenizer* models/stories260K/special_tokens_map.json "$work/model/"

ip netns exec "$ns1" unshare --uts sh -c "hostname $ns1; exec ${mpi[*]} $BIN serve $work/model \
  --tensor-parallel-size 2 --host $a1 --port $port --threads 1 --served-model-name m \
  --distributed-timeout $timeout_s" >"$work/serve.log" 2>&1 &
for _ in $(seq 100); do
  grep -q "serving .* on http://$a1:$port" "$work/serve.log" && break
  sleep 0.2
done
grep -q "2 ranks on 2 hosts" "$work/serve.log" || { cat "$work/serve.log"; echo "FAIL: not on 2 hosts"; exit 1; }
from2() { ip netns exec "$ns2" "$@"; }

# 1. The same greedy text as one process.
body='{"model": "m", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}'
got="$(from2 curl -sf "http://$a1:$port/v1/completions" -H 'content-type: application/json' \
  -d "$body" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')"
want="$("$BIN" generate --model "$work/model" --prompt "Once upon a time" --max-tokens 24 \
  --temperature 0 2>/dev/null)"
[[ "$got" == "$want" ]] || { echo "FAIL: '$got' != '$want'"; exit 1; }
echo "test_two_hosts: greedy text over 2 hosts equals one process: '$got'"

# 2. Rank 1 killed mid-stream.
from2 curl -sN "http://$a1:$port/v1/completions" -H 'content-type: application/json' \
  -d '{"model": "m", "prompt": "Once upon", "max_tokens": 1000, "temperature": 0,
       "ignore_eos": true, "stream": true}' >"$work/stream.txt" &
for _ in $(seq 100); do
  (($(grep -c '"text"' "$work/stream.txt" || true) >= 10)) && break
  sleep 0.05
done
rank1=""
for p in $(ip netns pids "$ns2"); do
  if grep -qz "OMPI_COMM_WORLD_RANK=1" "/proc/$p/environ" 2>/dev/null; then
    rank1="$p"
    break
  fi
done
[[ -n "$rank1" ]] || { echo "FAIL: rank 1 not found"; exit 1; }
kill -9 "$rank1"
killed=$SECONDS
health=000
for _ in $(seq 50); do
  health="$(from2 curl -s -o /dev/null -w '%{http_code}' "http://$a1:$port/health" || true)"
  [[ "$health" == 503 ]] && break
  sleep 0.1
done
for _ in $(seq 150); do
  pgrep -f "serve $work/model" >/dev/null || break
  sleep 0.1
done
elapsed=$((SECONDS - killed))
wait || true
grep -q '"code":503' "$work/stream.txt" || { tail -c 600 "$work/stream.txt"; echo "FAIL: no 503 event"; exit 1; }
if grep -q '\[DONE\]' "$work/stream.txt"; then echo "FAIL: [DONE] after the loss"; exit 1; fi
[[ "$health" == 503 ]] || { echo "FAIL: /health answered $health"; exit 1; }
if pgrep -f "serve $work/model" >/dev/null; then echo "FAIL: still running"; exit 1; fi
((elapsed <= timeout_s + 6)) || { echo "FAIL: took ${elapsed} s to end"; exit 1; }
echo "test_two_hosts: rank 1 killed after $(grep -c '"text"' "$work/stream.txt") streamed" \
  "tokens: 503 error event, no [DONE], /health 503, job ended in ${elapsed} s" \
  "(timeout ${timeout_s} s)"
echo "test_two_hosts: passed"
