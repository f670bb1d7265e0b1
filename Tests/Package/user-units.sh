# The installed units for a real systemd user manager (units.sh, upgrade.sh), changed only where a user manager
# differs from the system manager (as in the system tests, Tests/System/run.sh, which explains each): no user
# switching, three protections a user manager cannot apply here, and the credentials from the test's folder. The
# config, the spool, the outbox and both sockets are the installed ones, with the modes and groups sysusers.d and
# tmpfiles.d gave them; only their owner changes, from klarna-reconciler to root, because here root plays the daemon
# (with no capabilities, CapabilityBoundingSet=, root is just another user to a directory it does not own).
# Sourced after harness.sh (UNITS). Usage: user_units CREDSTORE_DIRECTORY (run again after an upgrade).
user_units() {
    local spool=/var/spool/klarna-reconciler outbox=/var/spool/klarna-reconciler-outbox
    chown root $spool $spool/tmp $spool/new $outbox $outbox/tmp $outbox/new $outbox/cur
    sed -e "s#/etc/credstore/klarna-reconciler\.#$1/#g" \
        -e '/^User=/d' -e '/^Group=/d' -e '/^SupplementaryGroups=/d' \
        -e '/^ProtectHome=/d' -e '/^ProtectKernelTunables=/d' -e '/^ProtectKernelLogs=/d' \
        /lib/systemd/system/klarna-reconciler.service >"$UNITS/klarna-reconciler.service"
    cp /lib/systemd/system/klarna-reconciler.socket /lib/systemd/system/klarna-reconciler-control.socket "$UNITS/"
    systemctl --user daemon-reload
}
