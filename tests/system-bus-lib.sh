# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Sourced by the tests that load units/org.asyncllm.Engine1.conf into a private dbus-daemon.

# Prints a bus configuration with the system bus's default policy (deny owning and calling,
# allow talking to the bus itself) and the policy file included, as /usr/share/dbus-1/system.d
# is on a real system bus.
system_bus_config() { # socket path, policy file, further elements (may be empty)
    cat <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$1</listen>
  <auth>EXTERNAL</auth>
  $3
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
  </policy>
  <include>$2</include>
</busconfig>
EOF
}
