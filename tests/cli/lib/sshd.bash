# A throwaway sshd on 127.0.0.1 for a test, and an ssh client config that
# reaches it as host "localhost-mq". Source after lib/common.bash:
#
#   source "$(dirname "$0")/lib/sshd.bash"
#   sshd_start                 # fails the test (never skips) without sshd
#   "$BIN/tests/mq-test-rsh" localhost-mq echo ok    # or: $MQ_RSH localhost-mq 'echo ok'
#   sshd_stop                  # also run at exit
#   sshd_start                 # again: the same host (keys), maybe another port
#
# sshd_start exports MQ_RSH="ssh -F $SSHD_DIR/ssh_config" (split on spaces
# by the tools, so the path has none) and sets:
#   SSHD_DIR         keys, configs, sshd.log (also dumped when start fails)
#   SSHD_PORT        the port it listens on
#   SSHD_PID         the sshd listener (run with -D, in the test's PIDS)
#   MQ_REMOTE_BIN    the tools, by absolute path: the remote shell's PATH is
#                    sshd's default, not the test's (SetEnv in sshd_config
#                    puts these dirs first in PATH too, but a login shell's
#                    startup files may reset it: call tools by absolute path)
#   MQ_REMOTE_TEST_BIN  the test helpers ($BIN/tests)
#
# Root or not: as root, sshd needs its privilege separation directory
# /run/sshd (created if missing; Debian's service unit makes it, a chroot has
# none) and the user "sshd" (Debian's openssh-server package adds it); key
# login as root is allowed (PermitRootLogin prohibit-password). As another
# user, sshd runs unprivileged and logs in only that user, which is the user
# the test runs as. The user needs a login shell that runs commands (not
# nologin) and an entry in the passwd database.

SSHD_BIN=/usr/sbin/sshd

# sshd_start: keys, configs, a free port; starts sshd and waits until
# `ssh localhost-mq true` works (at most ~30 s: a hang guard, no timing).
sshd_start() {
  local tool
  for tool in "$SSHD_BIN" /usr/bin/ssh /usr/bin/ssh-keygen; do
    [[ -x $tool ]] || fail "$tool not found: the ssh tests need Debian's openssh-server and openssh-client (./build.sh installs them as root; or: apt-get install openssh-server openssh-client)"
  done
  SSHD_DIR="$WORK/sshd"
  [[ $SSHD_DIR != *[[:space:]]* ]] || fail "sshd: scratch path '$SSHD_DIR' holds a space (MQ_RSH is split on spaces)"
  mkdir -p "$SSHD_DIR"
  chmod 700 "$SSHD_DIR"
  local user
  user=$(id -un) || fail "sshd: the current uid $(id -u) has no user name (sshd needs a passwd entry)"
  if [[ $(id -u) == 0 && ! -d /run/sshd ]]; then
    mkdir -m 0755 /run/sshd || fail "sshd: cannot create its privilege separation directory /run/sshd"
  fi
  # Keys and known hosts survive sshd_stop: a second sshd_start (a host
  # coming back) is the same host to the client.
  if [[ ! -f $SSHD_DIR/host_ed25519 ]]; then
    ssh-keygen -q -t ed25519 -N '' -C mq-test-host -f "$SSHD_DIR/host_ed25519" </dev/null ||
      fail "sshd: ssh-keygen (host key) failed"
    ssh-keygen -q -t ed25519 -N '' -C mq-test-client -f "$SSHD_DIR/client_ed25519" </dev/null ||
      fail "sshd: ssh-keygen (client key) failed"
    cp "$SSHD_DIR/client_ed25519.pub" "$SSHD_DIR/authorized_keys"
    : >"$SSHD_DIR/known_hosts"
  fi

  MQ_REMOTE_BIN="$BIN"
  MQ_REMOTE_BINDIR="$BIN"  # where the tools start their peers over ssh
  MQ_REMOTE_TEST_BIN="$BIN/tests"
  local attempt
  for attempt in 1 2 3 4 5; do
    SSHD_PORT=$(sshd_free_port)
    sshd_write_configs "$user"
    "$SSHD_BIN" -t -f "$SSHD_DIR/sshd_config" 2>"$SSHD_DIR/config-check.log" ||
      fail "sshd: $SSHD_DIR/sshd_config refused: $(cat "$SSHD_DIR/config-check.log")"
    "$SSHD_BIN" -D -f "$SSHD_DIR/sshd_config" -E "$SSHD_DIR/sshd.log" </dev/null &
    SSHD_PID=$!
    PIDS+=("$SSHD_PID")
    export MQ_RSH="ssh -F $SSHD_DIR/ssh_config"
    if sshd_wait_ready; then
      export MQ_REMOTE_BIN MQ_REMOTE_BINDIR MQ_REMOTE_TEST_BIN SSHD_DIR SSHD_PORT
      return 0
    fi
    # Another process may have taken the port between our probe and sshd's
    # bind: try another one; any other failure is the same every time.
    kill "$SSHD_PID" 2>/dev/null || true
    wait "$SSHD_PID" 2>/dev/null || true
    grep -q "Address already in use" "$SSHD_DIR/sshd.log" 2>/dev/null || break
  done
  echo "--- $SSHD_DIR/sshd.log" >&2
  cat "$SSHD_DIR/sshd.log" >&2 2>/dev/null || true
  echo "--- ssh -v localhost-mq true" >&2
  ssh -v -F "$SSHD_DIR/ssh_config" localhost-mq true </dev/null >&2 2>&1 || true
  fail "sshd: no ssh login to 127.0.0.1:$SSHD_PORT as $user (log above)"
}

# sshd_stop: stops the listener (sessions still running end on their own).
sshd_stop() {
  [[ -n ${SSHD_PID:-} ]] || return 0
  kill "$SSHD_PID" 2>/dev/null || true
  wait "$SSHD_PID" 2>/dev/null || true
  SSHD_PID=
}

# A port nobody listens on now (the kernel's choice of an ephemeral port).
sshd_free_port() {
  "$PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

sshd_write_configs() {
  local user=$1
  cat >"$SSHD_DIR/sshd_config" <<EOF
# A throwaway sshd for one test (tests/cli/lib/sshd.bash).
ListenAddress 127.0.0.1
Port $SSHD_PORT
HostKey $SSHD_DIR/host_ed25519
PidFile $SSHD_DIR/sshd.pid
AuthorizedKeysFile $SSHD_DIR/authorized_keys
AllowUsers $user
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
PermitUserEnvironment no
# The tools started there reach the other "hosts" (this one) the same way.
SetEnv PATH=$BIN:$BIN/tests:/usr/local/bin:/usr/bin:/bin "MQ_RSH=ssh -F $SSHD_DIR/ssh_config" MQ_REMOTE_BINDIR=$BIN MQ_TIMEOUT_MS=${MQ_TIMEOUT_MS:-10000}
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding no
UseDNS no
MaxStartups 100
MaxSessions 100
LogLevel VERBOSE
EOF
  cat >"$SSHD_DIR/ssh_config" <<EOF
# The client side of tests/cli/lib/sshd.bash's sshd (used as ssh -F FILE).
Host localhost-mq
  HostName 127.0.0.1
  Port $SSHD_PORT
  User $user
  IdentityFile $SSHD_DIR/client_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $SSHD_DIR/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking accept-new
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR
  ControlMaster no
  ForwardAgent no
  ForwardX11 no
EOF
}

# Waits until a login works or sshd has exited: 0 once ready.
sshd_wait_ready() {
  local i
  for ((i = 0; i < 150; i++)); do
    kill -0 "$SSHD_PID" 2>/dev/null || return 1
    if [[ $(ssh -F "$SSHD_DIR/ssh_config" localhost-mq echo ready </dev/null 2>>"$SSHD_DIR/client.log") == ready ]]; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}
