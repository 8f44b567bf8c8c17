#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Who may do what, with real unprivileged uids against the real daemon: throwaway users and
# groups stand in for asyncllm and asyncllm-admin; the daemon runs as the service user on a
# socket made as units/asyncllmd.socket makes it (SocketUser=, SocketGroup=, SocketMode=,
# passed by systemd-socket-activate under the name "asyncllmd") and on a private system bus
# that loads units/org.asyncllm.Engine1.conf with the names swapped for the throwaway ones.
# Checked: the service group generates; others cannot connect; the admin ops succeed for
# the admin group only and are refused with permission_denied to the rest; list and abort
# reach a non-admin's own uid's requests and nothing of another user's.
# Needs root (it adds and removes users and groups); exit 77 otherwise or without the tools.
set -u
. "$(dirname "$0")/http-test-lib.sh"
ctl=${ASYNCLLMCTL:?ASYNCLLMCTL must name the asyncllmctl binary}
units=${ASYNCLLMD_UNITS:-$(cd "$(dirname "$0")/../units" && pwd)}
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root, to add throwaway users and groups and run clients as them"; exit 77; }
for tool in useradd userdel groupadd groupdel setpriv systemd-socket-activate; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
daemon=$(realpath "$daemon") ctl=$(realpath "$ctl") model=$(realpath "$model")

# The socket unit's own settings, so that a change there is what gets tested.
socket_setting() { sed -n "s/^$1=//p" "$units/asyncllmd.socket"; }
socket_mode=$(socket_setting SocketMode)
[[ $(socket_setting SocketUser) == asyncllm && $(socket_setting SocketGroup) == asyncllm && -n $socket_mode ]] ||
    { echo "FAIL: asyncllmd.socket should set SocketUser=asyncllm, SocketGroup=asyncllm and SocketMode="; exit 1; }

chmod 755 "$tmp" # the clients' uids must reach the socket and the bus inside
prefix=allt$$ # user and group names: short, unique to this run
svc=${prefix}svc admin_group=${prefix}admins
users=() groups=()
remove_accounts() {
    for u in "${users[@]}"; do userdel "$u" 2>/dev/null; done
    for g in "${groups[@]}"; do groupdel "$g" 2>/dev/null; done
}
trap 'cleanup; remove_accounts' EXIT

add_user() { # name, supplementary groups (comma-separated, may be empty)
    useradd --system --no-create-home --user-group --shell /usr/sbin/nologin ${2:+--groups "$2"} "$1" ||
        { echo "FAIL: useradd $1"; exit 1; }
    users+=("$1")
    groups+=("$1")
}
# the first account change tells whether this system lets us make any (a read-only /etc)
if ! groupadd --system "$admin_group" 2>"$tmp/groupadd.err"; then
    echo "SKIP: cannot add groups here: $(cat "$tmp/groupadd.err")"
    exit 77
fi
groups+=("$admin_group")
add_user "$svc" ""                             # asyncllm: the daemon's user and group
add_user "${prefix}a" "$svc"                   # service users
add_user "${prefix}b" "$svc"
add_user "${prefix}op" "$svc,$admin_group"     # an operator in both groups
add_user "${prefix}ao" "$admin_group"         # the admin group alone: no socket access
add_user "${prefix}out" ""                     # in neither group
alice=${prefix}a bob=${prefix}b operator=${prefix}op admin_only=${prefix}ao outsider=${prefix}out

# as USER COMMAND...: runs COMMAND with USER's uid, gid and supplementary groups only.
as() {
    local user=$1
    shift
    setpriv --reuid="$user" --regid="$user" --init-groups --inh-caps=-all -- "$@"
}

# check NAME USER EXIT STDERR-TEXT asyncllmctl-ARGS...: output in $tmp/out, $tmp/err.
check() {
    local name=$1 user=$2 want_rc=$3 want_err=$4
    shift 4
    as "$user" timeout "$(scaled 60)" "$ctl" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    local rc=$?
    if [[ $rc -eq $want_rc ]] && { [[ -z $want_err ]] || grep -qF -- "$want_err" "$tmp/err"; }; then
        pass "$name"
    else
        fail "$name: exit $rc (wanted $want_rc), stderr: $(head -c 600 "$tmp/err"), stdout: $(head -c 300 "$tmp/out")"
    fi
}

# --- a private system bus with the policy
bus_address=
if command -v dbus-daemon >/dev/null; then
    sed -e "s/user=\"asyncllm\"/user=\"$svc\"/" -e "s/group=\"asyncllm\"/group=\"$svc\"/" \
        -e "s/group=\"asyncllm-admin\"/group=\"$admin_group\"/" "$units/org.asyncllm.Engine1.conf" >"$tmp/policy.conf"
    if grep -q '"asyncllm' "$tmp/policy.conf"; then
        fail "the policy names asyncllm where this test does not replace it"
    fi
    . "$(dirname "$0")/system-bus-lib.sh"
    system_bus_config "$tmp/bus" "$tmp/policy.conf" "" >"$tmp/bus.conf"
    dbus-daemon --nofork --config-file="$tmp/bus.conf" >"$tmp/bus.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [[ -S $tmp/bus ]] && break; sleep 0.05; done
    if [[ -S $tmp/bus ]]; then bus_address=unix:path=$tmp/bus; else fail "dbus-daemon did not start: $(cat "$tmp/bus.log")"; fi
else
    echo "SKIP: no dbus-daemon: the D-Bus policy is not checked with real uids"
fi
export DBUS_SYSTEM_BUS_ADDRESS=${bus_address:-unix:path=$tmp/nobus}

# --- the daemon, as the service user, on the socket the unit describes -------------------------
mkdir -m 755 "$tmp/run"
sock=$tmp/run/asyncllmd.sock
pass_env=(-E "DBUS_SYSTEM_BUS_ADDRESS=$DBUS_SYSTEM_BUS_ADDRESS")
for var in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do [[ -n ${!var:-} ]] && pass_env+=(-E "$var=${!var}"); done
# systemd-socket-activate runs the daemon at the first connection, with only LISTEN_* and -E.
systemd-socket-activate -l "$sock" --fdname=asyncllmd "${pass_env[@]}" \
    "$(command -v setpriv)" --reuid="$svc" --regid="$svc" --init-groups --inh-caps=-all -- \
    "$daemon" --model "$model" --max-model-len 1024 --socket "$sock" ${bus_address:+--bus system} \
    --service-group "$svc" --admin-group "$admin_group" --config /dev/null >"$tmp/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
chown "$svc:$svc" "$sock" && chmod "$socket_mode" "$sock" || { echo "FAIL: no socket at $sock: $(cat "$tmp/daemon.log")"; exit 1; }

ready=no
for _ in $(seq $((50 * $(scaled 60)))); do
    "$ctl" --socket "$sock" health >/dev/null 2>&1 && { ready=yes; break; }
    sleep 0.2
done
[[ $ready == yes ]] || { echo "FAIL: the daemon did not become ready: $(tail -n 20 "$tmp/daemon.log")"; exit 1; }
if [[ -n $bus_address ]]; then
    for _ in $(seq 100); do "$ctl" --bus system health >/dev/null 2>&1 && break; sleep 0.1; done
fi
daemon_user=$(ps -o user= -p "$(pgrep -n -f -- "--socket $sock")" 2>/dev/null)
[[ $daemon_user == "$svc" ]] && pass "the daemon runs as the service user" || fail "the daemon runs as '$daemon_user', not $svc"

echo "== the socket"
S=(--socket "$sock")
check "outsider cannot connect" "$outsider" 3 "permission denied" "${S[@]}" health
check "admin group alone cannot connect" "$admin_only" 3 "permission denied" "${S[@]}" health
# The daemon checks again behind the socket's mode: with the socket opened to everyone, an
# outsider connects and is refused every op but hello.
chmod 0666 "$sock"
check "outsider on an open socket: generate refused" "$outsider" 1 "only root and members of the service group may use this daemon" \
    "${S[@]}" generate --max-tokens 4 "Hi"
check "outsider on an open socket: list refused" "$outsider" 1 "only root and members of the service group" "${S[@]}" list
chmod "$socket_mode" "$sock"
check "service user generates" "$alice" 0 "" "${S[@]}" generate --temperature 0 --max-tokens 4 "The capital of France is"
[[ -s $tmp/out ]] && pass "the generated text came back" || fail "no generated text"
check "service user reads stats" "$alice" 0 "" "${S[@]}" status --json
denied="only root and members of the admin group may control the engine"
admin_ops=("pause" "resume" "sleep --level 1" "wake-up" "reset-prefix-cache" "rpc ping")
for op in "${admin_ops[@]}"; do
    # shellcheck disable=SC2086 # the op's words
    check "service user refused $op" "$alice" 1 "$denied" "${S[@]}" $op
done
# the code on the wire, for clients other than asyncllmctl
if command -v socat >/dev/null; then
    printf '{"op": "pause", "id": "p"}\n' | as "$alice" socat -t "$(scaled 5)" - "UNIX-CONNECT:$sock" >"$tmp/raw" 2>&1
    grep -qF '{"id":"p","error":{"code":"permission_denied"' "$tmp/raw" && pass "the error code is permission_denied" ||
        fail "pause by a service user: $(cat "$tmp/raw")"
else
    echo "SKIP: no socat: the error code on the wire is not checked"
fi
for op in "${admin_ops[@]}"; do
    # shellcheck disable=SC2086
    check "operator $op" "$operator" 0 "" "${S[@]}" $op
done

echo "== list and abort between users"
bg_generate() { # user, id, then the output file
    as "$1" "$ctl" "${S[@]}" generate --id "$2" --ignore-eos --max-tokens 900 "Once upon a time" >"$3" 2>&1 &
    pids+=($!)
}
bg_generate "$alice" alicereq "$tmp/alice.out"
bg_generate "$bob" bobreq "$tmp/bob.out"
seen=no
for _ in $(seq $((10 * $(scaled 30)))); do
    "$ctl" "${S[@]}" list >"$tmp/all" 2>/dev/null
    grep -q '/alicereq$' "$tmp/all" && grep -q '/bobreq$' "$tmp/all" && { seen=yes; break; }
    sleep 0.1
done
if [[ $seen == yes ]]; then
    # held in flight while the users look
    check "operator pauses, keeping the requests" "$operator" 0 "" "${S[@]}" pause --mode keep
    alice_id=$(grep '/alicereq$' "$tmp/all") bob_id=$(grep '/bobreq$' "$tmp/all")
    check "service user lists" "$alice" 0 "" "${S[@]}" list
    [[ $(cat "$tmp/out") == "$alice_id" ]] && pass "a service user's list holds only their own request" ||
        fail "alice's list shows '$(tr '\n' ' ' <"$tmp/out")', wanted only $alice_id"
    check "the other service user lists" "$bob" 0 "" "${S[@]}" list
    [[ $(cat "$tmp/out") == "$bob_id" ]] && pass "and the other's only theirs" ||
        fail "bob's list shows '$(tr '\n' ' ' <"$tmp/out")', wanted only $bob_id"
    check "operator lists" "$operator" 0 "" "${S[@]}" list
    grep -qxF "$alice_id" "$tmp/out" && grep -qxF "$bob_id" "$tmp/out" && pass "the operator sees both" ||
        fail "the operator's list: $(tr '\n' ' ' <"$tmp/out")"
    check "another user's request cannot be aborted" "$alice" 1 "no request $bob_id is in flight" "${S[@]}" abort "$bob_id"
    check "a service user aborts their own request of another connection" "$alice" 0 "" "${S[@]}" abort "$alice_id"
    if [[ -n $bus_address ]]; then
        check "bus: service user lists" "$bob" 0 "" --bus system list
        [[ $(cat "$tmp/out") == "$bob_id" ]] && pass "bus: a service user's list holds only their own request" ||
            fail "bus: bob's list shows '$(tr '\n' ' ' <"$tmp/out")', wanted only $bob_id"
        check "bus: another user's request cannot be aborted" "$alice" 1 "no request $bob_id is in flight" --bus system abort "$bob_id"
    fi
    check "operator aborts another user's request" "$operator" 0 "" "${S[@]}" abort "$bob_id"
    check "operator resumes" "$operator" 0 "" "${S[@]}" resume
    for _ in $(seq $((10 * $(scaled 30)))); do [[ -z $("$ctl" "${S[@]}" list 2>/dev/null) ]] && break; sleep 0.1; done
    [[ -z $("$ctl" "${S[@]}" list 2>/dev/null) ]] && pass "nothing left in flight" || fail "requests left in flight"
else
    fail "the two requests never showed in the operator's list: $(cat "$tmp/all" "$tmp/alice.out" "$tmp/bob.out")"
fi

if [[ -n $bus_address ]]; then
    echo "== D-Bus"
    B=(--bus system)
    check "bus: outsider refused by the policy" "$outsider" 1 "Rejected send message" "${B[@]}" health
    check "bus: service user generates" "$alice" 0 "" "${B[@]}" generate --temperature 0 --max-tokens 4 "The capital of France is"
    for op in "${admin_ops[@]}"; do
        # shellcheck disable=SC2086
        check "bus: service user refused $op" "$alice" 1 "$denied" "${B[@]}" $op
    done
    # the bus lets the admin group in without the service group; the daemon lets it control
    for op in "${admin_ops[@]}"; do
        # shellcheck disable=SC2086
        check "bus: admin group $op" "$admin_only" 0 "" "${B[@]}" $op
    done
fi

echo "test-access: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
