#!/usr/bin/env bash
# Part 5 of the package tests, inside a private mount namespace (run.sh starts it after installing the previous
# release's .deb): the installed daemon runs under a real systemd user manager with payments open in every phase (an
# HPP session polled, a capture sent whose answer Klarna holds, an order waiting for its capture request, a
# dispute open), the new .deb is installed over it, the service restarted as docs/operations.md says, and every
# payment must end once, the store be at the new schema, the config and the credentials be as they were.
# Environment: NEW_DEB (the package to upgrade to), SANDBOX_PORT and SANDBOX_PASSWORD_FILE (Klarna, started by
# run.sh outside this namespace). Exits with the number of failures.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../System/harness.sh"
source "$HERE/../System/checks.sh"
source "$HERE/user-units.sh"
trap 'world_down' EXIT
world_up || exit 1
BIN=/usr/bin/klarna-reconciler
OUTBOX=/var/spool/klarna-reconciler-outbox CONFIG=/etc/klarna-reconciler/config.yaml
CREDSTORE=$W/credstore
SANDBOX=http://127.0.0.1:$SANDBOX_PORT
# The commands run here find the credentials where the unit has them (this test's files), and the store once the
# daemon made it (below).
export CREDENTIALS_DIRECTORY=$W/credstore
mkdir -p "$CREDSTORE"
cp "$SANDBOX_PASSWORD_FILE" "$CREDSTORE/klarna-password"
printf 'upgrade-test-callback-key-%s\n' "$RANDOM$RANDOM" >"$CREDSTORE/callback-key"
echo '{}' >"$CREDSTORE/webhook-signing-keys"
curl -sf -X POST "$SANDBOX/_sandbox/reset" >/dev/null
cat >"$CONFIG" <<YAML
# Written by the administrator before the upgrade; the upgrade must keep it as it is.
klarna:
  base_url: http://127.0.0.1:$SANDBOX_PORT
  username: merchant
polling:
  dense_interval_seconds: 0.2
disputes:
  enabled: true
YAML

OLD_VERSION=$(dpkg-query -W -f '${Version}' klarna-reconciler)
NEW_VERSION=$(dpkg-deb -f "$NEW_DEB" Version)
echo "  from $OLD_VERSION to $NEW_VERSION"
user_units "$CREDSTORE"
check "the previous release's sockets start" systemctl --user start klarna-reconciler.socket klarna-reconciler-control.socket

# new_session SCHEDULE_SECONDS: a session at the sandbox, completing after that many seconds; prints "HPP KP".
new_session() {
    curl -sS --max-time 10 "$SANDBOX/_sandbox/sessions" -H 'Content-Type: application/json' \
        -d "{\"place_order_mode\": \"NONE\", \"merchant_reference\": \"upgrade-$RANDOM\", \"schedule\": [{\"after_seconds\": $1, \"status\": \"COMPLETED\"}]}" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["hpp_session_id"], d["kp_session_id"])'
}
# track HPP KP CAPTURE: the shop hands the session over on the ingest socket; prints the HTTP status.
track() {
    curl -sS --max-time 30 --unix-socket /run/klarna-reconciler.sock -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
        -X POST http://localhost/v1/sessions -d "{\"hpp_session_id\": \"$1\", \"kp_session_id\": \"$2\", \"place_order_mode\": \"NONE\", \"capture\": \"$3\"}"
}
# effects KIND FIELD VALUE: how many side effects of KIND the sandbox performed with FIELD = VALUE.
effects() {
    curl -sf "$SANDBOX/_sandbox/effects?kind=$1" | python3 -c "import json,sys; print(sum(1 for e in json.load(sys.stdin)['effects'] if e.get('$2') == '$3'))"
}
order_of() {
    curl -sf "$SANDBOX/_sandbox/effects?kind=order_placed" | python3 -c "import json,sys; print(next((e['order_id'] for e in json.load(sys.stdin)['effects'] if e.get('kp_session_id') == '$1'), ''))"
}
# outcomes KIND ID: how many outcome documents of KIND name ID, in the outbox (new/ and acknowledged cur/).
outcomes() {
    python3 - "$OUTBOX" "$1" "$2" <<'PY'
import json, os, sys
outbox, kind, name = sys.argv[1:]
count = 0
for folder in ("new", "cur"):
    for file in os.listdir(os.path.join(outbox, folder)):
        with open(os.path.join(outbox, folder, file)) as f:
            text = f.read()
        if json.loads(text).get("outcome") == kind and name in text:
            count += 1
print(count)
PY
}
is_one() { test "$("$@")" = 1; }
# requests ROUTE [TEXT]: how many requests the sandbox received on ROUTE (whose path names TEXT).
requests() {
    curl -sf "$SANDBOX/_sandbox/requests?route=$1" | python3 -c "import json,sys; print(sum(1 for r in json.load(sys.stdin)['requests'] if '${2:-}' in r['path']))"
}

# --- payments open in every phase, with the previous release running ----------------------------------------------
# A dispute, opened on a captured order, seen by the daemon's dispute list at its start.
read -r HPP_D KP_D <<<"$(new_session 0.3)"
check "the previous release accepts a payment (202)" test "$(track "$HPP_D" "$KP_D" immediate)" = 202
wait_for 60 "the first payment captured" is_one outcomes captured "$HPP_D"
# A user manager's StateDirectory= is under $XDG_CONFIG_HOME on systemd 252, $XDG_STATE_HOME from 254.
STATE_DIRECTORY=$(dirname "$(find "$XDG_CONFIG_HOME" "$XDG_STATE_HOME" -name state.sqlite 2>/dev/null | head -1)")
export STATE_DIRECTORY
ORDER_D=$(order_of "$KP_D")
DISPUTE=$(curl -sS -X POST "$SANDBOX/_sandbox/disputes" -H 'Content-Type: application/json' -d "{\"order_id\": \"$ORDER_D\"}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["payment_dispute_id"])')
systemctl --user restart klarna-reconciler.service
wait_for 60 "the dispute seen by the previous release (dispute_opened)" is_one outcomes dispute_opened "$DISPUTE"
# An order waiting for the shop's capture request.
read -r HPP_C KP_C <<<"$(new_session 0.3)"
check "an on_request payment accepted" test "$(track "$HPP_C" "$KP_C" on_request)" = 202
wait_for 60 "the on_request order placed" is_one outcomes order_placed "$HPP_C"
ORDER_C=$(order_of "$KP_C")
# An HPP session still being polled: the customer has not paid yet.
read -r HPP_A KP_A <<<"$(new_session 86400)"
check "a payment still at Klarna's page accepted" test "$(track "$HPP_A" "$KP_A" immediate)" = 202
polled() { test "$(requests hpp.read_session "$HPP_A")" -gt 2; }
wait_for 30 "the session polled" polled
# A capture sent, Klarna acting on it and holding the answer: the intent is `sent` when the upgrade comes, and the
# restart's drain gives up on it (Klarna answers none of the old daemon's call).
curl -sf -X POST "$SANDBOX/_sandbox/faults" -H 'Content-Type: application/json' \
    -d '{"route": "om.create_capture", "kind": "hold_answer", "hold_seconds": 600, "count": 1}' >/dev/null
read -r HPP_B KP_B <<<"$(new_session 0.3)"
check "a payment being captured accepted" test "$(track "$HPP_B" "$KP_B" immediate)" = 202
captured_at_klarna() { test "$(effects captured order_id "$(order_of "$KP_B")")" = 1; }
wait_for 30 "Klarna capturing its order, the answer held" captured_at_klarna
check "  and the previous release has not heard back (no captured outcome)" test "$(outcomes captured "$HPP_B")" = 0
OLD_PID=$(systemctl --user show klarna-reconciler.service -p MainPID --value)
CONFIG_BEFORE=$(md5sum "$CONFIG" | cut -d' ' -f1) CONFIG_MODE=$(stat -c '%a %U:%G' "$CONFIG")
CREDENTIALS_BEFORE=$(cat "$CREDSTORE"/* | md5sum | cut -d' ' -f1)

# --- the upgrade ------------------------------------------------------------------------------------------------
check "apt install the new package over the running one" apt-get install -y -qq -o Dpkg::Options::=--force-confold "$NEW_DEB"
check "dpkg says $NEW_VERSION is installed" test "$(dpkg-query -W -f '${Version}' klarna-reconciler)" = "$NEW_VERSION"
check "the package restarted nothing: the previous release still runs (pid $OLD_PID)" \
    test "$(systemctl --user show klarna-reconciler.service -p MainPID --value)" = "$OLD_PID"
check "the config is the administrator's, byte for byte, $CONFIG_MODE" \
    test "$(md5sum "$CONFIG" | cut -d' ' -f1) $(stat -c '%a %U:%G' "$CONFIG")" = "$CONFIG_BEFORE $CONFIG_MODE"
check "the new commands work with the previous release still running (show)" $BIN show "$HPP_A"
user_units "$CREDSTORE"
RESTART_BEGAN=$SECONDS
check "systemctl restart klarna-reconciler (docs/operations.md, Upgrade)" systemctl --user restart klarna-reconciler.service
echo "  (the restart took $((SECONDS - RESTART_BEGAN)) s: the old daemon drained)"
check "  the previous release stopped with its capture sent and unanswered, recorded as unclear" \
    bash -c "journalctl --no-pager -o cat | grep -q '^capture attempt 1 ended without a clear answer'"
NEW_PID=$(systemctl --user show klarna-reconciler.service -p MainPID --value)
check "the service runs the new binary ($NEW_VERSION)" \
    bash -c "test '$NEW_PID' != '$OLD_PID' && test \"\$(readlink /proc/$NEW_PID/exe)\" = $BIN && $BIN --version | grep -q '^$NEW_VERSION '"
SCHEMA=$($BIN check-config 2>/dev/null | grep '^store.check:')
check "the store is at the schema the new binary writes ($SCHEMA)" \
    bash -c "grep -Eq 'schema version ([0-9]+) \(this binary writes \1\)' <<<'$SCHEMA'"
check "the credentials are kept" test "$(cat "$CREDSTORE"/* | md5sum | cut -d' ' -f1)" = "$CREDENTIALS_BEFORE"

# --- every payment ends, once ---------------------------------------------------------------------------------
curl -sf -X POST "$SANDBOX/_sandbox/hpp-sessions/$HPP_A/status" -H 'Content-Type: application/json' -d '{"status": "COMPLETED"}' >/dev/null
wait_for 60 "the polled payment captured" is_one outcomes captured "$HPP_A"
# Its capture's answer was lost with the old daemon: the new one reads the order, or sends it again with its key.
wait_for 60 "the payment whose answer was held captured" is_one outcomes captured "$HPP_B"
check "the on_request order's capture asked for" $BIN capture "$ORDER_C"
wait_for 60 "the on_request order captured" is_one outcomes captured "$HPP_C"
check "the dispute answered: accept-loss" $BIN dispute accept-loss "$DISPUTE" --wait 30
wait_for 30 "the dispute lost (dispute_lost)" is_one outcomes dispute_lost "$DISPUTE"
for payment in "A $KP_A" "B $KP_B" "C $KP_C" "D $KP_D"; do
    read -r name kp <<<"$payment"
    order=$(order_of "$kp")
    check "payment $name: one order placed at Klarna, captured once" \
        test "$(effects order_placed kp_session_id "$kp") $(effects captured order_id "$order")" = "1 1"
done
for payment in "A $HPP_A" "B $HPP_B" "C $HPP_C" "D $HPP_D"; do
    read -r name hpp <<<"$payment"
    check "payment $name: one captured outcome in the outbox" test "$(outcomes captured "$hpp")" = 1
done
check "no create-order met another for the same token" \
    test "$(curl -sf "$SANDBOX/_sandbox/create-orders" | python3 -c 'import json,sys; print(json.load(sys.stdin)["overlapping"])')" = 0
check "accept-loss reached Klarna once" test "$(requests disputes.accept_loss)" = 1
check "the new daemon is active and was never restarted by systemd" \
    test "$(systemctl --user show klarna-reconciler.service -p ActiveState --value) $(systemctl --user show klarna-reconciler.service -p NRestarts --value)" = "active 0"
[ "$FAILURES" -gt 0 ] && journalctl --no-pager -n 60 -o cat | sed 's/^/      journal: /'
systemctl --user stop klarna-reconciler.service klarna-reconciler.socket klarna-reconciler-control.socket
exit "$FAILURES"
