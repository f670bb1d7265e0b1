#ifndef CSYSTEMD_SHIM_H
#define CSYSTEMD_SHIM_H

#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

// sd_notifyf and the sd_journal_send/sd_journal_print macros are variadic and cannot be imported into Swift.
// Callers format in Swift and use sd_notify / sd_journal_sendv, which are plain functions.

#endif
