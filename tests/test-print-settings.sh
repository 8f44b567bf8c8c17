#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# asyncllmd --print-settings: the settings in effect in asyncllmd.conf's syntax, grouped by
# where each came from; what it prints, read back as the configuration file, prints the
# same settings; unset strings are commented out; a bad file or a value given to the flag
# is refused as any other.
set -u
daemon=${ASYNCLLMD:?ASYNCLLMD must name the asyncllmd binary}
. "${ASYNCLLM_SRCDIR:?ASYNCLLM_SRCDIR must name the source tree}/tests/shell-test-lib.sh"

printf 'max-num-seqs = 7\nkv-cache-space = 12MiB\nallowed-origins = ["http://a.example"]\n' >"$tmp/a.conf"
"$daemon" --config "$tmp/a.conf" --threads 3 --model /nonexistent/m.gguf --print-settings >"$tmp/first" 2>"$tmp/err"
rc=$?
expect "it prints and exits 0 (without loading the model)" test $rc -eq 0 -a -s "$tmp/first"
expect "a flag is listed as from the command line" \
    awk '/^# from the command line/ { g = 1; next } /^# / && !/ = / { g = 0 } g && $0 == "threads = 3" { f = 1 } END { exit !f }' "$tmp/first"
expect "a key of the file is listed as from the file" \
    awk -v h="# from the configuration file $tmp/a.conf" '$0 == h { g = 1; next } /^# / && !/ = / { g = 0 } g && $0 == "max-num-seqs = 7" { f = 1 } END { exit !f }' "$tmp/first"
expect "an unset string is commented out" grep -qx '# api-key = (none)' "$tmp/first"

# Read back: the same settings, every one now from the file but the flags'.
cp "$tmp/first" "$tmp/b.conf"
"$daemon" --config "$tmp/b.conf" --print-settings >"$tmp/second" 2>"$tmp/err"
rc=$?
expect "what it printed loads as the configuration file ($(head -c 200 "$tmp/err"))" test $rc -eq 0
settings() { grep -vE '^# (from|defaults|config = )' "$1" | sort; }
expect "and gives the same settings" cmp -s <(settings "$tmp/first") <(settings "$tmp/second")

"$daemon" --print-settings=yes >/dev/null 2>"$tmp/err"
rc=$?
expect "a value given to the flag is a usage error ($(cat "$tmp/err"))" test $rc -eq 2
printf 'max-num-seqs = many\n' >"$tmp/bad.conf"
"$daemon" --config "$tmp/bad.conf" --print-settings >"$tmp/out" 2>"$tmp/err"
rc=$?
expect "a bad file is refused, naming its line, with nothing printed ($(cat "$tmp/err"))" \
    test $rc -ne 0 -a ! -s "$tmp/out" -a -n "$(grep -F "bad.conf:1:" "$tmp/err")"

"$daemon" --config "$tmp" --print-settings >"$tmp/out" 2>"$tmp/err"
rc=$?
expect "a directory given as the file is refused by name, with nothing printed ($(cat "$tmp/err"))" \
    test $rc -ne 0 -a ! -s "$tmp/out" -a -n "$(grep -F "$tmp: cannot read the configuration file: Is a directory" "$tmp/err")"

echo "$passed passed, $failed failed"
((failed == 0))
