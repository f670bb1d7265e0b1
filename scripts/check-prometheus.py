#!/usr/bin/env python3
"""Check the Prometheus alerting rules and the Grafana dashboard against a daemon's /metrics.

usage: scripts/check-prometheus.py [--fresh] [--promtool PATH] EXPOSITION

EXPOSITION is the text of the daemon's /metrics (a file, or - for stdin), e.g.
    curl -s http://127.0.0.1:9464/metrics > /tmp/metrics.txt
    curl -s --unix-socket /run/klarna-reconciler/ingest.sock http://localhost/metrics > /tmp/metrics.txt

It checks, and prints what it checked:
  1. `promtool check rules` on etc/prometheus/klarna-reconciler-rules.yml, and `promtool test rules` on the unit
     tests beside it (etc/prometheus/klarna-reconciler-rules.test.yml);
  2. `promtool check metrics` on the exposition (HELP text, naming);
  3. every metric name in the rules' `expr`s and in the dashboard's queries (targets and template variables) is a
     family of the exposition (a histogram's name with _bucket/_sum/_count, a counter's name as exposed, with
     _total), every name is in the daemon's catalogue (Sources/ReconcilerCore/Operations/MetricName.swift), and every
     label a selector matches on (`name{label=...}`) is a label of that family's samples;
  4. every dashboard query parses as PromQL (Grafana's $__rate_interval, $__interval, $__range and $instance replaced).

Counters and histograms appear on /metrics only once something was counted, and the settlement gauges only after the
first settlement sync (`settlements.enabled`). Strict by default: a name missing from the exposition is a problem.
With --fresh (a daemon that has just started and done nothing), a missing name that the catalogue says is counted
on an event or set by a settlement sync is listed as NOT CHECKED instead, every one of them by name; anything else
missing is still a problem.

Exit 0 when everything passed, 1 with every problem listed, 2 on usage errors.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
RULES = os.path.join(REPO, "etc", "prometheus", "klarna-reconciler-rules.yml")
RULE_TESTS = os.path.join(REPO, "etc", "prometheus", "klarna-reconciler-rules.test.yml")
DASHBOARD = os.path.join(REPO, "etc", "grafana", "klarna-reconciler-dashboard.json")
CATALOGUE = os.path.join(REPO, "Sources", "ReconcilerCore", "Operations", "MetricName.swift")

METRIC = re.compile(r"(?<![A-Za-z0-9_:])klarna_reconciler_[A-Za-z0-9_:]*[A-Za-z0-9]")
SELECTOR = re.compile(r"(?<![A-Za-z0-9_:])(klarna_reconciler_[A-Za-z0-9_:]*[A-Za-z0-9])\s*\{([^}]*)\}")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Labels Prometheus adds to every series (the target's); never on /metrics.
TARGET_LABELS = {"job", "instance"}
# Grafana's variables, as promtool may parse them.
GRAFANA_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "instance": ".*"}


class Report:
    def __init__(self):
        self.problems = []
        self.unchecked = []

    def section(self, title):
        print(f"\n== {title}")

    def ok(self, text):
        print(f"  ok   {text}")

    def note(self, text):
        print(f"  note {text}")

    def problem(self, text):
        print(f"  FAIL {text}")
        self.problems.append(text)


# --- reading the inputs -------------------------------------------------------------------------------------------

def rule_exprs(path):
    """(where, expr) for every `expr:` of a Prometheus rules file: plain, quoted, or a block scalar (| or >).

    A reader for the part of YAML rule files use, so that the script needs nothing but Python."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = []
    name = None
    key_line = re.compile(r"^(\s*)(?:-\s+)?(alert|record|expr)\s*:\s?(.*)$")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = key_line.match(line)
        if not m:
            i += 1
            continue
        indent = len(line) - len(line.lstrip(" -")) if m.group(0).lstrip().startswith("-") else len(m.group(1))
        key, value = m.group(2), m.group(3).strip()
        if key in ("alert", "record"):
            name = value.strip("'\"")
            i += 1
            continue
        i += 1
        if value[:1] in ("|", ">"):
            body = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip(" ")) > indent):
                body.append(lines[i])
                i += 1
            strip = min((len(l) - len(l.lstrip(" ")) for l in body if l.strip()), default=0)
            text = "\n".join(l[strip:] for l in body).strip()
        else:
            text = value
            while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip(" ")) > indent \
                    and not lines[i].lstrip().startswith("#"):
                text += " " + lines[i].strip()
                i += 1
            if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
                text = text[1:-1].replace("''", "'") if text[0] == "'" else json.loads(text)
        found.append((f"rule {name}", text))
    return found


def dashboard_queries(path):
    """(where, query, is_promql) for every query of a Grafana dashboard: panel targets (rows' panels too) and
    template variables (label_values(...) is Grafana's, not PromQL)."""
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    found = []

    def panels(items):
        for panel in items or []:
            yield panel
            yield from panels(panel.get("panels"))

    for panel in panels(dashboard.get("panels")):
        for target in panel.get("targets") or []:
            expr = target.get("expr")
            if isinstance(expr, str) and expr.strip():
                found.append((f"panel \"{panel.get('title')}\" {target.get('refId', '?')}", expr, True))
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable.get("type") == "query" and isinstance(query, str) and query.strip():
            promql = not re.match(r"^\s*(label_values|label_names|metrics|query_result)\s*\(", query)
            found.append((f"variable ${variable.get('name')}", query, promql))
    return dashboard, found


def exposition(text):
    """families: name → TYPE; samples: sample name → [label dicts]."""
    families, samples = {}, {}
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                families[parts[2]] = parts[3].strip()
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError(f"line {number} is not a sample: {line[:120]}")
        samples.setdefault(m.group(1), []).append(dict(LABEL.findall(m.group(3) or "")))
    return families, samples


def catalogue(path):
    """name → when it appears ('on_event', 'after_settlement_sync', 'at_scrape'), from MetricName.swift's sections."""
    names = {}
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return names
    section = ""
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("//") and not stripped.startswith("///"):
            section = stripped
        m = re.match(r'case\s+\w+\s*=\s*"(klarna_reconciler_\w+)"', stripped)
        if m:
            if "Counted" in section:
                names[m.group(1)] = "on_event"
            elif "settlement sync" in section:
                names[m.group(1)] = "after_settlement_sync"
            else:
                names[m.group(1)] = "at_scrape"
    return names


# --- the checks ---------------------------------------------------------------------------------------------------

def run(command, stdin=None):
    """Exit status and output (stdout then stderr, blank lines dropped)."""
    result = subprocess.run(command, input=stdin, capture_output=True, text=True)
    lines = (result.stdout + "\n" + result.stderr).split("\n")
    return result.returncode, "\n".join(line.rstrip() for line in lines if line.strip())


def family_of(name, families, samples):
    """(family, type, sample name) as the exposition shows `name`, or None."""
    if name in families:
        return name, families[name], name
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)]
        if name.endswith(suffix) and families.get(base) in ("histogram", "summary"):
            return base, families[base], name
    if name.endswith("_total") and families.get(name[:-6]) == "counter":
        return name[:-6], "counter", name
    if name in samples:
        return name, "untyped", name
    return None


def catalogue_name(name, known):
    if name in known:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in known:
            return name[: -len(suffix)]
    return None


def check_names(report, uses, families, samples, known, fresh):
    report.section("metric names used in the rules and the dashboard")
    if not known:
        report.note(f"the catalogue {os.path.relpath(CATALOGUE, REPO)} gave no names: names are checked against the exposition only")
    by_name = {}
    for where, expr in uses:
        for name in METRIC.findall(expr):
            by_name.setdefault(name, []).append(where)
    for name in sorted(by_name):
        places = list(dict.fromkeys(by_name[name]))
        summary = f"{name} ({len(places)} use{'s' if len(places) > 1 else ''}: {places[0]}{', …' if len(places) > 1 else ''})"
        in_catalogue = catalogue_name(name, known)
        if known and not in_catalogue:
            report.problem(f"{name} is not in {os.path.basename(CATALOGUE)}: used by {', '.join(places)}")
            continue
        found = family_of(name, families, samples)
        if found:
            family, kind, sample_name = found
            if kind in ("histogram", "summary") and name == family:
                report.problem(f"{name} is a {kind}: query {family}_bucket, _sum or _count ({', '.join(places)})")
            elif not samples.get(sample_name):
                report.problem(f"{name}: family {family} ({kind}) has no samples ({', '.join(places)})")
            else:
                report.ok(f"{summary}: {kind} {family}, {len(samples[sample_name])} series")
            continue
        when = known.get(in_catalogue) if in_catalogue else None
        if fresh and when in ("on_event", "after_settlement_sync"):
            why = "counted on its first event" if when == "on_event" else "set by the first settlement sync"
            text = f"{name}: not in the exposition ({why}): used by {', '.join(places)}"
            print(f"  NOT CHECKED {text}")
            report.unchecked.append(text)
        else:
            report.problem(f"{name} is not in the exposition: used by {', '.join(places)}"
                           + (f" (the catalogue says: {when.replace('_', ' ')})" if when else ""))
    return by_name


def check_labels(report, uses, families, samples):
    report.section("labels matched on in selectors")
    checked = 0
    noted = set()
    for where, expr in uses:
        for name, body in SELECTOR.findall(expr):
            found = family_of(name, families, samples)
            if not found or not samples.get(found[2]):
                continue
            series = samples[found[2]]
            present = set().union(*(s.keys() for s in series))
            for label, op, value in MATCHER.findall(body):
                if label in TARGET_LABELS or label == "__name__":
                    continue
                checked += 1
                if label not in present:
                    report.problem(f"{where}: {name} has no label {label!r} (its labels: {', '.join(sorted(present)) or 'none'})")
                    continue
                # Values: only a note, since a label value appears once it was counted.
                wanted = [value] if op in ("=", "!=") else (value.split("|") if re.fullmatch(r"[A-Za-z0-9_.+]+(\|[A-Za-z0-9_.+]+)*", value) else [])
                seen = {s.get(label) for s in series}
                missing = [v for v in wanted if v not in seen]
                if missing and (where, name, label, value) not in noted:
                    noted.add((where, name, label, value))
                    report.note(f"{where}: {name}{{{label}{op}…}}: {', '.join(missing)} not seen in this exposition (not counted yet?)")
    report.ok(f"{checked} label matchers checked against the exposition's series")


def check_dashboard_promql(report, promtool, queries):
    report.section("dashboard queries parse as PromQL (promtool check rules on a temporary rules file)")
    rules = []
    for index, (where, query, promql) in enumerate(queries):
        if not promql:
            report.note(f"{where}: {query} is a Grafana template query, not PromQL: only its metric names are checked")
            continue
        expr = query
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace("${" + variable + "}", value).replace("$" + variable, value)
        unknown = re.findall(r"\$\{?[A-Za-z_]\w*", expr)
        if unknown:
            report.problem(f"{where}: unknown Grafana variable {', '.join(sorted(set(unknown)))}")
            continue
        rules.append((where, f"dashboard:query_{index:04d}", expr))
    if not promtool:
        report.problem("promtool not found: dashboard queries not parsed")
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yml", prefix="dashboard-queries-", delete=False) as f:
        f.write("groups:\n  - name: dashboard\n    rules:\n")
        for where, record, expr in rules:
            f.write(f"      - record: {record}\n        expr: {json.dumps(expr)}\n")
        path = f.name
    try:
        status, output = run([promtool, "check", "rules", path])
    finally:
        os.unlink(path)
    if status == 0:
        report.ok(f"{len(rules)} dashboard queries parse")
    else:
        for where, record, expr in rules:
            output = output.replace(record, f"{record} ({where})")
        report.problem(f"dashboard queries do not parse:\n{output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("exposition", help="the text of the daemon's /metrics (a file, or - for stdin)")
    parser.add_argument("--fresh", action="store_true",
                        help="the exposition is a fresh daemon's: list names absent until their first event as NOT CHECKED instead of failing")
    parser.add_argument("--promtool", default=os.environ.get("PROMTOOL") or shutil.which("promtool"),
                        help="promtool to run (default: $PROMTOOL, else promtool on PATH)")
    args = parser.parse_args()

    report = Report()
    try:
        text = sys.stdin.read() if args.exposition == "-" else open(args.exposition, encoding="utf-8").read()
    except OSError as error:
        print(f"check-prometheus: cannot read {args.exposition}: {error.strerror}", file=sys.stderr)
        return 2

    report.section("inputs")
    print(f"  rules      {RULES}")
    print(f"  rule tests {RULE_TESTS}")
    print(f"  dashboard  {DASHBOARD}")
    print(f"  catalogue  {CATALOGUE}")
    print(f"  exposition {args.exposition} ({len(text.splitlines())} lines)")
    promtool = args.promtool if args.promtool and os.access(args.promtool, os.X_OK) else None
    if promtool:
        status, output = run([promtool, "--version"])
        print(f"  promtool   {promtool}: {output.splitlines()[0] if output else '?'}")
    else:
        report.problem("promtool not found (Debian: apt-get install prometheus; or --promtool PATH): steps 1, 2 and 4 not run")

    # 1. The rules and their unit tests.
    report.section("promtool check rules / test rules")
    if promtool:
        status, output = run([promtool, "check", "rules", RULES])
        (report.ok if status == 0 else report.problem)(f"promtool check rules {os.path.relpath(RULES, REPO)}: " + " ".join(output.split()))
        if os.path.exists(RULE_TESTS):
            status, output = run([promtool, "test", "rules", RULE_TESTS])
            if status == 0:
                report.ok(f"promtool test rules {os.path.relpath(RULE_TESTS, REPO)}: " + " ".join(output.split()))
            else:
                report.problem(f"promtool test rules {os.path.relpath(RULE_TESTS, REPO)}:\n{output}")
        else:
            report.note(f"no unit tests at {RULE_TESTS}")

    # 2. The exposition itself.
    report.section("promtool check metrics (the exposition on stdin)")
    if promtool:
        status, output = run([promtool, "check", "metrics"], stdin=text)
        if status == 0:
            report.ok("promtool check metrics: no problems" + (f" ({output})" if output else ""))
        else:
            report.problem(f"promtool check metrics (exit {status}):\n" + "\n".join("    " + l for l in output.splitlines()))

    try:
        families, samples = exposition(text)
    except ValueError as error:
        report.problem(f"the exposition cannot be read: {error}")
        families, samples = {}, {}
    print(f"  {len(families)} families, {sum(len(v) for v in samples.values())} samples in the exposition")

    # 3. Names and labels.
    uses = rule_exprs(RULES)
    if not uses:
        report.problem(f"no expr found in {RULES}")
    try:
        dashboard, queries = dashboard_queries(DASHBOARD)
    except (OSError, ValueError) as error:
        report.problem(f"the dashboard cannot be read: {error}")
        dashboard, queries = {}, []
    if dashboard:
        report.section("dashboard")
        schema = dashboard.get("schemaVersion")
        report.ok(f"schemaVersion {schema}, {len(queries)} queries") if isinstance(schema, int) else report.problem("dashboard has no schemaVersion")
        variables = [v.get("name") for v in (dashboard.get("templating") or {}).get("list") or []]
        if "datasource" not in variables and "__inputs" not in dashboard:
            report.problem("dashboard has neither a datasource variable nor __inputs")
    print(f"\n  {len(uses)} rule expressions, {len(queries)} dashboard queries")
    all_uses = uses + [(where, query) for where, query, _ in queries]
    known = catalogue(CATALOGUE)
    check_names(report, all_uses, families, samples, known, args.fresh)
    check_labels(report, all_uses, families, samples)

    # 4. Dashboard PromQL.
    check_dashboard_promql(report, promtool, queries)

    print()
    if report.unchecked:
        print(f"NOT CHECKED ({len(report.unchecked)}: absent from a fresh daemon's /metrics until their first event; "
              f"cause them and run without --fresh to check them):")
        for text in report.unchecked:
            print(f"  - {text}")
    if report.problems:
        print(f"FAILED: {len(report.problems)} problems:")
        for text in report.problems:
            print("  - " + text.replace("\n", "\n    "))
        return 1
    print("OK: rules, rule tests, exposition, metric names, labels and dashboard queries checked"
          + (f" ({len(report.unchecked)} names NOT CHECKED, listed above)" if report.unchecked else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
