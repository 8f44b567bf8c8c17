#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The HTTP front's CORS and admin routes, with curl against the real daemon and model: no CORS
# header unless --allowed-origins says so; a preflight from an allowed origin answered 204
# without the API key; every answer to an allowed origin (errors and streams too) marked for
# it, none to another; the admin routes absent (404) without --enable-admin-http, and with
# it wanting the admin key (not the API key), each running the socket's op: pause in its
# three modes against requests in flight and new ones, sleep and wake-up, the prefix cache,
# a worker method and its timeout; and the daemon refusing an admin front without a key of
# its own.
set -u
. "$(dirname "$0")/http-test-lib.sh"

# start NAME ARGS...: a daemon on a free port, its URL in $base once it answers
start() {
        local name=$1 port end
        shift
        port=$(free_port)
        "$daemon" --model "$model" --max-model-len 1024 --bus none --socket "$tmp/$name.sock" --port "$port" "$@" \
                >"$tmp/$name.log" 2>&1 &
        pids+=($!)
        base=http://127.0.0.1:$port
        end=$((SECONDS + $(scaled 60)))
        until curl -s -o /dev/null "$base/health"; do
                ((SECONDS < end)) || { echo "FAIL: $name never answered"; cat "$tmp/$name.log"; exit 1; }
                sleep 0.2
        done
}
# call METHOD PATH [CURL ARGS...]: the body in $tmp/out, the headers in $tmp/headers, the status in $status
call() {
        local method=$1 path=$2
        shift 2
        status=$(curl -s -X "$method" -D "$tmp/headers" -o "$tmp/out" -w '%{http_code}' --max-time "$(scaled 120)" \
                "$base$path" "$@")
}
# json EXPR: python's verdict on the answer (d), true or false
json() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$tmp/out" 2>/dev/null; }
# header NAME: its value in $tmp/headers, empty when absent
header() { awk -v n="$(tr 'A-Z' 'a-z' <<<"$1")" -F': ' 'tolower($1) == n { sub(/\r$/, "", $2); print $2 }' "$tmp/headers"; }

# ---- CORS off (the default) and no admin routes ----
start plain
call GET /v1/models -H 'Origin: http://ok.example'
expect "CORS off by default: no Access-Control-Allow-Origin ($status)" test "$status" = 200 -a -z "$(header Access-Control-Allow-Origin)"
call OPTIONS /v1/completions -H 'Origin: http://ok.example' -H 'Access-Control-Request-Method: POST'
expect "CORS off: a preflight is handled as any OPTIONS is (405), without CORS headers" \
        test "$status" = 405 -a -z "$(header Access-Control-Allow-Origin)"
call POST /nothing
cp "$tmp/out" "$tmp/unknown"
for route in "POST /pause" "POST /resume" "GET /is_paused" "POST /sleep" "POST /wake_up" "GET /is_sleeping" \
        "POST /reset_prefix_cache" "POST /collective_rpc" "POST /reset_mm_cache" "POST /start_profile" \
        "POST /stop_profile"; do
        call $route
        expect "without --enable-admin-http, $route is 404 as an unknown route" \
                json "d['error']['code'] == 404 and d['error']['type'] == 'NotFoundError' and d['error']['message'].startswith('no route ')"
done

# ---- CORS with a list of origins, an API key, the admin routes ----
printf 'sk-api-%s\n' "$RANDOM$RANDOM" >"$tmp/key"
printf 'sk-admin-%s\n' "$RANDOM$RANDOM" >"$tmp/admin-key"
key=$(head -n 1 "$tmp/key")
admin_key=$(head -n 1 "$tmp/admin-key")
# (a step stalls 2 s while $tmp/stall exists: collective_rpc's timeout runs out)
ASYNCLLMD_FAULT_STALL_MS=2000 ASYNCLLMD_FAULT_STALL_FILE=$tmp/stall \
        start admin --allowed-origins 'http://ok.example, http://two.example' --api-key-file "$tmp/key" \
        --enable-admin-http --admin-api-key-file "$tmp/admin-key"
api=(-H "Authorization: Bearer $key")
adm=(-H "Authorization: Bearer $admin_key")
ok_origin=(-H 'Origin: http://ok.example')

call OPTIONS /v1/completions "${ok_origin[@]}" -H 'Access-Control-Request-Method: POST' \
        -H 'Access-Control-Request-Headers: authorization, content-type'
expect "a preflight from an allowed origin, no key: 204 with its headers" bash -c "
        [[ $status == 204 && '$(header Access-Control-Allow-Origin)' == http://ok.example ]] &&
        [[ '$(header Access-Control-Allow-Methods)' == 'GET, POST' && '$(header Access-Control-Allow-Headers)' == 'authorization, content-type' ]] &&
        [[ '$(header Access-Control-Max-Age)' == 600 && '$(header Vary)' == Origin ]]"
call GET /v1/models -H 'Origin: http://two.example' "${api[@]}"
expect "an allowed origin's request gets Access-Control-Allow-Origin and Vary" \
        test "$status $(header Access-Control-Allow-Origin) $(header Vary)" = "200 http://two.example Origin"
call POST /v1/completions "${ok_origin[@]}" -d '{"prompt": "Hi", "max_tokens": 2}'
expect "an error (401, no key) to an allowed origin says so too" \
        test "$status $(header Access-Control-Allow-Origin)" = "401 http://ok.example"
call POST /v1/completions "${ok_origin[@]}" "${api[@]}" -d '{"prompt": "Hi", "max_tokens": 4, "stream": true}'
expect "a stream to an allowed origin says so" bash -c \
        "[[ $status == 200 && '$(header Access-Control-Allow-Origin)' == http://ok.example ]] && grep -q 'data: \[DONE\]' '$tmp/out'"
call GET /v1/models -H 'Origin: http://evil.example' "${api[@]}"
expect "another origin: answered as ever, without CORS headers" \
        test "$status" = 200 -a -z "$(header Access-Control-Allow-Origin)$(header Vary)"
call OPTIONS /v1/completions -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST'
expect "another origin's preflight: no 204, no CORS headers ($status)" test "$status" != 204 -a -z "$(header Access-Control-Allow-Origin)"

call GET /is_paused
expect "an admin route without a key: 401" test "$status" = 401
call GET /is_paused "${api[@]}"
expect "an admin route with the API key: 401" json "d['error']['code'] == 401 and 'admin key' in d['error']['message']"
call POST /v1/completions "${adm[@]}" -d '{"prompt": "Hi", "max_tokens": 2}'
expect "the admin key is not the API key: 401 on /v1/completions" test "$status" = 401
call GET /is_paused "${adm[@]}" "${ok_origin[@]}"
expect "GET /is_paused: false (and CORS for an allowed origin)" \
        bash -c "[[ $status == 200 && '$(header Access-Control-Allow-Origin)' == http://ok.example ]] && python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != {\"is_paused\": False})' '$tmp/out'"
call POST /pause "${adm[@]}" -X GET
expect "a wrong method on an admin route: 405" test "$status" = 405

# stream NAME MAX_TOKENS: a streamed request in the background, under way once it returns
stream() {
        curl -sN --max-time "$(scaled 120)" "$base/v1/completions" "${api[@]}" \
                -d "{\"prompt\": \"Tell a long story.\", \"max_tokens\": $2, \"ignore_eos\": true, \"stream\": true}" >"$tmp/$1" &
        stream_pid=$!
        local end=$((SECONDS + $(scaled 30)))
        until grep -q '"text"' "$tmp/$1" 2>/dev/null || ((SECONDS > end)); do sleep 0.05; done
}
finish_reason() { grep -o '"finish_reason":"[a-z]*"' "$tmp/$1" | tail -n 1 | cut -d'"' -f4; }

# pause(wait): the request in flight runs to its length (a pause that did not wait would
# have aborted or frozen it), then the pause is answered
stream wait-stream 200
call POST '/pause?wait_for_inflight_requests=true' "${adm[@]}"
wait "$stream_pid"
expect "POST /pause?wait_for_inflight_requests=true: paused once the request in flight ended whole ($(finish_reason wait-stream))" \
        bash -c "[[ $status == 200 && $(finish_reason wait-stream) == length ]] && grep -q '\"status\":\"paused\"' '$tmp/out'"
call GET /is_paused "${adm[@]}"
expect "GET /is_paused: true" json "d == {'is_paused': True}"

# while paused, a new request waits; resume lets it run
curl -s -o "$tmp/waiting" -w '%{http_code}' --max-time "$(scaled 120)" "$base/v1/completions" "${api[@]}" \
        -d '{"prompt": "Hi", "max_tokens": 5, "ignore_eos": true}' >"$tmp/waiting.status" &
waiting_pid=$!
sleep 1.5
kill -0 "$waiting_pid" 2>/dev/null
still_waiting=$?
call POST /resume "${adm[@]}"
wait "$waiting_pid"
expect "a request sent while paused waits, and runs once POST /resume answers ($(cat "$tmp/waiting.status"))" bash -c "
        [[ $still_waiting == 0 && $status == 200 && \$(cat '$tmp/waiting.status') == 200 ]] && grep -q '\"status\":\"resumed\"' '$tmp/out' &&
        grep -q '\"completion_tokens\":5' '$tmp/waiting'"

# pause (abort, the default): the request in flight ends at once, aborted
stream abort-stream 900
call POST /pause "${adm[@]}"
wait "$stream_pid"
expect "POST /pause aborts the request in flight ($(finish_reason abort-stream))" \
        test "$status $(finish_reason abort-stream)" = "200 abort"
call POST /resume "${adm[@]}"

# pause(keep): the request in flight is frozen, and goes on after resume
stream keep-stream 60
call POST '/pause?mode=keep' "${adm[@]}"
sleep 0.3 # what the engine made before the pause reaches the file
before=$(wc -c <"$tmp/keep-stream")
sleep 1
after=$(wc -c <"$tmp/keep-stream")
call POST /resume "${adm[@]}"
wait "$stream_pid"
expect "POST /pause?mode=keep freezes the request in flight ($before -> $after bytes), which ends whole after resume" \
        test "$before $(finish_reason keep-stream)" = "$after length"

# sleep and wake up
call POST '/sleep?level=3' "${adm[@]}"
expect "POST /sleep?level=3: 400 naming level" json "d['error']['code'] == 400 and d['error']['param'] == 'level'"
call POST '/sleep?level=1' "${adm[@]}"
expect "POST /sleep?level=1: 200" test "$status" = 200
call GET /is_sleeping "${adm[@]}"
expect "GET /is_sleeping: true" json "d == {'is_sleeping': True}"
call POST '/wake_up?tags=kv_cache' "${adm[@]}"
expect "POST /wake_up?tags=kv_cache: 200" test "$status" = 200
call POST '/wake_up?tags=weights&tags=kv_cache' "${adm[@]}"
expect "POST /wake_up with both tags: 200" test "$status" = 200
call GET /is_sleeping "${adm[@]}"
expect "GET /is_sleeping: false" json "d == {'is_sleeping': False}"
call POST /v1/completions "${api[@]}" -d '{"prompt": "The capital of France is", "max_tokens": 6, "ignore_eos": true}'
expect "after wake-up a request runs" json "d['usage']['completion_tokens'] == 6"

# the prefix cache and the workers' methods
call POST /reset_prefix_cache "${adm[@]}"
expect "POST /reset_prefix_cache: success" json "d == {'success': True}"
stream reset-stream 300
call POST /reset_prefix_cache "${adm[@]}"
expect "POST /reset_prefix_cache while a request runs: no success, not an error ($status)" \
        json "d['success'] is False and 'preempt' in d['message']"
call POST '/reset_prefix_cache?reset_running_requests=true' "${adm[@]}"
wait "$stream_pid"
expect "POST /reset_prefix_cache?reset_running_requests=true: success, the request recomputed to its end ($(finish_reason reset-stream))" \
        bash -c "[[ $status == 200 && $(finish_reason reset-stream) == length ]] && grep -q '\"success\":true' '$tmp/out'"
call POST /collective_rpc "${adm[@]}" -d '{"method": "ping", "args": [], "kwargs": {}}'
expect "POST /collective_rpc ping: pong from each worker" json "d['results'] and all(r == 'pong' for r in d['results'])"
call POST /collective_rpc "${adm[@]}" -d '{"method": "kv_cache_info", "timeout": 30}'
expect "POST /collective_rpc kv_cache_info" json "d['results'][0]['num_blocks'] > 0"
call POST /collective_rpc "${adm[@]}" -d '{"method": "reset_prefix_cache", "kwargs": {"preempt": true}}'
expect "POST /collective_rpc with kwargs: its argument" json "d['results'][0] is True"
call POST /start_profile "${adm[@]}"
expect "POST /start_profile without profile-dir: 409 naming it ($status)" json "d['error']['code'] == 409 and 'profile-dir' in d['error']['message']"
call POST /reset_mm_cache "${adm[@]}"
expect "POST /reset_mm_cache: 200, nothing to reset ($status)" json "d['reset'] is False and 'multimodal' in d['message']"
call POST /collective_rpc "${adm[@]}" -d '{"method": "no_such_method"}'
expect "POST /collective_rpc of an unknown method: 400 naming method" json "d['error']['code'] == 400 and d['error']['param'] == 'method'"
call POST /collective_rpc "${adm[@]}" -d '{"args": []}'
expect "POST /collective_rpc without method: 400" json "d['error']['code'] == 400 and d['error']['param'] == 'method'"
touch "$tmp/stall"
stream stall-stream 4 # its first token came: the engine is in its next step, 2 s long
call POST /collective_rpc "${adm[@]}" -d '{"method": "ping", "timeout": 0.5}'
rm -f "$tmp/stall"
expect "POST /collective_rpc past its timeout: 504 ($status)" json "d['error']['code'] == 504 and d['error']['type'] == 'timeout'"
wait "$stream_pid"
call GET /health
expect "the daemon is healthy afterwards" test "$status" = 200

# ---- "*": any origin; with credentials, the origin itself ----
start any --allowed-origins '*'
call GET /v1/models -H 'Origin: http://anything.example'
expect "--allowed-origins '*': Access-Control-Allow-Origin: *" test "$(header Access-Control-Allow-Origin)" = '*'
start credentials --allowed-origins '["*"]' --allow-credentials --allowed-methods POST --allowed-headers 'Content-Type, Authorization'
call OPTIONS /v1/chat/completions -H 'Origin: http://anything.example' -H 'Access-Control-Request-Method: POST'
expect "'*' with --allow-credentials: the origin itself, credentials, the lists as set" bash -c "
        [[ $status == 204 && '$(header Access-Control-Allow-Origin)' == http://anything.example ]] &&
        [[ '$(header Access-Control-Allow-Credentials)' == true && '$(header Access-Control-Allow-Methods)' == POST ]] &&
        [[ '$(header Access-Control-Allow-Headers)' == 'Content-Type, Authorization' ]]"

# ---- refusals ----
port=$(free_port)
"$daemon" --model "$model" --bus none --socket "$tmp/r.sock" --port "$port" --enable-admin-http >"$tmp/out" 2>&1
expect "--enable-admin-http without an admin key is refused (exit $?): $(tail -n 1 "$tmp/out")" grep -q "needs an admin key" "$tmp/out"
"$daemon" --model "$model" --bus none --socket "$tmp/r.sock" --port "$port" --api-key-file "$tmp/key" \
        --enable-admin-http --admin-api-key "$key" >"$tmp/out" 2>&1
expect "an admin key equal to the API key is refused (exit $?): $(tail -n 1 "$tmp/out")" grep -q "the admin key is the API key" "$tmp/out"
"$daemon" --model "$model" --bus none --socket "$tmp/r.sock" --port "$port" --enable-admin-http \
        --admin-api-key x --admin-api-key-file "$tmp/admin-key" >"$tmp/out" 2>&1
expect "--admin-api-key and --admin-api-key-file together are refused" grep -q "not both" "$tmp/out"

echo "$passed passed, $failed failed"
((failed == 0))
