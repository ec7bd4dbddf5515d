#!/usr/bin/env bash
# mq-consume start and stop positions: beginning/earliest, end/latest, N, -N,
# s@MS, ISO 8601 times, per-partition P:START, e@ end times, -c, -e.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
consume() { timeout 20 "$BIN/mq-consume" "$@"; }
# expect "<what>" "<want, space-separated>" mq-consume-args...
expect() {
  local what="$1" want="$2"
  shift 2
  local got
  got="$(consume "$@" | tr '\n' ' ' | sed 's/ $//')"
  [[ "$got" == "$want" ]] || fail "$what: got '$got', want '$want'"
}

# Ten messages m0..m9, one second apart from 2026-11-30T08:00:00Z.
BASE=$(( $(date -u -d 2026-11-30T08:00:00Z +%s) * 1000 ))
for i in $(seq 0 9); do
  printf '{"ts":%d,"key":"k%d","payload":"m%d"}\n' $((BASE + i * 1000)) "$i" "$i"
done | "$BIN/mq-produce" -q -t t --create -J

ALL="m0 m1 m2 m3 m4 m5 m6 m7 m8 m9"
expect "default start" "$ALL" -t t -e
expect "beginning" "$ALL" -t t -e -o beginning
expect "earliest" "$ALL" -t t -e -o earliest
expect "end" "" -t t -e -o end
expect "latest" "" -t t -e -o latest
expect "absolute N" "m7 m8 m9" -t t -e -o 7
expect "N = 0" "$ALL" -t t -e -o 0
expect "N at the end" "" -t t -e -o 10
expect "N past the end" "" -t t -e -o 1000
expect "-N" "m7 m8 m9" -t t -e -o -3
expect "-N larger than the log" "$ALL" -t t -e -o -100
expect "-0" "" -t t -e -o -0
expect "s@ms exact" "m3 m4 m5 m6 m7 m8 m9" -t t -e -o s@$((BASE + 3000))
expect "s@ms between" "m4 m5 m6 m7 m8 m9" -t t -e -o s@$((BASE + 3500))
expect "s@ms before all" "$ALL" -t t -e -o s@0
expect "s@ms after all" "" -t t -e -o s@$((BASE + 60000))
expect "ISO Z" "m3 m4 m5 m6 m7 m8 m9" -t t -e -o 2026-11-30T08:00:03Z
expect "ISO fraction" "m4 m5 m6 m7 m8 m9" -t t -e -o s@2026-11-30T08:00:03.5Z
expect "ISO offset" "m8 m9" -t t -e -o 2026-11-30T09:00:08+01:00
expect "ISO no zone (UTC)" "m9" -t t -e -o 2026-11-30T08:00:09
expect "e@ms" "m0 m1 m2 m3 m4" -t t -o e@$((BASE + 5000))
expect "start and e@" "m2 m3 m4" -t t -o 2 -o e@$((BASE + 4500))
expect "e@ISO" "m0 m1" -t t -o e@2026-11-30T08:00:02Z
expect "e@ past the end with -e" "$ALL" -t t -e -o e@$((BASE + 60000))
expect "-c" "m0 m1 m2" -t t -c 3
expect "-c with start" "m5 m6" -t t -c 2 -o 5
expect "-c larger than what -e allows" "m8 m9" -t t -e -c 5 -o 8
expect "-c 0" "" -t t -c 0
expect "-c without -e stops in follow mode" "m9" -t t -o -1 -c 1

# --- several partitions --------------------------------------------------------------
"$BIN/mq-produce" -q -t mp --create --partitions 3 </dev/null
for p in 0 1 2; do
  for i in 0 1 2 3; do echo "p$p-$i"; done | "$BIN/mq-produce" -q -t mp -p "$p"
done
expect "-p 1" "p1-0 p1-1 p1-2 p1-3" -t mp -e -p 1
expect "-p 2,0 -o -1 (round-robin in the order given)" "p2-3 p0-3" -t mp -e -p 2,0 -o -1 -f '%s\n' 
expect "per-partition start" "p0-3 p1-1 p1-2 p1-3 p2-2 p2-3" -t mp -e -o 0:3 -o 1:1 -o 2:-2 \
  -f '%s\n'
expect "per-partition with a default" "p0-3 p1-3 p2-0 p2-1 p2-2 p2-3" -t mp -e -o -1 -o 2:beginning
# Every message once; within a partition, in offset order.
consume -t mp -e -f '%p %o %s\n' >"$WORK/mp"
[[ $(wc -l <"$WORK/mp") == 12 ]] || fail "all partitions: want 12 messages, got $(wc -l <"$WORK/mp")"
for p in 0 1 2; do
  [[ "$(awk -v p=$p '$1==p {print $2}' "$WORK/mp" | tr '\n' ' ')" == "0 1 2 3 " ]] ||
    fail "partition $p out of order: $(cat "$WORK/mp")"
  awk -v p=$p '$1==p && $3 != "p" p "-" $2 {exit 1}' "$WORK/mp" || fail "partition $p: wrong values"
done
# -c counts across partitions.
[[ $(consume -t mp -c 5 | wc -l) == 5 ]] || fail "-c 5 over three partitions"
echo "ok"
