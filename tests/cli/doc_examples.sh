#!/usr/bin/env bash
# Every example of README.md and of the man pages' EXAMPLES runs, with the
# exit status it must have (tests/cli/lib/doc_examples.py lists them, and
# those that cannot run here with the reason).
source "$(dirname "$0")/lib/common.bash"
"$PY" "$SRC/tests/cli/lib/doc_examples.py" "$BIN" "$SRC" || fail "doc examples"
echo "ok"
