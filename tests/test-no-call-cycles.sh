#!/usr/bin/env bash
# No two product source files use each other in a circle: one of them owns the other, or a
# callback table breaks the loop. Reads the built objects of every product folder (the
# convenience libraries, the client library, the programs), finds with nm which source file
# defines and which uses each global symbol, and fails naming the files of every cycle of that
# file-level graph (its strongly connected components), with the symbols on each edge.
# Exit 0 pass, 1 fail, 77 skip (no nm, or nothing built).
#
# ASYNCLLM_SRCDIR    the source tree (default: next to this script)
# ASYNCLLM_BUILDDIR  the build tree holding the objects (default: the current directory, where
#                    make check runs the tests)
set -u

srcdir=${ASYNCLLM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
builddir=${ASYNCLLM_BUILDDIR:-.}
folders="base model tokenizer engine cpu gpu daemon lib client tools bench"

command -v nm >/dev/null || { echo "SKIP: nm is not installed"; exit 77; }

# The source file an object was built from: automake names it after the source, prefixed by
# the target ("libasyncllm_engine_la-scheduler.o") when the target has flags of its own;
# libtool puts the PIC twin in .libs/. An object whose source is gone, or is newer than it (a
# stale one left in the build tree under a name the build no longer uses), is skipped.
source_of() {
        local folder=$1 object=$2 name candidate ext
        name=${object##*/}
        name=${name%.o}
        for candidate in "$name" "${name#*-}"; do
                for ext in c cu cc; do
                        if [[ -f $srcdir/$folder/$candidate.$ext ]]; then
                                echo "$folder/$candidate.$ext"
                                return 0
                        fi
                done
        done
        return 1
}

# One line per symbol an object defines ("D file symbol") or uses ("U file symbol").
symbols() {
        local folder object source
        for folder in $folders; do
                for object in "$builddir/$folder"/*.o "$builddir/$folder"/.libs/*.o; do
                        [[ -f $object ]] || continue
                        source=$(source_of "$folder" "$object") || continue
                        [[ $object -ot $srcdir/$source ]] && continue
                        nm -P "$object" | awk -v file="$source" '
                                $2 == "U" { print "U", file, $1; next }
                                $2 ~ /^[A-TV-Z]$/ { print "D", file, $1 }'
                done
        done
}

table=$(symbols | sort -u)
[[ -n $table ]] || { echo "SKIP: no objects under $builddir (build the tree first)"; exit 77; }

report=$(awk '
        $1 == "D" { definers[$3] = definers[$3] " " $2; next }
        $1 == "U" { uses[++n_uses] = $2 " " $3 }
        END {
                # A symbol that several programs define (main) links each use to each
                # definer; only a use by one file of a symbol that another defines is an edge.
                for (i = 1; i <= n_uses; i++) {
                        split(uses[i], u, " ")
                        if (!(u[2] in definers))
                                continue
                        k = split(definers[u[2]], d, " ")
                        for (j = 1; j <= k; j++) {
                                if (d[j] == u[1])
                                        continue
                                edge = u[1] SUBSEP d[j]
                                if (!(edge in via)) {
                                        via[edge] = u[2]
                                        out[u[1]] = out[u[1]] " " d[j]
                                        node[u[1]] = node[d[j]] = 1
                                } else if (index(" " via[edge] " ", " " u[2] " ") == 0)
                                        via[edge] = via[edge] " " u[2]
                        }
                }
                for (v in node)
                        if (!(v in index_of))
                                connect(v)
                for (c = 1; c <= n_components; c++) {
                        print "cycle:" component[c]
                        k = split(component[c], members, " ")
                        for (i = 1; i <= k; i++)
                                for (j = 1; j <= k; j++)
                                        if ((members[i] SUBSEP members[j]) in via)
                                                print "  " members[i] " -> " members[j] ": " via[members[i], members[j]]
                }
        }
        # Tarjan: the strongly connected components of more than one file are the cycles.
        function connect(v,    targets, k, i, w, members) {
                index_of[v] = low[v] = ++counter
                stack[++depth] = v
                on_stack[v] = 1
                k = split(out[v], targets, " ")
                for (i = 1; i <= k; i++) {
                        w = targets[i]
                        if (!(w in index_of)) {
                                connect(w)
                                if (low[w] < low[v])
                                        low[v] = low[w]
                        } else if (on_stack[w] && index_of[w] < low[v])
                                low[v] = index_of[w]
                }
                if (low[v] != index_of[v])
                        return
                members = ""
                do {
                        w = stack[depth--]
                        on_stack[w] = 0
                        members = members " " w
                } while (w != v)
                if (split(members, targets, " ") > 1)
                        component[++n_components] = members
        }' <<<"$table")

if [[ -n $report ]]; then
        echo "FAIL: source files that call into each other in a circle (one should own the other, or a"
        echo "callback table break the loop):"
        echo "$report"
        exit 1
fi
files=$(awk '{ print $2 }' <<<"$table" | sort -u | wc -l)
echo "PASS: no call cycles among $files source files"
