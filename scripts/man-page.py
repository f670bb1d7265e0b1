#!/usr/bin/env python3
"""Writes klarna-reconciler(8) in man(7) roff from the argument parser's own description of the commands
(`klarna-reconciler --experimental-dump-help`), so the page cannot fall behind the binary.
Usage: scripts/man-page.py BINARY DATE > klarna-reconciler.8"""
import json
import subprocess
import sys

binary, date = sys.argv[1], sys.argv[2]
tool = json.loads(subprocess.run([binary, "--experimental-dump-help"], check=True, capture_output=True, text=True).stdout)["command"]
version = subprocess.run([binary, "--version"], check=True, capture_output=True, text=True).stdout.split()[0]


def roff(text):
    text = (text or "").replace("\\", "\\e")
    return "\n".join(("\\&" + line) if line[:1] in ".'" else line for line in text.split("\n"))


def flag(argument):
    names = [("--" if n["kind"] == "long" else "-") + n["name"] for n in argument.get("names", [])]
    if argument["kind"] == "positional":
        return "\\fI" + argument["valueName"].upper() + "\\fR"
    text = ", ".join("\\fB" + roff(n) + "\\fR" for n in names)
    if argument["kind"] == "option":
        text += " \\fI" + argument["valueName"] + "\\fR"
    return text


out = [
    f'.TH KLARNA-RECONCILER 8 "{date}" "klarna-reconciler {version}" "System Administration"',
    ".SH NAME",
    "klarna-reconciler \\- " + roff(tool["abstract"][:1].lower() + tool["abstract"].split(":")[0].rstrip(".")[1:]),
    ".SH SYNOPSIS",
    ".B klarna-reconciler",
    ".I command",
    ".RI [ options ]",
    ".SH DESCRIPTION",
    roff(tool["abstract"]),
    ".PP",
    "The daemon (\\fBrun\\fR) is started by systemd from \\fIklarna-reconciler.service\\fR; the other commands talk to",
    "its store and its socket. Secrets come only from credentials files (\\fB$CREDENTIALS_DIRECTORY\\fR or the",
    "\\fB*_file\\fR keys of the configuration), never from the command line.",
    ".SH COMMANDS",
]
for command in tool.get("subcommands", []):
    if not command.get("shouldDisplay", True) or command["commandName"] == "help":
        continue
    out += [".SS " + command["commandName"], roff(command.get("abstract", ""))]
    if command.get("discussion"):
        out += [".PP", roff(command["discussion"])]
    for argument in command.get("arguments", []):
        if not argument.get("shouldDisplay", True) or argument.get("preferredName", {}).get("name") in ("help", "version"):
            continue
        text = roff(argument.get("abstract", ""))
        if argument.get("defaultValue"):
            text += " (default: " + roff(argument["defaultValue"]) + ")"
        out += [".TP", flag(argument), text]
out += [
    ".SH FILES",
    ".TP", "\\fI/etc/klarna-reconciler/config.yaml\\fR", "The configuration; every key is described in the example.",
    ".TP", "\\fI/etc/credstore/klarna-reconciler.*\\fR", "Credentials the unit loads: klarna-password, callback-key, webhook-signing-keys.",
    ".TP", "\\fI/var/lib/klarna-reconciler/state.sqlite\\fR", "The store (SQLite, WAL).",
    ".TP", "\\fI/run/klarna-reconciler.sock\\fR", "The ingest socket (HTTP/1.1), held by \\fIklarna-reconciler.socket\\fR; group klarna-ingest.",
    ".TP", "\\fI/run/klarna-reconciler-control.sock\\fR", "The operators' socket (status, list, show, hold, retry, ...), held by \\fIklarna-reconciler-control.socket\\fR; group klarna-operators.",
    ".TP", "\\fI/var/spool/klarna-reconciler/\\fR", "The spool forwarders write into (tmp/, then rename into new/); group klarna-ingest.",
    ".TP", "\\fI/var/spool/klarna-reconciler-outbox/\\fR", "One JSON file per outcome in new/; consumers (group klarna-outbox) acknowledge by renaming into cur/.",
    ".SH EXIT STATUS",
    "0 on success; 1 on failure or a refused repair command; 75 (EX_TEMPFAIL) when a repair command was recorded but the",
    "daemon did not answer in time; 77 (EX_NOPERM) when the operators' socket may not be used; 78 (EX_CONFIG) for an",
    "invalid configuration or missing credentials. The reason is on standard error.",
    ".SH SEE ALSO",
    ".BR systemctl (1),",
    ".BR journalctl (1),",
    ".BR systemd.service (5),",
    ".BR sysusers.d (5),",
    ".BR tmpfiles.d (5).",
    ".PP",
    "In \\fI/usr/share/doc/klarna-reconciler/\\fR: the README (quick start), and under docs/ the operations guide",
    "(journalctl cheat-sheet, on call, troubleshooting, repair), the configuration reference, the cluster, settlements",
    "and architecture guides.",
]
print("\n".join(out))
