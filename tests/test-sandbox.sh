#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What the daemon does fits the sandbox of units/asyncllmd.service.in, so that hardening cannot
# silently break it (a call outside SystemCallFilter= fails with EPERM, a hidden /proc file is
# missing). The real daemon runs under strace as the unit starts it: both sockets passed by
# name (systemd-socket-activate standing in for asyncllmd.socket and asyncllmd-http.socket), a
# D-Bus bus and a notify socket with the watchdog on; it serves every kind of work over the
# socket, HTTP and D-Bus, sleeps, wakes, pauses, reloads on SIGHUP and stops on SIGTERM. Then,
# from the trace:
#  - every system call is inside the unit's SystemCallFilter= lines, as systemd-analyze
#    expands their groups;
#  - socket() is only ever AF_UNIX (RestrictAddressFamilies=AF_UNIX: the TCP socket is passed);
#  - /proc: only the process's own files (ProcSubset=pid, ProtectProc=invisible);
#  - /dev: only what PrivateDevices= leaves; no file opened for writing (ProtectSystem=strict);
#  - no memory both writable and executable (MemoryDenyWriteExecute=);
#  - a daemon told to open a TCP socket itself says to use asyncllmd-http.socket instead.
# Exit 77 without strace, systemd-socket-activate or systemd-analyze, and in a sanitizer build.
set -u
. "$(dirname "$0")/http-test-lib.sh"
ctl=${ASYNCLLMCTL:?ASYNCLLMCTL must name the asyncllmctl binary}
units=${ASYNCLLMD_UNITS:-$(cd "$(dirname "$0")/../units" && pwd)}
for tool in strace systemd-socket-activate systemd-analyze; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
# A sanitizer's runtime makes calls of its own, and LeakSanitizer refuses to run under ptrace.
if ldd "$daemon" 2>/dev/null | grep -q -e libasan -e libubsan; then
    echo "SKIP: a sanitizer build: its runtime's system calls are not the daemon's"
    exit 77
fi

# --- the unit's system call filter, its groups expanded --------------------------------------
expand() { # a filter entry: a group (recursively) or one call
    case $1 in
    @*) systemd-analyze syscall-filter "$1" | sed -e 1d -e 's/^ *//' -e '/^#/d' -e '/^$/d' |
        while read -r entry; do expand "$entry"; done ;;
    *) echo "$1" ;;
    esac
}
touch "$tmp/allowed"
while read -r line; do # allow lines add, ~ lines take away, in order, as systemd applies them
    words=${line#\~}
    for entry in $words; do expand "$entry"; done | sort -u >"$tmp/entries"
    if [[ $line == \~* ]]; then
        comm -23 "$tmp/allowed" "$tmp/entries" >"$tmp/next"
    else
        sort -u "$tmp/allowed" "$tmp/entries" >"$tmp/next"
    fi
    mv "$tmp/next" "$tmp/allowed"
done < <(sed -n 's/^SystemCallFilter=//p' "$units/asyncllmd.service.in")
[[ $(wc -l <"$tmp/allowed") -gt 100 ]] || { echo "FAIL: no SystemCallFilter= in the unit, or systemd-analyze expanded nothing"; exit 1; }

# --- a bus, and the daemon started as the unit starts it -------------------------------------
bus_env=()
if command -v dbus-daemon >/dev/null; then
    cat >"$tmp/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>unix:path=$tmp/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
</busconfig>
EOF
    dbus-daemon --nofork --config-file="$tmp/bus.conf" >"$tmp/bus.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [[ -S $tmp/bus ]] && break; sleep 0.05; done
    export DBUS_SESSION_BUS_ADDRESS=unix:path=$tmp/bus
    bus_env=(-E "DBUS_SESSION_BUS_ADDRESS=$DBUS_SESSION_BUS_ADDRESS")
else
    echo "SKIP: no dbus-daemon: the D-Bus path is not traced"
fi
# sd_notify and the watchdog, into a stand-in for systemd's notify socket
notify_env=()
if command -v socat >/dev/null; then
    socat -u "UNIX-RECV:$tmp/notify" "OPEN:$tmp/notify.log,creat,append" &
    pids+=($!)
    for _ in $(seq 100); do [[ -S $tmp/notify ]] && break; sleep 0.05; done
    notify_env=(-E "NOTIFY_SOCKET=$tmp/notify" -E "WATCHDOG_USEC=$(($(scaled 2) * 1000000))")
else
    echo "SKIP: no socat: sd_notify is not traced"
fi
sock=$tmp/asyncllmd.sock port=$(free_port)
# strace -D keeps the daemon the process systemd-socket-activate made, so LISTEN_PID matches.
systemd-socket-activate -l "$sock" -l "127.0.0.1:$port" --fdname=asyncllmd:asyncllmd-http "${bus_env[@]}" "${notify_env[@]}" \
    "$(command -v strace)" -D -f -qq -o "$tmp/trace" \
    "$(realpath "$daemon")" --model "$(realpath "$model")" --max-model-len 512 --config /dev/null \
    --socket "$sock" ${DBUS_SESSION_BUS_ADDRESS:+--bus user} >"$tmp/daemon.log" 2>&1 &
activator=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
ready=no
for _ in $(seq $((5 * $(scaled 120)))); do
    "$ctl" --socket "$sock" health >/dev/null 2>&1 && { ready=yes; break; }
    sleep 0.2
done
[[ $ready == yes ]] || { kill "$activator"; echo "FAIL: the daemon did not become ready: $(tail -n 20 "$tmp/daemon.log")"; exit 1; }

# --- the work ------------------------------------------------------------------------------------
S=(--socket "$sock")
run() { # name, asyncllmctl arguments
    local name=$1
    shift
    if timeout "$(scaled 120)" "$ctl" "$@" >"$tmp/out" 2>&1 </dev/null; then pass "$name"; else fail "$name: $(head -c 400 "$tmp/out")"; fi
}
run "generate" "${S[@]}" generate --max-tokens 8 --logprobs 2 --prompt-logprobs 1 -n 2 "The capital of France is"
run "chat" "${S[@]}" generate --chat --max-tokens 4 "Hi"
run "stats" "${S[@]}" status --json
run "metrics" "${S[@]}" metrics
"$ctl" "${S[@]}" generate --id long --ignore-eos --max-tokens 400 "Once upon a time" >/dev/null 2>&1 &
for _ in $(seq 100); do "$ctl" "${S[@]}" list 2>/dev/null | grep -q /long && break; sleep 0.1; done
run "abort" "${S[@]}" abort "$("$ctl" "${S[@]}" list | grep /long)"
for op in "sleep --level 1" "wake-up" "sleep --level 2" "wake-up" "pause --mode keep" "resume" \
          "reset-prefix-cache" "rpc ping" "rpc memory_usage" "rpc kv_cache_info"; do
    # shellcheck disable=SC2086 # the op's words
    run "$op" "${S[@]}" $op
done
run "generate after waking" "${S[@]}" generate --max-tokens 4 "Hi"
base=http://127.0.0.1:$port
expect "HTTP completion on the passed TCP socket" bash -c "curl -sf '$base/v1/completions' -H 'Content-Type: application/json' \
    -d '{\"prompt\": \"Hi\", \"max_tokens\": 4}' | grep -q text_completion"
expect "HTTP streamed chat" bash -c "curl -sfN '$base/v1/chat/completions' -H 'Content-Type: application/json' \
    -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 4, \"stream\": true}' | grep -q DONE"
expect "HTTP /metrics" bash -c "curl -sf '$base/metrics' | grep -q vllm:"
if [[ -n ${DBUS_SESSION_BUS_ADDRESS:-} ]]; then
    run "bus: generate" --bus user generate --max-tokens 4 "Hi"
    run "bus: status" --bus user status
    run "bus: pause" --bus user pause
    run "bus: resume" --bus user resume
fi
kill -HUP "$activator"
sleep "$(scaled 1)"
run "serves after SIGHUP" "${S[@]}" generate --max-tokens 4 "Hi"
kill -TERM "$activator"
wait "$activator"
rc=$?
[[ $rc -eq 0 ]] && pass "SIGTERM: exit 0" || fail "SIGTERM: exit $rc: $(tail -n 20 "$tmp/daemon.log")"
if ((${#notify_env[@]})); then
    grep -q READY=1 "$tmp/notify.log" && grep -q WATCHDOG=1 "$tmp/notify.log" && pass "sd_notify: READY=1 and watchdog pings" ||
        fail "sd_notify: $(cat "$tmp/notify.log" 2>/dev/null)"
fi
for _ in $(seq 50); do [[ -s $tmp/trace ]] && ! pgrep -f "strace -D -f -qq -o $tmp/trace" >/dev/null && break; sleep 0.1; done

# --- the trace against the sandbox ----------------------------------------------------------------
# lines: "PID name(args) = result", or the halves of a call other threads interrupted
calls() { sed -n -e 's/^[0-9]* *\([a-z0-9_]*\)(.*/\1/p' -e 's/^[0-9]* *<\.\.\. \([a-z0-9_]*\) resumed>.*/\1/p' "$tmp/trace" | sort -u; }
calls >"$tmp/used"
[[ $(wc -l <"$tmp/used") -gt 20 ]] || { echo "FAIL: no trace: $(head -c 400 "$tmp/trace")"; exit 1; }
outside=$(comm -23 "$tmp/used" "$tmp/allowed" | tr '\n' ' ')
[[ -z $outside ]] && pass "all $(wc -l <"$tmp/used") system calls are inside SystemCallFilter=" ||
    fail "system calls outside the unit's SystemCallFilter= (EPERM under systemd): $outside"
opened() { sed -n 's/^[0-9]* *open\(at\|at2\)\?(\(AT_FDCWD, \)\?"\([^"]*\)".*/\3/p' "$tmp/trace" | sort -u; }
# sd-event reads the boot id to spread its timers; hidden, it spreads them by 0 instead
proc=$(opened | grep '^/proc/' | grep -v -E '^/proc/(self|thread-self|[0-9]+)/|^/proc/sys/kernel/random/boot_id$' | tr '\n' ' ')
[[ -z $proc ]] && pass "/proc: only the process's own files" || fail "/proc files ProcSubset=pid hides: $proc"
dev=$(opened | grep '^/dev/' | grep -v -E '^/dev/(null|zero|full|random|urandom|tty|pts/.*|shm/.*)$' | tr '\n' ' ')
[[ -z $dev ]] && pass "/dev: only PrivateDevices= nodes" || fail "device nodes PrivateDevices= hides: $dev"
written=$(grep -E '^[0-9]+ +open(at)?\(.*O_(WRONLY|RDWR|CREAT)' "$tmp/trace" | grep -v '"/dev/null"' | head -n 5)
[[ -z $written ]] && pass "no file opened for writing" || fail "files opened for writing (read-only under ProtectSystem=strict): $written"
families=$(grep -E '^[0-9]+ +socket\(' "$tmp/trace" | grep -v 'socket(AF_UNIX,' | head -n 5)
[[ -z $families ]] && pass "socket() only for AF_UNIX" || fail "sockets RestrictAddressFamilies=AF_UNIX refuses: $families"
wx=$(grep -E '^[0-9]+ +(mmap|mprotect|pkey_mprotect)\(.*PROT_WRITE\|PROT_EXEC' "$tmp/trace" | head -n 5)
[[ -z $wx ]] && pass "no writable and executable memory" || fail "writable+executable memory (MemoryDenyWriteExecute=): $wx"

# Told to open its own TCP socket (port= instead of asyncllmd-http.socket), the daemon gets what
# RestrictAddressFamilies= answers, EAFNOSUPPORT (injected by strace), and says what to do.
systemd-socket-activate -l "$tmp/own.sock" --fdname=asyncllmd "${bus_env[@]}" \
    "$(command -v strace)" -D -qq -o /dev/null -e trace=socket -e inject=socket:error=EAFNOSUPPORT \
    "$(realpath "$daemon")" --model "$(realpath "$model")" --max-model-len 512 --config /dev/null \
    --socket "$tmp/own.sock" --port "$(free_port)" >"$tmp/own.log" 2>&1 &
activator=$!
for _ in $(seq 100); do [[ -S $tmp/own.sock ]] && break; sleep 0.05; done
timeout "$(scaled 60)" "$ctl" --socket "$tmp/own.sock" health >/dev/null 2>&1 # starts it
wait "$activator"
rc=$?
[[ $rc -ne 0 ]] && grep -q "allows no network socket.*enable asyncllmd-http.socket" "$tmp/own.log" &&
    pass "a TCP socket of its own is refused, naming asyncllmd-http.socket" ||
    fail "port= under the family filter: exit $rc: $(cat "$tmp/own.log")"

echo "test-sandbox: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
