# SPDX-License-Identifier: MIT
# Sourced by the shell tests that reach the daemon on D-Bus: start_private_bus DIR starts a
# private session bus in DIR (created here) on which everyone may own and call everything,
# its pid added to the test's pids (which the test's cleanup kills), and sets bus_address to
# its address. Without dbus-daemon it leaves bus_address empty and returns 1.
start_private_bus() {
    local dir=$1
    bus_address=""
    command -v dbus-daemon >/dev/null || return 1
    mkdir "$dir" || return 1
    cat >"$dir/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>unix:path=$dir/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/>
<allow receive_sender="*"/></policy></busconfig>
EOF
    dbus-daemon --nofork --config-file "$dir/bus.conf" >"$dir/log" 2>&1 &
    pids+=("$!")
    for _ in $(seq 100); do [[ -S $dir/bus ]] && break; sleep 0.05; done
    bus_address="unix:path=$dir/bus"
}
