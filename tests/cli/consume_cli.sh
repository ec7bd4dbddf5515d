#!/usr/bin/env bash
# mq-consume's command line: help and version, the usage line equals the man
# page's SYNOPSIS, bad arguments exit 64 naming the argument, a missing
# topic or data directory exits 66; a partition the topic does not have, 64.
source "$(dirname "$0")/lib/common.bash"

CONSUME="$C"
MAN="$SRC/man/man1/mq-consume.1"
export MQ_DIR="$WORK/data"
# expect_usage_error "<what>" "<text the message must name>" args...
expect_usage_error() {
  local what="$1" names="$2"
  shift 2
  run "$CONSUME" "$@"
  expect_rc 64 "$what"
  grep -qF -- "$names" "$WORK/err" || fail "$what: message does not name '$names': $(cat "$WORK/err")"
  grep -q "^Usage: mq-consume" "$WORK/err" || fail "$what: no usage line on stderr"
  [[ ! -s "$WORK/out" ]] || fail "$what: wrote to stdout"
}

# --- help and version ---------------------------------------------------------------
run "$CONSUME" --help
expect_rc 0 "--help"
for opt in --offset --exit-at-end --json --format --header-filter --skip-corrupt; do
  grep -q -- "$opt" "$WORK/out" || fail "--help does not list $opt"
done
run "$CONSUME" -h
expect_rc 0 "-h"
run "$CONSUME" -V
expect_rc 0 "-V"
grep -qE '^mq-consume [0-9]+\.[0-9]+\.[0-9]+$' "$WORK/out" || fail "-V: $(cat "$WORK/out")"

# --- the usage lines are the man page's SYNOPSIS ---------------------------------------
"$CONSUME" --help | sed -n '1,/^$/p' | sed -e '/^$/d' -e 's/^Usage: //' -e 's/^ *//' >"$WORK/usage"
sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$MAN" | sed -e '/^\./d' -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' \
  >"$WORK/synopsis"
[[ -s "$WORK/synopsis" ]] || fail "no SYNOPSIS in $MAN"
diff "$WORK/synopsis" "$WORK/usage" >&2 || fail "usage lines differ from the man page SYNOPSIS"
for section in NAME SYNOPSIS DESCRIPTION OPTIONS "JSON LINES" "EXIT STATUS" EXAMPLES "SEE ALSO"; do
  grep -q "^\.SH \"\{0,1\}$section" "$MAN" || fail "man page lacks $section"
done
# Every long option in --help is documented in the man page.
"$CONSUME" --help >"$WORK/help"
for opt in $(grep -oE -- '--[a-z][a-z-]+' "$WORK/help" | sort -u); do
  grep -q -- "${opt//-/\\\\-}\|$opt" "$MAN" || fail "man page does not document $opt"
done

# --- a topic to point the error cases at ------------------------------------------------
printf 'a\nb\n' | "$BIN/mq-produce" -q -t t --create --partitions 2

# --- usage errors: 64, naming the argument ----------------------------------------------
expect_usage_error "unknown flag" "--no-such-flag" -t t --no-such-flag
expect_usage_error "no topic" "--topic" -e
expect_usage_error "bad topic name" "--topic" -t 'a/b' -e
expect_usage_error "bad offset word" "--offset" -t t -o middle
expect_usage_error "bad offset value named" "middle" -t t -o middle
expect_usage_error "negative offset garbage" "--offset" -t t -o -x
expect_usage_error "bad s@ time" "s@yesterday" -t t -o s@yesterday
expect_usage_error "bad ISO time" "2026-13-01" -t t -o 2026-13-01T00:00:00Z
expect_usage_error "bad e@" "e@" -t t -o e@x
# Dates must exist: days per month, February 29 in leap years only
# (divisible by 4, centuries only when divisible by 400).
for bad in 2026-02-30 2026-02-29 2023-02-29 1900-02-29 2026-04-31 2026-06-31T00:00:00Z \
  s@2026-09-31 e@2026-11-31 2026-01-32 2026-00-10; do
  expect_usage_error "no such day: $bad" "$bad" -t t -o "$bad" -e
done
for good in 2024-02-29 2000-02-29 2026-01-31 2026-12-31T23:59:59Z s@2028-02-29 e@2026-04-30; do
  run "$CONSUME" -t nosuch -o "$good" -e
  [[ $rc != 64 ]] || fail "a real day refused: $good: $(cat "$WORK/err")"
done
expect_usage_error "two starts" "--offset" -t t -o 1 -o 2
expect_usage_error "two ends" "--offset" -t t -o e@1 -o e@2
expect_usage_error "two starts for one partition" "partition 1" -t t -o 1:1 -o 1:2
expect_usage_error "stored needs a group" "stored" -t t -o stored
expect_usage_error "bad count" "--count" -t t -c many
expect_usage_error "negative count" "--count" -t t -c -1
expect_usage_error "bad partition" "--partition" -t t -p x
expect_usage_error "negative partition" "--partition" -t t -p -1
expect_usage_error "-k with -K" "--key-delimiter" -t t -k -K :
expect_usage_error "-J with -f" "--format" -t t -J -f '%s'
expect_usage_error "-J with -0" "--null" -t t -J -0
expect_usage_error "-D with -0" "--null" -t t -D x -0
expect_usage_error "-q with -v" "--verbose" -t t -q -v
expect_usage_error "bad escape in -D" "--delimiter" -t t -D '\q'
expect_usage_error "bad \\x escape in -K" "--key-delimiter" -t t -K '\xZZ'
expect_usage_error "unknown -f token" "%y" -t t -f '%y'
expect_usage_error "empty header filter name" "--header-filter" -t t --header-filter =v
expect_usage_error "batch limit too small" "--max-batch-bytes" -t t --max-batch-bytes 10
run env -u MQ_DIR "$CONSUME" -t t -e
expect_rc 64 "no data directory"
grep -q -- "--dir" "$WORK/err" || fail "no data directory: message does not name --dir"

# -f: a bad escape is named once, with its byte position in the format.
run "$CONSUME" -t t -e -f 'ab\e'
expect_rc 64 "-f bad escape"
grep -q "^mq-consume: -f: 'ab\\\\e': unknown escape '\\\\e' at byte 2 " "$WORK/err" ||
  fail "-f bad escape message: $(cat "$WORK/err")"

# --- missing input: 66 ---------------------------------------------------------------------
run "$CONSUME" -t nosuch -e
expect_rc 66 "missing topic"
grep -q nosuch "$WORK/err" || fail "missing topic: not named: $(cat "$WORK/err")"
# A partition the topic does not have is a usage error (64), as in mq-produce,
# for -p and for a -o position alike.
run "$CONSUME" -t t -p 7 -e
expect_rc 64 "missing partition"
grep -q -- "--partition 7" "$WORK/err" || fail "missing partition: not named: $(cat "$WORK/err")"
run "$CONSUME" -t t -o 9:5 -e
expect_rc 64 "-o for a missing partition"
grep -q -- "-o 9:" "$WORK/err" || fail "-o 9:5: not named: $(cat "$WORK/err")"
run "$CONSUME" -C "$WORK/nodir" -t t -e
expect_rc 66 "missing data directory"

# --- -v prints Kafka's summary on stderr, -q prints nothing ----------------------------------
run "$CONSUME" -t t -e -v
expect_rc 0 "-v"
grep -qx "Processed a total of 2 messages" "$WORK/err" || fail "-v summary: $(cat "$WORK/err")"
run "$CONSUME" -t t -e -q
[[ $rc == 0 && ! -s "$WORK/err" && $(wc -l <"$WORK/out") == 2 ]] || fail "-q"
echo "ok"
