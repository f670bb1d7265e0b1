# Part of the package tests (sourced by units.sh, with the installed daemon running on the installed sockets, spool,
# outbox and config): real users, one per group the package creates, each doing its job and failing at the others'.
#   kr-forwarder  klarna-ingest     delivers: the ingest socket, the spool
#   kr-consumer   klarna-outbox     reads and acknowledges outcomes
#   kr-operator   klarna-operators  status, show, hold, release (through the operators' socket)
#   kr-nobody     none of them
# (The daemon itself runs as root here: a user manager cannot switch users. The modes and groups under test are the
# ones the package's sysusers.d and tmpfiles.d made, and the sockets' from the shipped socket units.)
echo "   permissions, with real users"
TEST_USERS="kr-forwarder:klarna-ingest kr-consumer:klarna-outbox kr-operator:klarna-operators kr-nobody:"
for entry in $TEST_USERS; do
    user=${entry%%:*} group=${entry#*:}
    userdel "$user" >/dev/null 2>&1 || true
    useradd --no-create-home --user-group --shell /usr/sbin/nologin ${group:+--groups "$group"} "$user"
done
trap 'for entry in $TEST_USERS; do userdel "${entry%%:*}" >/dev/null 2>&1; done; world_down' EXIT
as() { local user=$1; shift; setpriv --reuid="$user" --regid="$user" --init-groups env HOME=/ "$@"; }
can() { local what=$1; shift; check "$what" "$@"; }
cannot() { local what=$1; shift; if "$@" >/dev/null 2>&1; then fail "$what (it could)"; else echo "  ok: $what"; fi; }
# deliver USER [HPP KP]: a track request over the ingest socket, answered 202.
deliver() { as "$1" curl -sS --max-time 10 --unix-socket /run/klarna-reconciler.sock -o /dev/null -w '%{http_code}' \
    -H 'Content-Type: application/json' -X POST http://localhost/v1/sessions \
    -d "{\"hpp_session_id\": \"${2:-perm-$1}\", \"kp_session_id\": \"${3:-kp-perm-$1}\", \"merchant_reference\": \"perm-$1\"}" | grep -qx 202; }
spool() { as "$1" sh -c "printf '{\"hpp_session_id\": \"spool-$1\", \"kp_session_id\": \"kp-spool-$1\"}' >$SPOOL/tmp/perm-$1.json && mv $SPOOL/tmp/perm-$1.json $SPOOL/new/perm-$1.json"; }
control() { as "$1" curl -sS --max-time 10 --unix-socket /run/klarna-reconciler-control.sock -o /dev/null -w '%{http_code}' http://localhost/v1/status | grep -qx 200; }
OUTCOME=$(grep -l "$HPP" $OUTBOX/new/* | head -1 | xargs -r basename)
STORE=$(find "$W" /root -name state.sqlite 2>/dev/null | head -1)
check "the outbox has an outcome to consume ($OUTCOME) and the store is at $STORE" test -n "$OUTCOME" -a -n "$STORE"

# klarna-ingest: delivers, and nothing else.
# A payment the consumer never completes (it stays open, for the operator to hold), and a spool file naming a
# session Klarna does not know (it ends needs_attention at once, one more outcome for the consumer).
OPEN=$(curl -sS --max-time 10 http://127.0.0.1:$PORT/_sandbox/sessions -H 'Content-Type: application/json' -d '{}' \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["hpp_session_id"], d["kp_session_id"])')
read -r OPEN_HPP OPEN_KP <<<"$OPEN"
can "forwarder: delivers over the ingest socket (202)" deliver kr-forwarder "$OPEN_HPP" "$OPEN_KP"
can "forwarder: drops a file into the spool (tmp/, then new/)" spool kr-forwarder
spooled() { ls $OUTBOX/new | grep -q needs_attention; }
wait_for 20 "the spooled session's outcome" spooled && echo "  ok: the daemon took the forwarder's spool file (its session ended needs_attention)"
# Debian's nginx with the example site the package ships, unchanged, in front of the installed socket: delivers when
# its worker user is in klarna-ingest, gets 502 when it is not.
# through_nginx WORKER STATUS: nginx's answer to an OM notification is STATUS.
through_nginx() {
    local worker=$1 expected=$2 prefix="$W/nginx-$1" port=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768-60999): a port a client holds cannot collide
    mkdir -p "$prefix/logs" && chmod -R 0777 "$prefix"
    cat >"$prefix/nginx.conf" <<CONF
user $worker;
worker_processes 1;
error_log $prefix/logs/error.log;
pid $prefix/nginx.pid;
events { worker_connections 16; }
http {
    access_log off;
    client_body_temp_path $prefix/body;
    proxy_temp_path $prefix/proxy;
    include /usr/share/doc/klarna-reconciler/examples/nginx-klarna-reconciler-log-format.conf;
    server {
        listen 127.0.0.1:$port;
        include /usr/share/doc/klarna-reconciler/examples/nginx-klarna-reconciler.conf;
    }
}
CONF
    /usr/sbin/nginx -p "$prefix" -c "$prefix/nginx.conf" || return 1
    wait_for 10 "nginx" test -s "$prefix/nginx.pid"
    local code
    code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
        -X POST "http://127.0.0.1:$port/klarna/om-notification" -d '{"order_id": "perm-order", "event_type": "FRAUD_RISK_ACCEPTED"}')
    kill "$(cat "$prefix/nginx.pid")"
    echo "nginx as $worker answered $code"
    test "$code" = "$expected"
}
if [ -x /usr/sbin/nginx ]; then
    can "nginx with the shipped example site, its workers in klarna-ingest: 202" through_nginx kr-forwarder 202
    can "nginx whose workers are in no group: no delivery (502)" through_nginx kr-nobody 502
fi
cannot "forwarder: cannot list the outbox" as kr-forwarder ls $OUTBOX/new
cannot "forwarder: cannot read an outcome" as kr-forwarder cat "$OUTBOX/new/$OUTCOME"
cannot "forwarder: cannot use the operators' socket" control kr-forwarder
cannot "forwarder: cannot read the config" as kr-forwarder cat $CONFIG
cannot "forwarder: cannot read the store" as kr-forwarder cat "$STORE"

# klarna-outbox: reads and acknowledges outcomes (the README's consumer, as written), and nothing else.
CONSUMER=$(sed -n '/^# outbox consumer/,/^```$/p' /usr/share/doc/klarna-reconciler/README.md | sed '$d')
mkdir -p "$W/consumer" && chmod 0755 "$W/consumer"
printf '#!/bin/sh\ncat >>%s/consumer/handled\n' "$W" >"$W/consumer/handle-outcome" && chmod 0755 "$W/consumer/handle-outcome"
touch "$W/consumer/handled" && chown kr-consumer "$W/consumer/handled"
BEFORE=$(ls $OUTBOX/new | wc -l)
can "consumer: the README's consumer runs as kr-consumer" as kr-consumer env PATH="$W/consumer:$PATH" sh -c "$CONSUMER"
check "consumer: it handled every outcome ($BEFORE) and acknowledged them (new/ and cur/ empty)" \
    test "$(grep -c '"idempotency_key"' "$W/consumer/handled")" = "$BEFORE" -a -z "$(ls $OUTBOX/new $OUTBOX/cur | grep json)"
check "consumer: the captured payment's outcome was among them" grep -q "$HPP" "$W/consumer/handled"
cannot "consumer: cannot deliver over the ingest socket" deliver kr-consumer
cannot "consumer: cannot write into the spool" spool kr-consumer
cannot "consumer: cannot use the operators' socket" control kr-consumer
cannot "consumer: cannot read the config" as kr-consumer cat $CONFIG
cannot "consumer: cannot see into the outbox's tmp/" as kr-consumer ls $OUTBOX/tmp

# klarna-operators: status, show, hold and release through the daemon, and nothing else. The command line uses the
# socket unit's socket only while the service runs, which it tells by the service's RuntimeDirectory= in /run; a user
# manager puts that under $XDG_RUNTIME_DIR instead, so the test makes the system manager's one while the daemon runs.
mkdir -p /run/klarna-reconciler
can "operator: status" as kr-operator $BIN status
can "operator: show the captured payment" as kr-operator $BIN show "$HPP"
can "operator: hold a payment" as kr-operator $BIN hold perm-kr-forwarder
HELD=$(as kr-operator $BIN show perm-kr-forwarder 2>&1)
check "operator: the timeline says who held it, by uid and name" grep -q "held by uid $(id -u kr-operator) (kr-operator) via the command line" <<<"$HELD"
STATUS_OUT=$(as kr-operator $BIN status 2>&1)
check "operator: status counts it" grep -q 'held: *1' <<<"$STATUS_OUT"
can "operator: release it" as kr-operator $BIN release perm-kr-forwarder
cannot "operator: cannot read the store" as kr-operator cat "$STORE"
cannot "operator: cannot deliver over the ingest socket" deliver kr-operator
cannot "operator: cannot read an outcome" as kr-operator ls $OUTBOX/new
cannot "operator: cannot write into the spool" spool kr-operator
# With the service stopped (its sockets still listening), an operator's command must not start it again.
systemctl --user stop klarna-reconciler.service && rmdir /run/klarna-reconciler
cannot "operator: with the daemon stopped, status has nothing to read (the store is not theirs)" as kr-operator $BIN status
check "  and the stopped daemon stayed stopped" test "$(systemctl --user show klarna-reconciler.service -p ActiveState --value)" = inactive

# Nobody else: nothing at all.
cannot "nobody: cannot deliver" deliver kr-nobody
cannot "nobody: cannot use the spool" spool kr-nobody
cannot "nobody: cannot run status" as kr-nobody $BIN status
cannot "nobody: cannot read the config" as kr-nobody cat $CONFIG
cannot "nobody: cannot list the outbox" as kr-nobody ls $OUTBOX/new
