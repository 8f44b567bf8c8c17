#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Keeps the manual pages, the default configuration file and the code from drifting apart:
#   (a) asyncllmd --help against man/asyncllmd.8
#   (b) asyncllmctl --help and asyncllmctl COMMAND --help against man/asyncllmctl.1
#   (c) the keys of daemon/settings.c's table against man/asyncllmd.conf.5
#   (d) the ops of daemon/protocol-request.c against man/asyncllmd-protocol.7
#   (e) the D-Bus vtable and error names of daemon/bus.c against man/org.asyncllm.Engine1.5
#   (f) the public symbols of libasyncllm-client against man/libasyncllm-client.3
#   (g) groff (or man) warnings for every page under man/
#   (h) units/asyncllmd.conf against the settings, and the daemon reading it uncommented
#   (i) the values asyncllmd.conf.5 and asyncllmd.8 document (lists, ranges, booleans, values
#       refused until a backend serves them) against what asyncllmd accepts and refuses
#   (j) the values asyncllmctl.1 lists for an option against what asyncllmctl takes
#
# make check runs it with ASYNCLLMD, ASYNCLLMCTL and ASYNCLLM_SRCDIR set. By hand, from the
# source tree:
#   ASYNCLLMD=build/asyncllmd ASYNCLLMCTL=build/asyncllmctl tests/test-man-pages.sh
# ASYNCLLM_CLIENT_LIB may name the built libasyncllm-client.so; by default it is looked for in
# .libs/ beside $ASYNCLLMD. A check whose input is missing (a program not built, a page not
# written yet when its program is not built either) says so and is skipped; everything else
# that disagrees is printed and makes the test fail (exit 1).
#
# What the test assumes of the formats:
# - --help lists long options as --name, --name ARG, --name=ARG or --[no-]name (which stands
#   for --name and --no-name).
# - asyncllmctl --help lists its commands under a line "Commands:", one per line, indented,
#   the name first; the list ends at the first blank or unindented line.
# - A page documents an option, command, method, property, key or function in the header
#   line of a tagged paragraph: the line after .TP or .TQ (for functions: anywhere in the
#   page). Options are written \-\-name in roff.

set -u
export LC_ALL=C

srcdir=${ASYNCLLM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
mandir=$srcdir/man
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-man-pages.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

failed=0
fail() {
        printf '  FAIL: %s\n' "$*"
        failed=1
}
ok() {
        printf '  ok: %s\n' "$*"
}
skip() {
        printf '  SKIP: %s\n' "$*"
}
section() {
        printf '\n(%s) %s\n' "$1" "$2"
}

# ---- roff helpers ------------------------------------------------------------------------

# The page as plain text lines: the escapes the pages use turned into what they print, font
# changes dropped. Requests (.XX) stay at the start of their lines.
roff_text() {
        sed -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\f\[[A-Z]*\]//g' \
            -e 's/\\-/-/g' -e 's/\\(->/->/g' -e 's/\\(em/--/g' -e 's/\\(en/-/g' \
            -e 's/\\(aq/'"'"'/g' -e 's/\\(dq/"/g' -e 's/\\(lq/"/g' -e 's/\\(rq/"/g' \
            -e 's/\\&//g' -e 's/\\%//g' -e 's/\\ / /g' -e 's/\\e/\\/g' "$1"
}

# awk: split_args(s, args) splits a macro line's arguments as roff does (double quotes group
# words, "" inside them is a quote) into args[1..n] and returns n.
roff_split_args='
        function split_args(s, args,    n, out, i, c, inq, started) {
                n = 0; out = ""; inq = 0; started = 0
                for (i = 1; i <= length(s); i++) {
                        c = substr(s, i, 1)
                        if (inq) {
                                if (c == "\"" && substr(s, i + 1, 1) == "\"") { out = out "\""; i++ }
                                else if (c == "\"") { inq = 0 }
                                else out = out c
                        } else if (c == "\"" && out == "") { inq = 1; started = 1 }
                        else if (c == " " || c == "\t") {
                                if (out != "" || started) { args[++n] = out; out = ""; started = 0 }
                        } else out = out c
                }
                if (out != "" || started) args[++n] = out
                return n
        }'

# The header lines of the tagged paragraphs (the line after .TP or .TQ) as plain text, with
# the font macro (.B, .BI, .BR, ...) and its argument quotes removed and the arguments joined
# as roff prints them (.B and .I join with spaces, the alternating ones without). With a
# second argument, only those inside the section (.SH) of that name.
roff_tags() {
        roff_text "$1" | awk -v want="${2:-}" "$roff_split_args"'
                function unquote(s,    args, n, i, res) {
                        n = split_args(s, args)
                        res = ""
                        for (i = 1; i <= n; i++) res = res (joinsp && i > 1 ? " " : "") args[i]
                        return res
                }
                /^\.SH/ { sect = $0; sub(/^\.SH[ \t]+/, "", sect); gsub(/"/, "", sect); next }
                /^\.(TP|TQ)/ { tag = 1; next }
                tag {
                        tag = 0
                        if (want != "" && sect != want) next
                        line = $0
                        if (line ~ /^\.[A-Z]+([ \t]|$)/) {
                                macro = line; sub(/[ \t].*/, "", macro)
                                rest = line; sub(/^\.[A-Z]+[ \t]*/, "", rest)
                                joinsp = (macro == ".B" || macro == ".I" || macro == ".SM")
                                line = unquote(rest)
                        }
                        print line
                }'
}

# Every tagged paragraph as one line: SECTION<TAB>SUBSECTION<TAB>TAG<TAB>TEXT (SUBSECTION "-"
# before the section's first .SS, so that read splits the line right). The tag reads as
# roff_tags prints it; the text is the paragraph joined into one line with its bold words
# marked *so* (.B, the bold arguments of .BR, .RB, .BI and .IB, and \fB...\fR), so that a
# statement about a value ("*cuda* is refused") can be told from prose. A paragraph ends at
# the next .TP, .TQ, .SH, .SS or .PP.
roff_paragraphs() {
        sed -e 's/\\fB/*/g' -e 's/\\f[RP]/*/g' "$1" >"$tmp/paragraphs.roff"
        roff_text "$tmp/paragraphs.roff" | awk "$roff_split_args"'
                function render(line, mark,    macro, rest, args, n, i, res, bold, sep) {
                        if (line !~ /^\.[A-Z]+([ \t]|$)/) return line
                        macro = line; sub(/[ \t].*/, "", macro)
                        rest = line; sub(/^\.[A-Z]+[ \t]*/, "", rest)
                        n = split_args(rest, args)
                        sep = (macro == ".B" || macro == ".I" || macro == ".SM") ? " " : ""
                        res = ""
                        for (i = 1; i <= n; i++) {
                                bold = macro == ".B" || ((macro == ".BR" || macro == ".BI") && i % 2 == 1) ||
                                       ((macro == ".RB" || macro == ".IB") && i % 2 == 0)
                                res = res (i > 1 ? sep : "") (mark && bold && args[i] ~ /[^ ]/ ? "*" args[i] "*" : args[i])
                        }
                        return res
                }
                function flush() {
                        if (have) { gsub(/\*/, "", tag); print sect "\t" (subsect == "" ? "-" : subsect) "\t" tag "\t" text }
                        have = 0; text = ""
                }
                /^\.SH/ { flush(); sect = $0; sub(/^\.SH[ \t]+/, "", sect); gsub(/"/, "", sect); subsect = ""; next }
                /^\.SS/ { flush(); subsect = $0; sub(/^\.SS[ \t]+/, "", subsect); gsub(/"/, "", subsect); next }
                /^\.(TP|TQ)/ { flush(); tagline = 1; next }
                /^\.(PP|LP|P)([ \t]|$)/ { flush(); next }
                tagline { tagline = 0; tag = render($0, 0); have = 1; next }
                /^\./ && !/^\.(B|I|BR|RB|BI|IB|IR|RI|SM)([ \t]|$)/ { next }
                have { text = text (text == "" ? "" : " ") render($0, 1) }
                END { flush() }'
}

# Long options in text: --name, --[no-]name (both), --name=ARG (the name).
long_options() {
        grep -oE -- '--(\[no-\])?[a-z0-9]+(-[a-z0-9]+)*' | sed -e 's/^--//' |
                while read -r o; do
                        if [[ $o == "[no-]"* ]]; then
                                echo "${o#\[no-\]}"
                                echo "no-${o#\[no-\]}"
                        else
                                echo "$o"
                        fi
                done | sort -u
}

# Prints the lines of $1 (a sorted list file) that are not in $2.
missing_from() {
        comm -23 "$1" "$2"
}

# compare WHAT-A A-file WHERE-B B-file: every line of A must be in B.
expect_subset() {
        local what=$1 a=$2 where=$3 b=$4 m
        m=$(missing_from "$a" "$b")
        if [[ -n $m ]]; then
                fail "$what missing from $where:"
                sed 's/^/        /' <<<"$m"
        else
                ok "every $what ($(wc -l <"$a")) is in $where"
        fi
}

# ---- (a) asyncllmd --help against asyncllmd.8 --------------------------------------------

section a "asyncllmd --help against man/asyncllmd.8"
daemon=${ASYNCLLMD:-}
if [[ -z $daemon || ! -x $daemon ]]; then
        skip "ASYNCLLMD is not set to a built asyncllmd"
elif [[ ! -f $mandir/asyncllmd.8 ]]; then
        fail "man/asyncllmd.8 is missing"
else
        if ! "$daemon" --help >"$tmp/daemon.help" 2>&1; then
                fail "$daemon --help failed"
        fi
        long_options <"$tmp/daemon.help" >"$tmp/daemon.help.opts"
        roff_tags "$mandir/asyncllmd.8" OPTIONS | long_options >"$tmp/daemon.man.opts"
        if [[ ! -s $tmp/daemon.help.opts ]]; then
                fail "no options found in asyncllmd --help"
        fi
        expect_subset "option of asyncllmd --help" "$tmp/daemon.help.opts" "OPTIONS of asyncllmd.8" "$tmp/daemon.man.opts"
        expect_subset "option of asyncllmd.8's OPTIONS" "$tmp/daemon.man.opts" "asyncllmd --help" "$tmp/daemon.help.opts"
fi

# ---- (b) asyncllmctl --help against asyncllmctl.1 ----------------------------------------

section b "asyncllmctl --help (and COMMAND --help) against man/asyncllmctl.1"
ctl=${ASYNCLLMCTL:-}
if [[ -z $ctl || ! -x $ctl ]]; then
        skip "ASYNCLLMCTL is not set to a built asyncllmctl"
elif [[ ! -f $mandir/asyncllmctl.1 ]]; then
        fail "man/asyncllmctl.1 is missing"
else
        if ! "$ctl" --help >"$tmp/ctl.help" 2>&1; then
                fail "$ctl --help failed"
        fi
        # the commands: indented lines under "Commands:", the first word of each
        awk '/^[ \t]*[Cc]ommands:[ \t]*$/ { on = 1; next }
             on && (/^[ \t]*$/ || /^[^ \t]/) { on = 0 }
             on { print $1 }' "$tmp/ctl.help" | grep -E '^[a-z][a-z0-9_-]*$' | sort -u >"$tmp/ctl.cmds"
        if [[ ! -s $tmp/ctl.cmds ]]; then
                fail "no commands found under a \"Commands:\" heading in asyncllmctl --help"
        fi
        cp "$tmp/ctl.help" "$tmp/ctl.allhelp"
        while read -r cmd; do
                if ! "$ctl" "$cmd" --help >"$tmp/ctl.help.$cmd" 2>&1; then
                        fail "asyncllmctl $cmd --help failed"
                fi
                cat "$tmp/ctl.help.$cmd" >>"$tmp/ctl.allhelp"
        done <"$tmp/ctl.cmds"
        long_options <"$tmp/ctl.allhelp" >"$tmp/ctl.help.opts"
        roff_tags "$mandir/asyncllmctl.1" >"$tmp/ctl.man.tags"
        long_options <"$tmp/ctl.man.tags" >"$tmp/ctl.man.opts"
        # every word of a tag line, for the commands
        tr -s ' \t,|[]{}()' '\n' <"$tmp/ctl.man.tags" | sort -u >"$tmp/ctl.man.words"
        # SS headings count too, for pages that give each command a subsection
        roff_text "$mandir/asyncllmctl.1" | sed -n 's/^\.SS[ \t]*//p' | tr -d '"' |
                tr -s ' \t,|[]{}()' '\n' | sort -u >>"$tmp/ctl.man.words"
        sort -u -o "$tmp/ctl.man.words" "$tmp/ctl.man.words"
        expect_subset "command of asyncllmctl --help" "$tmp/ctl.cmds" "asyncllmctl.1's tagged paragraphs" "$tmp/ctl.man.words"
        expect_subset "option of asyncllmctl's --help outputs" "$tmp/ctl.help.opts" "asyncllmctl.1's tagged paragraphs" "$tmp/ctl.man.opts"
        expect_subset "option in asyncllmctl.1's tagged paragraphs" "$tmp/ctl.man.opts" "asyncllmctl's --help outputs" "$tmp/ctl.help.opts"
fi

# ---- (c) settings.c keys against asyncllmd.conf.5 ----------------------------------------

section c "daemon/settings.c keys against man/asyncllmd.conf.5"
# The table: one "[KEY_X] = { "key", ... }," block per key; flag_only keys are not file keys.
awk '/^static const struct setting table\[/ { on = 1; next }
     on && /^};/ { on = 0 }
     on && /^[ \t]*\[KEY_[A-Z0-9_]+\][ \t]*=[ \t]*\{/ { inkey = 1; key = ""; flagonly = 0 }
     on && inkey {
             if (key == "" && match($0, /"[a-z0-9-]+"/)) key = substr($0, RSTART + 1, RLENGTH - 2)
             if ($0 ~ /\.flag_only[ \t]*=[ \t]*true/) flagonly = 1
             if ($0 ~ /^[ \t]*},/) { inkey = 0; if (key != "") print key, flagonly }
     }' "$srcdir/daemon/settings.c" >"$tmp/settings.table"
awk '$2 == 0 { print $1 }' "$tmp/settings.table" | sort -u >"$tmp/settings.keys"
awk '{ print $1 }' "$tmp/settings.table" | sort -u >"$tmp/settings.allkeys"
n_enum=$(sed -n '/^enum setting_id {/,/^};/p' "$srcdir/daemon/settings.c" | grep -cE '^[ \t]*KEY_[A-Z0-9_]+,')
if [[ ! -s $tmp/settings.keys ]]; then
        fail "no keys found in daemon/settings.c's table (has its layout changed?)"
elif [[ $n_enum -ne $(wc -l <"$tmp/settings.table") ]]; then
        fail "daemon/settings.c: $n_enum KEY_ ids but $(wc -l <"$tmp/settings.table") table entries parsed (has its layout changed?)"
else
        ok "$(wc -l <"$tmp/settings.table") keys in daemon/settings.c's table, $(wc -l <"$tmp/settings.keys") of them file keys"
fi
if [[ ! -f $mandir/asyncllmd.conf.5 ]]; then
        fail "man/asyncllmd.conf.5 is missing"
else
        roff_tags "$mandir/asyncllmd.conf.5" OPTIONS | sed -nE 's/^([a-z][a-z0-9-]*) = .*/\1/p' |
                sort -u >"$tmp/conf5.keys"
        expect_subset "key of settings.c" "$tmp/settings.keys" "asyncllmd.conf.5's OPTIONS" "$tmp/conf5.keys"
        expect_subset "key of asyncllmd.conf.5's OPTIONS" "$tmp/conf5.keys" "settings.c's file keys" "$tmp/settings.keys"
fi

# ---- (d) protocol ops against asyncllmd-protocol.7 ---------------------------------------

section d "daemon/protocol-request.c ops against man/asyncllmd-protocol.7"
sed -nE 's/^[ \t]*\[CLIENT_OP_[A-Z0-9_]+\][ \t]*=[ \t]*"([a-z0-9_]+)".*/\1/p' \
        "$srcdir/daemon/protocol-request.c" | sort -u >"$tmp/ops"
n_ops=$(sed -n '/^enum client_op {/,/^};/p' "$srcdir/daemon/protocol.h" | grep -cE '^[ \t]*CLIENT_OP_[A-Z0-9_]+,')
if [[ ! -s $tmp/ops ]]; then
        fail "no ops found in daemon/protocol-request.c (has its op table changed?)"
elif [[ $n_ops -ne $(wc -l <"$tmp/ops") ]]; then
        fail "daemon/protocol.h has $n_ops CLIENT_OP_ values but $(wc -l <"$tmp/ops") names were found in protocol-request.c"
fi
if [[ ! -f $mandir/asyncllmd-protocol.7 ]]; then
        fail "man/asyncllmd-protocol.7 is missing"
else
        # each op has a subsection of REQUESTS (".SS generate", ".SS health, stats, model")
        roff_text "$mandir/asyncllmd-protocol.7" | sed -n 's/^\.SS[ \t]*//p' | tr -d '"' |
                tr -s ' \t,' '\n' | sort -u >"$tmp/proto.ss"
        expect_subset "op of protocol-request.c" "$tmp/ops" "asyncllmd-protocol.7's subsections (.SS)" "$tmp/proto.ss"
fi

# ---- (e) bus.c against org.asyncllm.Engine1.5 --------------------------------------------

section e "daemon/bus.c against man/org.asyncllm.Engine1.5"
buspage=$mandir/org.asyncllm.Engine1.5
# The vtable as "method NAME IN-SIGNATURE-WITH-NAMES -> OUT" / "property NAME TYPE FLAGS" lines.
perl -0777 -ne '
        s{/\*.*?\*/}{}gs; s{//[^\n]*}{}g;
        sub args {
                my ($a) = @_;
                return "" if !defined $a;
                my @p = ($a =~ /"([^"]*)"\s*,\s*(\w+)/g);
                my @out;
                while (@p) { my $t = shift @p; my $n = shift @p; push @out, "$t $n"; }
                return join(", ", @out);
        }
        while (/SD_BUS_METHOD_WITH_ARGS\s*\(\s*"(\w+)"\s*,\s*(?:SD_BUS_NO_ARGS|SD_BUS_ARGS\s*\(([^)]*)\))\s*,\s*(?:SD_BUS_NO_RESULT|SD_BUS_RESULT\s*\(([^)]*)\))/g) {
                my ($n, $in, $out) = ($1, args($2), args($3));
                print "method $n($in)", ($out ne "" ? " -> ($out)" : ""), "\n";
        }
        while (/SD_BUS_METHOD_WITH_NAMES\s*\(\s*"(\w+)"\s*,\s*SD_BUS_PARAM\w*\s*\(([^)]*)\)/g) { print "method $1 ?\n"; }
        while (/SD_BUS_METHOD\s*\(\s*"(\w+)"/g) { print "method $1 ?\n"; }
        while (/SD_BUS_(?:WRITABLE_)?PROPERTY\s*\(\s*"(\w+)"\s*,\s*"([^"]+)"\s*,[^,]*,[^,]*,\s*([^)]*)\)/g) {
                my ($n, $t, $f) = ($1, $2, $3);
                my $kind = $f =~ /PROPERTY_CONST/ ? "const" : $f =~ /EMITS_(?:CHANGE|INVALIDATION)/ ? "emits" : "none";
                print "property $n $t $kind\n";
        }
        while (/SD_BUS_SIGNAL\w*\s*\(\s*"(\w+)"/g) { print "signal $1\n"; }
        # error names: literal ones, and NAME("X") for a macro that prefixes the error namespace
        my %err;
        $err{$1} = 1 while /"(org\.asyncllm\.Engine1\.Error\.\w+)"/g;
        my %macros;
        $macros{$1} = $3 while /#define\s+(\w+)\s*\(\s*(\w+)\s*\)\s*"(org\.asyncllm\.Engine1\.Error\.)"\s*\2/g;
        for my $macro (keys %macros) {
                my @names = /\b$macro\s*\(\s*"(\w+)"\s*\)/g;
                $err{"$macros{$macro}$_"} = 1 for @names;
        }
        print "error $_\n" for sort keys %err;
' "$srcdir/daemon/bus.c" >"$tmp/bus.vtable"
grep '^method ' "$tmp/bus.vtable" | sed -E 's/^method ([A-Za-z0-9_]+).*/\1/' | sort -u >"$tmp/bus.methods"
grep '^property ' "$tmp/bus.vtable" | awk '{ print $2 }' | sort -u >"$tmp/bus.props"
grep '^error ' "$tmp/bus.vtable" | awk '{ print $2 }' | sort -u >"$tmp/bus.errors"
if [[ ! -s $tmp/bus.methods || ! -s $tmp/bus.errors ]]; then
        fail "no methods or no error names found in daemon/bus.c (has the vtable's layout changed?)"
else
        ok "daemon/bus.c: $(wc -l <"$tmp/bus.methods") methods, $(wc -l <"$tmp/bus.props") properties, $(wc -l <"$tmp/bus.errors") error names"
fi
if [[ ! -f $buspage ]]; then
        fail "man/org.asyncllm.Engine1.5 is missing"
else
        roff_tags "$buspage" METHODS >"$tmp/page.method.tags"
        sed -nE 's/^([A-Za-z0-9_]+)\(.*/\1/p' "$tmp/page.method.tags" | sort -u >"$tmp/page.methods"
        expect_subset "method of bus.c's vtable" "$tmp/bus.methods" "the page's METHODS" "$tmp/page.methods"
        expect_subset "method of the page's METHODS" "$tmp/page.methods" "bus.c's vtable" "$tmp/bus.methods"
        # signatures with argument names, exactly as the vtable declares them
        sed -E 's/[ \t]+/ /g; s/ *$//' "$tmp/page.method.tags" | sort -u >"$tmp/page.signatures"
        grep '^method ' "$tmp/bus.vtable" | grep -v ' ?$' | sed 's/^method //' | sort -u >"$tmp/bus.signatures"
        expect_subset "method signature of bus.c (args and names)" "$tmp/bus.signatures" "the page's METHODS headers" "$tmp/page.signatures"

        roff_tags "$buspage" PROPERTIES >"$tmp/page.prop.tags"
        sed -nE 's/^([A-Za-z0-9_]+) \(.*/\1/p' "$tmp/page.prop.tags" | sort -u >"$tmp/page.props"
        expect_subset "property of bus.c's vtable" "$tmp/bus.props" "the page's PROPERTIES" "$tmp/page.props"
        expect_subset "property of the page's PROPERTIES" "$tmp/page.props" "bus.c's vtable" "$tmp/bus.props"
        # "Name (type" in the header; the paragraph says "constant" / "PropertiesChanged" honestly
        roff_text "$buspage" | awk '/^\.SH/ { s = $0 } s ~ /PROPERTIES/' >"$tmp/page.props.text"
        while read -r _ name type kind; do
                para=$(awk -v n="$name" '
                        /^\.(TP|TQ)/ { getline hdr; grab = (hdr ~ ("^(\\.[A-Z]+[ \t]+)?\"?" n "[^A-Za-z0-9_]")); if (grab) print hdr; next }
                        /^\.(SH|SS|PP)/ { grab = 0 }
                        grab { print }' "$tmp/page.props.text")
                [[ -z $para ]] && continue
                if ! grep -qF "($type" <<<"$(head -n1 <<<"$para")"; then
                        fail "property $name: the page does not give its type as ($type"
                fi
                case $kind in
                const)
                        grep -qi 'constant' <<<"$para" || fail "property $name is CONST in bus.c; the page does not say it is constant" ;;
                emits)
                        grep -q 'PropertiesChanged' <<<"$para" || fail "property $name emits changes in bus.c; the page does not say PropertiesChanged" ;;
                none)
                        if grep -q 'PropertiesChanged' <<<"$para" && ! grep -qiE 'no[t]? .*PropertiesChanged|without .*PropertiesChanged' <<<"$para"; then
                                fail "property $name emits no change signal in bus.c; the page claims PropertiesChanged"
                        fi ;;
                esac
        done < <(grep '^property ' "$tmp/bus.vtable")

        roff_text "$buspage" | grep -oE 'org\.asyncllm\.Engine1\.Error\.[A-Za-z0-9_]+' | sort -u >"$tmp/page.errors"
        expect_subset "error name of bus.c" "$tmp/bus.errors" "the page" "$tmp/page.errors"
        expect_subset "error name of the page" "$tmp/page.errors" "bus.c" "$tmp/bus.errors"
fi

# ---- (f) libasyncllm-client symbols against libasyncllm-client.3 -------------------------

section f "libasyncllm-client's public symbols against man/libasyncllm-client.3"
libpage=$mandir/libasyncllm-client.3
header=$srcdir/lib/asyncllm-client.h
symfile=$srcdir/lib/libasyncllm-client.sym
# the functions the header declares
perl -0777 -ne 's{/\*.*?\*/}{}gs; print "$1\n" while /\b(asyncllm_\w+)\s*\(/g' "$header" | sort -u >"$tmp/lib.header"
# names the version script lists one by one (a glob such as asyncllm_* covers the header's)
sed -e 's,/\*.*\*/,,' "$symfile" | grep -oE '^[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*;' | tr -d ' \t;' |
        grep -vE '^(global|local)$' | sort -u >"$tmp/lib.sym" || true
cat "$tmp/lib.header" "$tmp/lib.sym" | sort -u >"$tmp/lib.symbols"
lib=${ASYNCLLM_CLIENT_LIB:-}
if [[ -z $lib && -n ${ASYNCLLMD:-} ]]; then
        lib=$(dirname "$ASYNCLLMD")/.libs/libasyncllm-client.so
fi
if [[ -n $lib && -f $lib ]] && command -v nm >/dev/null; then
        nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ { sub(/@.*/, "", $3); print $3 }' |
                grep '^asyncllm_' | sort -u >"$tmp/lib.exported"
        ok "$(wc -l <"$tmp/lib.exported") symbols exported by $lib"
        expect_subset "symbol exported by the library" "$tmp/lib.exported" "lib/asyncllm-client.h" "$tmp/lib.header"
        nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ { sub(/@.*/, "", $3); print $3 }' |
                grep -vE '^(asyncllm_|_init$|_fini$|_edata$|_end$|__bss_start$|ASYNCLLM_CLIENT_)' >"$tmp/lib.stray" || true
        if [[ -s $tmp/lib.stray ]]; then
                fail "symbols exported that are not asyncllm_*: $(tr '\n' ' ' <"$tmp/lib.stray")"
        fi
        cat "$tmp/lib.exported" >>"$tmp/lib.symbols"
        sort -u -o "$tmp/lib.symbols" "$tmp/lib.symbols"
else
        skip "no built libasyncllm-client.so found (set ASYNCLLM_CLIENT_LIB): checking the header's functions only"
fi
if [[ ! -f $libpage ]]; then
        fail "man/libasyncllm-client.3 is missing"
else
        roff_text "$libpage" | grep -oE '\basyncllm_[a-z0-9_]+' | sort -u >"$tmp/libpage.names"
        expect_subset "public function" "$tmp/lib.symbols" "libasyncllm-client.3" "$tmp/libpage.names"
        # and the other way: every asyncllm_ name of the page exists (functions and types)
        perl -0777 -ne 's{/\*.*?\*/}{}gs; print "$1\n" while /\b(asyncllm_\w+)/g' "$header" | sort -u >"$tmp/lib.header.names"
        expect_subset "asyncllm_ name of libasyncllm-client.3" "$tmp/libpage.names" "lib/asyncllm-client.h" "$tmp/lib.header.names"
fi

# ---- (g) formatter warnings --------------------------------------------------------------

section g "formatter warnings for man/*"
if command -v groff >/dev/null; then
        for page in "$mandir"/*.[0-9]; do
                out=$(groff -t -man -Tutf8 -ww -z "$page" 2>&1)
                if [[ -n $out ]]; then
                        fail "groff -t -man -ww warns about ${page##*/}:"
                        sed 's/^/        /' <<<"$out"
                else
                        ok "${page##*/}: no groff warnings"
                fi
        done
elif command -v man >/dev/null; then
        for page in "$mandir"/*.[0-9]; do
                out=$(MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
                if [[ -n $out ]]; then
                        fail "man --warnings warns about ${page##*/}:"
                        sed 's/^/        /' <<<"$out"
                else
                        ok "${page##*/}: no man warnings"
                fi
        done
else
        skip "neither groff nor man is installed (apt-get install groff-base)"
fi

# ---- (h) units/asyncllmd.conf ------------------------------------------------------------

section h "units/asyncllmd.conf against the settings"
conf=$srcdir/units/asyncllmd.conf
if [[ ! -f $conf ]]; then
        fail "units/asyncllmd.conf is missing"
else
        # settings are the commented-out lines "#key = value"; explanations start with "# "
        sed -nE 's/^#([a-z][a-z0-9-]*)[ \t]*=.*/\1/p' "$conf" >"$tmp/conf.keys.all"
        sort -u "$tmp/conf.keys.all" >"$tmp/conf.keys"
        dups=$(sort "$tmp/conf.keys.all" | uniq -d)
        [[ -n $dups ]] && fail "keys listed more than once in units/asyncllmd.conf: $dups"
        expect_subset "key of units/asyncllmd.conf" "$tmp/conf.keys" "settings.c's file keys" "$tmp/settings.keys"
        expect_subset "key of settings.c" "$tmp/settings.keys" "units/asyncllmd.conf" "$tmp/conf.keys"
        # nothing is set: every non-comment line would override a default for everyone
        if grep -nvE '^[ \t]*(#|$)' "$conf" >"$tmp/conf.active"; then
                fail "units/asyncllmd.conf sets keys (it should only show them, commented out):"
                sed 's/^/        /' "$tmp/conf.active"
        fi
        # the values shown are the defaults that --help prints, where it prints one value
        if [[ -n $daemon && -x $daemon && -s $tmp/daemon.help ]]; then
                bad=0
                while read -r key value; do
                        d=$(awk -v k="$key" '
                                $1 == "--" k || $1 == "--[no-]" k { want = 1; next }
                                want { if (match($0, /\(default: .*\)$/)) print substr($0, RSTART + 10, RLENGTH - 11); exit }' \
                                "$tmp/daemon.help")
                        d=${d%%; SIGHUP*}
                        # "0 (online CPUs)" -> "0"; several words (model, socket) are not compared
                        d=$(sed -E 's/^([^ ]+) \(.*\)$/\1/' <<<"$d")
                        [[ -z $d || $d == *" "* ]] && continue
                        if [[ $d != "$value" ]]; then
                                fail "units/asyncllmd.conf: #$key = $value, but asyncllmd --help says the default is $d"
                                bad=1
                        fi
                done < <(sed -nE 's/^#([a-z][a-z0-9-]*)[ \t]*=[ \t]*(.*[^ \t])[ \t]*$/\1 \2/p' "$conf")
                [[ $bad -eq 0 ]] && ok "the values in units/asyncllmd.conf are the defaults of asyncllmd --help"

                # The daemon reads the file with every setting uncommented. asyncllmd has no
                # option that only checks its settings, and --help exits before the file is
                # read; so it is started with a model path that does not exist: the file is
                # parsed and checked completely before the model is opened, and a bad file
                # fails with "FILE:LINE: ..." instead of the model error.
                sed -E 's/^#([a-z][a-z0-9-]*[ \t]*=)/\1/' "$conf" >"$tmp/asyncllmd.conf"
                nomodel=$tmp/no-such-dir/no-such-model.gguf
                env -u NOTIFY_SOCKET -u LISTEN_FDS -u LISTEN_PID -u LISTEN_FDNAMES -u WATCHDOG_USEC \
                        timeout 60 "$daemon" --config "$tmp/asyncllmd.conf" --model "$nomodel" \
                        --socket "$tmp/s.sock" --bus none >"$tmp/daemon.out" 2>&1
                rc=$?
                if grep -qF "$tmp/asyncllmd.conf" "$tmp/daemon.out"; then
                        fail "asyncllmd refuses units/asyncllmd.conf uncommented:"
                        sed 's/^/        /' "$tmp/daemon.out"
                elif [[ $rc -eq 1 ]] && grep -qF "$nomodel" "$tmp/daemon.out"; then
                        ok "asyncllmd reads units/asyncllmd.conf with every setting uncommented (it stopped at the missing model, as meant)"
                else
                        fail "asyncllmd with units/asyncllmd.conf uncommented: expected exit 1 at the missing model, got $rc:"
                        sed 's/^/        /' "$tmp/daemon.out"
                fi
        else
                skip "ASYNCLLMD is not set: the defaults and the uncommented file are not checked against the daemon"
        fi
fi

# ---- (i) asyncllmd's documented values against what it does with them ---------------------

section i "the values asyncllmd.conf.5 and asyncllmd.8 document against what asyncllmd does"
# asyncllmd has no option that only checks its settings. It is run with a model path that does
# not exist: the settings are parsed and checked completely before the model is opened, so a
# value it accepts ends at the missing model (exit 1) and one it refuses at a message that
# starts with the flag ("--device: ..."). The base settings put max-num-seqs at 1, so that every
# documented max-num-batched-tokens meets its cross-check (at least max-num-seqs).
#
# What the pages say, in an option's tagged paragraph:
# - "key = a|b|c" (asyncllmd.conf.5) and "--key a|b|c" (asyncllmd.8): the values accepted;
#   the two pages agree, and the list the daemon gives when it refuses a bogus value ("is not
#   one of ...") is the same. A "key = level" paragraph must name every value of that list.
# - a bold value followed by "is refused" (or "and more are refused"): the daemon refuses it,
#   naming the flag. A bold value followed by "is the only value accepted": accepted.
# - "A to B", "more than A and at most B", "at least A and less than B" for a number, a size
#   or seconds: the bounds inside are accepted, the values just beyond them refused.
# - boolean flags ("--x, --no-x"): both, and --x=V for every spelling that the page's
#   "boolean" type lists, are accepted; --x=maybe is refused.
# A value the pages give for a build with --enable-cuda counts as accepted where the daemon
# refuses it for want of that build, saying so.
if [[ -z $daemon || ! -x $daemon ]]; then
        skip "ASYNCLLMD is not set to a built asyncllmd"
elif ! command -v perl >/dev/null; then
        skip "perl is not installed (it computes the values beyond each range)"
else
        nomodel=$tmp/no-such-dir/no-such-model.gguf
        printf '' >"$tmp/empty.conf"
        n_values=0
        value_failed=0
        run_daemon() {
                env -u NOTIFY_SOCKET -u LISTEN_FDS -u LISTEN_PID -u LISTEN_FDNAMES -u WATCHDOG_USEC \
                        timeout 60 "$daemon" --config "$tmp/empty.conf" --model "$nomodel" \
                        --socket "$tmp/s.sock" --bus none --max-num-seqs 1 "$@" 2>&1
        }
        # expect_daemon accepted|refused FLAG ARG WHY: FLAG is the option without "--"; ARG is
        # what is passed ("--flag=value", "--no-flag"); WHY says what the page claims.
        expect_daemon() {
                local want=$1 flag=$2 arg=$3 why=$4 out rc got
                out=$(run_daemon "$arg")
                rc=$?
                # (a low --log-level keeps the missing model's message out of the log)
                if [[ $rc -eq 1 && ($out == *"$nomodel"* || -z $out) && $out != *"$flag:"* ]]; then
                        got=accepted
                elif [[ $rc -ne 0 && $out == *"this build has no CUDA support (configure it with --enable-cuda)"* ]]; then
                        got=accepted # a value the pages give for a build with --enable-cuda, and this one has none
                elif [[ $rc -ne 0 && $out == *"--$flag:"* ]]; then
                        got=refused
                else
                        got="neither accepted nor refused (exit $rc)"
                fi
                n_values=$((n_values + 1))
                if [[ $got != "$want" ]]; then
                        fail "asyncllmd $arg: $why, but it is $got: $out"
                        value_failed=1
                fi
        }
        # beyond VALUE TYPE -1|+1: the next value below or above VALUE, for a TYPE of the page
        # (integers step by 1, sizes by a byte, numbers by 0.001)
        beyond() {
                perl -MMath::BigInt -MMath::BigFloat -e '
                        my ($v, $type, $dir) = @ARGV;
                        my %unit = ("" => 1, KiB => 1024, MiB => 1024**2, GiB => 1024**3, TiB => 1024**4);
                        if ($type eq "integer") { print Math::BigInt->new($v) + $dir }
                        elsif ($type eq "size") {
                                $v =~ /^(\d+)(\w*)$/ or die "not a size: $v\n";
                                print Math::BigInt->new($1) * $unit{$2} + $dir;
                        } else { print Math::BigFloat->new($v) + Math::BigFloat->new("0.001") * $dir }' "$@"
        }
        # refused_values TEXT: the bold values a paragraph says are refused
        refused_values() {
                grep -oE '\*[^* ]+\* (and more )?(is|are) refused' <<<"$1" | sed -E 's/^\*([^*]+)\*.*/\1/'
        }
        # the list the daemon gives for a bogus value, one a line; empty when it takes any
        daemon_choices() {
                run_daemon "--$1=no-such-value" | sed -nE 's/.*is not one of (.*)$/\1/p' | tr ',' '\n' |
                        sed -e 's/^ *//' -e 's/ *$//' | sort -u
        }

        roff_paragraphs "$mandir/asyncllmd.conf.5" >"$tmp/conf5.paragraphs"
        roff_paragraphs "$mandir/asyncllmd.8" >"$tmp/daemon8.paragraphs"
        awk -F'\t' '$1 == "DESCRIPTION" && $3 == "boolean" { print $4 }' "$tmp/conf5.paragraphs" |
                sed 's/, in any case.*//' | grep -oE '\*[a-z0-9]+\*' | tr -d '*' >"$tmp/boolean.spellings"
        if [[ ! -s $tmp/boolean.spellings ]]; then
                fail "asyncllmd.conf.5 lists no boolean spellings (under Types, before \"in any case\")"
        fi

        while IFS=$'\t' read -r _ _ tag text; do
                key=${tag%% = *}
                type=${tag#* = }
                [[ $tag == *" = "* ]] || continue
                case $type in
                path | group | address | name | text | list) ;; # free text: an address, a name, a key, origins
                boolean)
                        expect_daemon accepted "$key" "--$key" "asyncllmd.8 lists --$key"
                        expect_daemon accepted "no-$key" "--no-$key" "asyncllmd.8 lists --no-$key"
                        while read -r b; do
                                expect_daemon accepted "$key" "--$key=$b" "asyncllmd.conf.5 lists $b as a boolean"
                        done <"$tmp/boolean.spellings"
                        expect_daemon accepted "$key" "--$key=$(head -n1 "$tmp/boolean.spellings" | tr a-z A-Z)" \
                                "asyncllmd.conf.5 takes booleans in any case"
                        expect_daemon refused "$key" "--$key=maybe" "maybe is not a boolean"
                        ;;
                integer | size | seconds | fraction | number | x)
                        plain=${text//\*/}
                        num='([0-9]+(\.[0-9]+)?(KiB|MiB|GiB|TiB)?)'
                        if [[ $plain =~ more\ than\ $num\ and\ at\ most\ $num ]]; then
                                lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[4]}
                                expect_daemon refused "$key" "--$key=$lo" "asyncllmd.conf.5 says more than $lo"
                                expect_daemon accepted "$key" "--$key=$(beyond "$lo" "$type" 1)" "asyncllmd.conf.5 says more than $lo"
                                expect_daemon accepted "$key" "--$key=$hi" "asyncllmd.conf.5 says at most $hi"
                                expect_daemon refused "$key" "--$key=$(beyond "$hi" "$type" 1)" "asyncllmd.conf.5 says at most $hi"
                        elif [[ $plain =~ at\ least\ $num\ and\ less\ than\ $num ]]; then
                                lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[4]}
                                expect_daemon refused "$key" "--$key=$(beyond "$lo" "$type" -1)" "asyncllmd.conf.5 says at least $lo"
                                expect_daemon accepted "$key" "--$key=$lo" "asyncllmd.conf.5 says at least $lo"
                                expect_daemon accepted "$key" "--$key=$(beyond "$hi" "$type" -1)" "asyncllmd.conf.5 says less than $hi"
                                expect_daemon refused "$key" "--$key=$hi" "asyncllmd.conf.5 says less than $hi"
                        elif [[ $plain =~ $num\ to\ $num ]]; then
                                lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[4]}
                                expect_daemon refused "$key" "--$key=$(beyond "$lo" "$type" -1)" "asyncllmd.conf.5 says from $lo"
                                expect_daemon accepted "$key" "--$key=$lo" "asyncllmd.conf.5 says from $lo"
                                expect_daemon accepted "$key" "--$key=$hi" "asyncllmd.conf.5 says up to $hi"
                                expect_daemon refused "$key" "--$key=$(beyond "$hi" "$type" 1)" "asyncllmd.conf.5 says up to $hi"
                        elif [[ $text =~ \*([0-9]+)\*\ is\ the\ only\ value\ accepted ]]; then
                                only=${BASH_REMATCH[1]}
                                expect_daemon accepted "$key" "--$key=$only" "asyncllmd.conf.5 says $only is the only value accepted"
                                expect_daemon refused "$key" "--$key=$(beyond "$only" "$type" -1)" "asyncllmd.conf.5 says $only is the only value accepted"
                        else
                                fail "asyncllmd.conf.5: $key = $type gives no range (A to B, more than A and at most B, at least A and less than B, or *V* is the only value accepted)"
                        fi
                        ;;
                *)
                        # a list of values, or a name for one ("level") that the text lists
                        daemon_choices "$key" >"$tmp/choices.program"
                        if [[ ! -s $tmp/choices.program ]]; then
                                fail "asyncllmd.conf.5 lists values for $key ($type), but asyncllmd names none when it refuses one"
                        elif [[ $type =~ ^[a-z0-9-]+(\|[a-z0-9-]+)*$ && $type != level ]]; then
                                tr '|' '\n' <<<"$type" | sort -u >"$tmp/choices.page"
                                if ! cmp -s "$tmp/choices.page" "$tmp/choices.program"; then
                                        fail "$key: asyncllmd.conf.5 lists $(paste -sd' ' "$tmp/choices.page"), asyncllmd takes $(paste -sd' ' "$tmp/choices.program")"
                                fi
                                flag8=$(awk -F'\t' -v k="--$key" '$1 == "OPTIONS" && index($3, k " ") == 1 { print substr($3, length(k) + 2) }' \
                                        "$tmp/daemon8.paragraphs")
                                if [[ $flag8 != "$type" ]]; then
                                        fail "$key: asyncllmd.8 lists --$key ${flag8:-(nothing)}, asyncllmd.conf.5 $key = $type"
                                fi
                        else
                                while read -r c; do
                                        grep -qF "*$c*" <<<"$text" ||
                                                fail "asyncllmd.conf.5: $key = $type does not name $c, which asyncllmd takes"
                                done <"$tmp/choices.program"
                                cp "$tmp/choices.program" "$tmp/choices.page"
                        fi
                        while read -r c; do
                                expect_daemon accepted "$key" "--$key=$c" "asyncllmd.conf.5 lists $c for $key"
                        done <"$tmp/choices.page"
                        ;;
                esac
                while read -r v; do
                        [[ -n $v ]] && expect_daemon refused "$key" "--$key=$v" "asyncllmd.conf.5 says $v is refused"
                done < <(refused_values "$text")
        done < <(awk -F'\t' '$1 == "OPTIONS"' "$tmp/conf5.paragraphs")

        # asyncllmd.8's own refusals
        while IFS=$'\t' read -r _ _ tag text; do
                flag=${tag%% *}
                flag=${flag#--}
                while read -r v; do
                        [[ -n $v ]] && expect_daemon refused "$flag" "--$flag=$v" "asyncllmd.8 says $v is refused"
                done < <(refused_values "$text")
        done < <(awk -F'\t' '$1 == "OPTIONS" && $3 ~ /^--/' "$tmp/daemon8.paragraphs")
        [[ $value_failed -eq 0 ]] &&
                ok "$n_values documented values and bounds of asyncllmd's options behave as the pages say"
fi

# ---- (j) asyncllmctl's documented values against what it does with them -------------------

section j "the values asyncllmctl.1 lists for an option against what asyncllmctl does"
# An option whose tag lists its values ("--mode abort|wait|keep", under the command's .SS or
# under OPTIONS for the global ones) takes each of them, and the values it names when it
# refuses a bogus one ("--mode takes abort, wait or keep, got ...") are the same. asyncllmctl is
# pointed at a socket and buses that do not exist: a value it takes ends at "cannot connect"
# (exit 3), a refused one is a usage error (exit 2) that names the option.
if [[ -z $ctl || ! -x $ctl ]]; then
        skip "ASYNCLLMCTL is not set to a built asyncllmctl"
else
        roff_paragraphs "$mandir/asyncllmctl.1" >"$tmp/ctl1.paragraphs"
        # try_ctl VALUE: asyncllmctl [COMMAND] OPTION VALUE [what the command needs], with $cmd,
        # $opt and $extra set by the loop below
        try_ctl() {
                env ASYNCLLM_SOCKET="$tmp/no-such.sock" DBUS_SYSTEM_BUS_ADDRESS="unix:path=$tmp/no-such-bus" \
                        DBUS_SESSION_BUS_ADDRESS="unix:path=$tmp/no-such-bus" \
                        timeout 60 "$ctl" ${cmd:+"$cmd"} "$opt" "$1" "${extra[@]}" 2>&1 </dev/null
        }
        n_ctl=0
        ctl_failed=0
        while IFS=$'\t' read -r sect subsect tag _; do
                opt=${tag%% *}
                values=${tag#* }
                cmd=
                [[ $sect == COMMANDS ]] && cmd=$subsect
                extra=()
                [[ $cmd == generate ]] && extra=(x) # its prompt
                [[ -z $cmd ]] && extra=(status)     # a global option, tried on a command
                for v in ${values//|/ }; do
                        out=$(try_ctl "$v")
                        rc=$?
                        n_ctl=$((n_ctl + 1))
                        if [[ $rc -ne 3 || $out == *"$opt takes"* ]]; then
                                fail "asyncllmctl ${cmd:+$cmd }$opt $v: asyncllmctl.1 lists $v, but it does not take it (exit $rc): $out"
                                ctl_failed=1
                        fi
                done
                out=$(try_ctl no-such-value)
                rc=$?
                program=$(sed -nE "s/.*$opt takes (.*), got .*/\\1/p" <<<"$out" | sed 's/ or /, /' | tr ',' '\n' |
                        sed -e 's/^ *//' -e 's/ *$//' | sort -u | paste -sd' ')
                page=$(tr '|' '\n' <<<"$values" | sort -u | paste -sd' ')
                if [[ $rc -ne 2 || $program != "$page" ]]; then
                        fail "asyncllmctl ${cmd:+$cmd }$opt: asyncllmctl.1 lists $page, asyncllmctl names ${program:-nothing} when it refuses a bogus value (exit $rc)"
                        ctl_failed=1
                fi
        done < <(awk -F'\t' '$3 ~ /^--[a-z-]+ [a-z0-9-]+(\|[a-z0-9-]+)+$/' "$tmp/ctl1.paragraphs")
        [[ $ctl_failed -eq 0 && $n_ctl -gt 0 ]] && ok "$n_ctl listed values of asyncllmctl's options are taken, and are all it takes"
        [[ $n_ctl -eq 0 ]] && fail "no option of asyncllmctl.1 lists its values (--opt a|b): has the page's layout changed?"
fi

echo
if [[ $failed -ne 0 ]]; then
        echo "FAIL: the manual pages and the code disagree (see above)"
        exit 1
fi
echo "PASS"
exit 0
