# Shared by run_dashboard_test.sh and make_fixtures.sh (sourced, not run):
# a real fca-server on 127.0.0.1 with tiny models, two datasets, one
# finished job with per-layer dependence rows, a second finished job of one
# of its models, and one slow running job. Needs SERVER_BIN, CLI_BIN,
# LOCAL_AUDIT_BIN and WORK (an empty folder); sets GRPC_ADDR, HTTP_ADDR
# (empty when the server has no HTTP gateway) and SERVER_PID.

# `bytes` bytes of English-like words, different for each seed (two seeds
# share no 16-byte window in practice).
fca_words() {
  awk -v n="$1" -v seed="$2" 'BEGIN {
    srand(seed)
    k = split("the of and a to in is was that for it with as his on be at by had " \
              "not are but from or have an they which one you were all her she there " \
              "would their we him been has when who will more no if out so said what " \
              "up its about into than them can only other new some could time these " \
              "two may then do first any my now such like our over man me even most", w, " ")
    s = ""
    while (length(s) < n) s = s w[int(rand() * k) + 1] (rand() < 0.1 ? ".\n" : " ")
    printf "%s", substr(s, 1, n)
  }'
}

fca_init_model() {  # name, extra flags...
  local name=$1
  shift
  "$LOCAL_AUDIT_BIN" init --out="$WORK/models/$name" --d_model=32 --n_layers=2 --n_heads=2 \
    --n_groups=4 --d_ff=64 --controller_width=16 --max_seq_len=64 "$@" >/dev/null
}

# Whether this fca-server has the HTTP/JSON gateway (--http_listen).
# (absl's --helpfull exits 1; no pipe, so pipefail cannot turn a match
# into a failure.)
fca_server_has_http() {
  local help
  help=$("$SERVER_BIN" --helpfull 2>&1 || true)
  [[ $help == *--http_listen* ]]
}

# Starts the server (with the gateway when it has one; extra flags as
# arguments) and waits for its address lines on stdout.
fca_start_server() {
  mkdir -p "$WORK/models" "$WORK/data"
  local args=(--listen=127.0.0.1:0 --models="$WORK/models" --db="$WORK/fca.sqlite" --threads=1 "$@")
  local http=0
  if fca_server_has_http; then
    http=1
    args+=(--http_listen=127.0.0.1:0)
  fi
  "$SERVER_BIN" "${args[@]}" >"$WORK/server.out" 2>"$WORK/server.err" &
  SERVER_PID=$!
  GRPC_ADDR=""
  HTTP_ADDR=""
  for _ in $(seq 600); do  # 60 s: loading torch takes a while
    GRPC_ADDR=$(sed -n 's/^fca-server: listening on \([0-9.]*:[0-9]*\)$/\1/p' "$WORK/server.out")
    HTTP_ADDR=$(sed -n 's/.*http listening on \([0-9.]*:[0-9]*\).*/\1/p' "$WORK/server.out")
    if [ -n "$GRPC_ADDR" ] && { [ -n "$HTTP_ADDR" ] || [ "$http" = 0 ]; }; then return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "fca-server did not start:" >&2
  cat "$WORK/server.out" "$WORK/server.err" >&2
  return 1
}

fca_cli() { "$CLI_BIN" --server="$GRPC_ADDR" "$@"; }

# Models (and fg-broken, whose config.json the server refuses), datasets, job 1 (two models and a dense twin, static_layer replayed
# at one layer at a time, run to completion), job 2 (fg-a again, another
# seed, run to completion: a model with two finished jobs for the compare
# view) and job 3 (a wide model over many windows, left running).
fca_make_jobs() {
  fca_init_model fg-a --seed=1 --controller_out_std=1.0
  fca_init_model fg-b --seed=2 --controller_out_std=1.0
  fca_init_model dense --family=dense --seed=1
  fca_init_model fg-wide --seed=3 --controller_out_std=1.0 --d_model=384 --d_ff=1536 \
    --n_heads=4
  # A folder the server refuses: listed apart as unavailable, with why.
  mkdir -p "$WORK/models/fg-broken"
  echo '{"model_type": "transformer-xl"}' >"$WORK/models/fg-broken/config.json"
  fca_words $((16 * 40)) 1 >"$WORK/data/eval.txt"
  fca_words $((16 * 30)) 2 >"$WORK/data/calib.txt"
  fca_words $((64 * 3000)) 3 >"$WORK/data/long.txt"
  fca_cli datasets upload --name=eval "$WORK/data/eval.txt" >/dev/null
  fca_cli datasets upload --name=calib "$WORK/data/calib.txt" >/dev/null
  fca_cli datasets upload --name=long "$WORK/data/long.txt" >/dev/null
  fca_cli audit --models=fg-a,fg-b --dense_twin=dense --eval=eval --calib=calib --window=16 \
    --batch=4 --bootstrap=200 --timing_repeats=2 --seed=5 --label=small --per_layer=static_layer \
    >"$WORK/job1.out" 2>&1
  grep -q SUCCEEDED "$WORK/job1.out" || { cat "$WORK/job1.out" >&2; return 1; }
  fca_cli audit --models=fg-a --eval=eval --calib=calib --window=16 --batch=4 --bootstrap=50 \
    --seed=6 --label=again >"$WORK/job2.out" 2>&1
  grep -q SUCCEEDED "$WORK/job2.out" || { cat "$WORK/job2.out" >&2; return 1; }
  # fg-wide is no matched twin of dense (docs/fca.md "A matched twin"): the
  # spec says why it is audited against it anyway.
  fca_cli audit --detach --models=fg-wide --dense_twin=dense --eval=long --calib=calib \
    --window=64 --batch=2 --bootstrap=200 --timing_repeats=1 --label=slow \
    --dense_twin_mismatch="a slow job: a wide model against the small twin" >/dev/null
  for _ in $(seq 300); do
    fca_cli jobs show 3 | grep -q 'state: *RUNNING' && return 0
    sleep 0.1
  done
  echo "job 3 did not start running" >&2
  fca_cli jobs show 3 >&2
  return 1
}
