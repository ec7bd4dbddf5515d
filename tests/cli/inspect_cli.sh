#!/usr/bin/env bash
# mq-inspect's command line: help and version, the usage line equals the man
# page's SYNOPSIS, and bad invocations exit with the documented codes.
source "$(dirname "$0")/lib/common.bash"

MAN="$SRC/man/man1/mq-inspect.1"

# --- help and version ---------------------------------------------------------
run "$INSPECT" --help
expect_rc 0 "--help"
grep -q -- "--verify" "$WORK/out" || fail "--help does not list --verify"
run "$INSPECT" -h
expect_rc 0 "-h"
run "$INSPECT" --version
expect_rc 0 "--version"
grep -qE '^mq-inspect [0-9]+\.[0-9]+\.[0-9]+$' "$WORK/out" || fail "--version: $(cat "$WORK/out")"
run "$INSPECT" -V
expect_rc 0 "-V"

# --- the usage lines are the man page's SYNOPSIS ---------------------------------
# From --help: the lines before the first blank line, without "Usage:".
"$INSPECT" --help | sed -n '1,/^$/p' | sed -e '/^$/d' -e 's/^Usage: //' -e 's/^ *//' >"$WORK/usage"
# From the roff source: the lines of the SYNOPSIS section, font escapes removed.
sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$MAN" | sed -e '/^\./d' -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' \
  >"$WORK/synopsis"
[[ -s "$WORK/synopsis" ]] || fail "no SYNOPSIS in $MAN"
diff "$WORK/synopsis" "$WORK/usage" >&2 || fail "usage lines differ from the man page SYNOPSIS"
# And as man renders it (./build.sh installs man-db).
command -v man >/dev/null || fail "man is not installed (./build.sh installs man-db)"
LC_ALL=C MANWIDTH=300 man -l "$MAN" 2>/dev/null | sed -n '/^SYNOPSIS/,/^[A-Z]/p' |
  sed -e '/^[A-Z]/d' -e '/^$/d' -e 's/^ *//' >"$WORK/rendered"
diff "$WORK/rendered" "$WORK/usage" >&2 || fail "usage differs from the rendered SYNOPSIS"
# The man page has every section the project asks of one.
for section in NAME SYNOPSIS DESCRIPTION OPTIONS OUTPUT "EXIT STATUS" EXAMPLES "SEE ALSO"; do
  grep -q "^\.SH \"\{0,1\}$section" "$MAN" || fail "man page lacks $section"
done
# Every long option in --help is documented in the man page.
for opt in $(grep -oE -- '--[a-z][a-z-]+' "$WORK/usage" | sort -u); do
  grep -q -- "$opt" "$MAN" || fail "man page does not document $opt"
done

# --- usage errors: 64, naming the argument -----------------------------------------
run "$INSPECT" --no-such-flag x.log
expect_rc 64 "unknown flag"
grep -q -- "--no-such-flag" "$WORK/err" || fail "unknown flag not named: $(cat "$WORK/err")"
run "$INSPECT" --no-such-flag
expect_rc 64 "unknown flag alone"
grep -q -- "--no-such-flag" "$WORK/err" || fail "unknown flag alone not named: $(cat "$WORK/err")"
run "$INSPECT"
expect_rc 64 "no FILE"
grep -q "FILE" "$WORK/err" || fail "missing FILE not named: $(cat "$WORK/err")"
run "$INSPECT" --verify -r x.log
expect_rc 64 "--verify with -r"
run "$INSPECT" --max-batch-bytes 10 x.log
expect_rc 64 "--max-batch-bytes below a header"
grep -q -- "--max-batch-bytes" "$WORK/err" || fail "bad --max-batch-bytes not named: $(cat "$WORK/err")"
run "$INSPECT" --max-batch-bytes lots x.log
expect_rc 64 "--max-batch-bytes not a number"

touch "$WORK/notes.txt"
run "$INSPECT" "$WORK/notes.txt"
expect_rc 64 "unknown suffix"
grep -q "$WORK/notes.txt" "$WORK/err" || fail "unknown suffix: file not named"
run "$INSPECT" "$WORK"
expect_rc 64 "a directory without --verify"

# --- missing files: 66, naming the file ------------------------------------------------
for args in "$WORK/00000000000000000000.log" "-r $WORK/00000000000000000000.log" \
            "$WORK/00000000000000000000.index" "$WORK/00000000000000000000.timeindex" \
            "--verify $WORK/00000000000000000000.log" "--verify $WORK/nothing-0"; do
  # shellcheck disable=SC2086
  run "$INSPECT" $args
  expect_rc 66 "missing: $args"
  grep -q "$WORK/" "$WORK/err" || fail "missing file not named for $args: $(cat "$WORK/err")"
done

# --- the exit status is that of the first failing path; the others still run -------
: >"$WORK/00000000000000000000.log"
run "$INSPECT" "$WORK/missing.log" "$WORK/00000000000000000000.log"
expect_rc 66 "missing then present"
grep -q "^Dumping $WORK/00000000000000000000.log" "$WORK/out" || fail "second file not dumped"

echo "ok"
