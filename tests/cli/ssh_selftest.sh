#!/usr/bin/env bash
# tests/cli/lib/sshd.bash: a throwaway sshd on 127.0.0.1 answers
# `$MQ_RSH localhost-mq 'echo ok'`; words quoted by ShellQuote's rules (the
# tools' RshCommand, through mq-test-rsh) arrive on the far side exactly,
# hostile ones included, and none of them runs; a tool runs there by
# absolute path; stdin and exit statuses cross. Fails, never skips, when
# sshd or ssh is missing. Works as root (CI's fresh Debian) or as a user.
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/sshd.bash"
on_exit() { sshd_stop; }

RSH="$BIN/tests/mq-test-rsh"
echo "ssh_selftest: running as $(id -un) (uid $(id -u))"
sshd_start

# --- the client command line, as the tools build it ---------------------------
run $MQ_RSH localhost-mq 'echo ok'
expect_rc 0 "\$MQ_RSH localhost-mq 'echo ok'"
expect_eq "echo ok over ssh" "ok" "$(cat "$WORK/out")"

# A shell function spelling ShellQuote's rules, checked against the C++.
shell_quote() {
  if [[ -n $1 && $1 != *[!A-Za-z0-9_./=:,+@%-]* ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}
words=('a b;touch x' "it's" "'" '$(touch y)' '`touch z`' '$HOME' '*' '~' '' '-n' '--help'
       $'two\nlines' $'tab\there' 'é€📦' '>w' '<r' '\' '"' '#c' '!' '{a,b}' 'plain-word_1.2')
run "$RSH" --print localhost-mq printf '%s\0' "${words[@]}"
expect_rc 0 "mq-test-rsh --print"
joined="printf $(shell_quote '%s\0')"
for w in "${words[@]}"; do joined+=" $(shell_quote "$w")"; done
# The last line printed is the remote command string (it may hold newlines:
# compare everything after MQ_RSH's words and the host).
want=$(printf '%s\n' $MQ_RSH localhost-mq "$joined")
expect_eq "RshCommand argv" "$want" "$(cat "$WORK/out")"

# --- hostile words through real ssh -------------------------------------------
REMOTE="$WORK/remote dir;touch x"
mkdir "$REMOTE"
run "$RSH" localhost-mq sh -c 'cd "$1" && shift && printf "%s\0" "$@"' sh "$REMOTE" "${words[@]}"
expect_rc 0 "hostile words over ssh"
mapfile -d '' -t got <"$WORK/out"
expect_eq "hostile words over ssh" "$(printf '[%s]\n' "${words[@]}")" "$(printf '[%s]\n' "${got[@]}")"
[[ -z $(ls -A "$REMOTE") ]] || fail "a quoted word ran remotely: $(ls -A "$REMOTE")"
for f in x y z w; do
  [[ ! -e $HOME/$f && ! -e $WORK/$f ]] || fail "a quoted word ran remotely: $f exists"
done

# --- stdin, exit status, a tool by absolute path --------------------------------
head -c 1000000 /dev/urandom >"$WORK/blob"
"$RSH" localhost-mq cat <"$WORK/blob" >"$WORK/blob.back" || fail "cat over ssh"
cmp -s "$WORK/blob" "$WORK/blob.back" || fail "1 MB through ssh cat differs"
run "$RSH" localhost-mq sh -c 'exit 7'
expect_rc 7 "exit status over ssh"
run "$RSH" localhost-mq "$MQ_REMOTE_BIN/mq-inspect" --version
expect_rc 0 "mq-inspect by absolute path"
grep -qE '^mq-inspect [0-9]+\.[0-9]+\.[0-9]+$' "$WORK/out" || fail "mq-inspect --version: $(cat "$WORK/out")"
run "$RSH" localhost-mq "$MQ_REMOTE_TEST_BIN/mq-test-rsh" --print h true
expect_rc 0 "a test helper by absolute path"

# An unreachable host: ssh's own exit status 255; started again, the same
# host to the client (no host key change refused).
sshd_stop
run $MQ_RSH localhost-mq 'echo ok'
expect_rc 255 "ssh to a stopped sshd"
sshd_start
run "$RSH" localhost-mq echo back
expect_rc 0 "ssh after sshd_start again"
expect_eq "echo back" "back" "$(cat "$WORK/out")"
echo "ssh_selftest: ok"
