#!/usr/bin/env python3
"""Checks the documentation against the repository; exits 1 listing every problem, 0 when there is none.

Documents: README.md, BENCHMARKS.md, docs/*.md and etc/**/*.md. In each, outside fenced code blocks:
  - every relative link [text](path) or [text](path#anchor) (and reference definitions `[x]: path`) names a file or
    directory that exists, relative to the document; an anchor names a heading of the target (GitHub's slugs,
    duplicates numbered -1, -2, ...) or an explicit <a id|name="..."> there; #L10 or #L10-L20 on a non-Markdown file;
  - every inline-code span that starts with a repository folder (Sources/, Tests/, scripts/, systemd/, etc/, docs/,
    Benchmarks/, packaging/) names a file or directory that exists (patterns with * and placeholders are skipped).
  - no text, link or code span names a file outside this repository: `../` beyond the repository's root, or the design
    notes kept beside it (DESIGN.md, API-NOTES.md, SETTLEMENTS.md, DISPUTES.md, `notes/`); the contract is docs/design.md.
In Sources/, Tests/ and Benchmarks/: no line cites DESIGN.md, API-NOTES.md, SETTLEMENTS.md or DISPUTES.md (`DESIGN §…`,
`API-NOTES §…`) or a path under ../shared, files that live outside this repository.

Usage: scripts/check-docs.py (from any directory). Python 3 standard library only.
"""
import os
import re
import sys
import unicodedata
from urllib.parse import unquote

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
PATH_PREFIXES = ("Sources/", "Tests/", "scripts/", "systemd/", "etc/", "docs/", "Benchmarks/", "packaging/")
# A code span holding one of these is a pattern or a placeholder, not a path.
PLACEHOLDER = re.compile(r"[*…<>{}$?\[\]]|\.\.\.")
OUTSIDE_CITATION = re.compile(r"DESIGN §|API-NOTES §|DESIGN\.md|API-NOTES\.md|SETTLEMENTS\.md|DISPUTES\.md|\.\./shared\b")
# In a document: a path above the repository (../shared/...), or a design note that lives beside the repository.
OUTSIDE_MENTION = re.compile(r"\.\./shared\b|\.\./\.\./|\bDESIGN\.md|\bAPI-NOTES(\.md)?\b|\bSETTLEMENTS\.md|\bDISPUTES\.md|\bklarna/specs/")
SOURCE_TREES = ("Sources", "Tests", "Benchmarks")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*?(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")


def relative(path):
    return os.path.relpath(path, REPO)


def documents():
    found = [os.path.join(REPO, name) for name in ("README.md", "BENCHMARKS.md")]
    for folder in ("docs", "etc"):
        top = os.path.join(REPO, folder)
        for root, dirs, files in os.walk(top):
            dirs.sort()
            if folder == "docs" and root != top:
                continue
            found += [os.path.join(root, name) for name in sorted(files) if name.endswith(".md")]
    return [path for path in found if os.path.isfile(path)]


def prose_lines(text):
    """(line number, line) for every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) and not line.strip()[len(match.group(1)):].strip():
            fence = None


def without_code(line):
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading: its text, lower case, without punctuation, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)
    text = text.strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in "-_ " or category[0] in "LN" or category == "Mn":
            kept.append("-" if char == " " else char)
    return "".join(kept)


_anchors = {}


def anchors(path):
    if path not in _anchors:
        found, counts = set(), {}
        with open(path, encoding="utf-8") as handle:
            lines = list(prose_lines(handle.read()))
        previous = None
        for number, line in lines:
            text = None
            match = HEADING.match(line)
            if match:
                text = match.group(2)
            elif previous is not None and previous[0] == number - 1 and SETEXT.match(line) and previous[1].strip() \
                    and not HEADING.match(previous[1]) and not previous[1].lstrip().startswith(("-", "*", "+", "|", ">")):
                text = previous[1].strip()  # a setext heading: a paragraph line underlined with === or ---
            if text is not None:
                base = slug(text)
                count = counts.get(base, 0)
                counts[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            for anchor in HTML_ANCHOR.findall(line):
                found.add(anchor)
            previous = (number, line)
        _anchors[path] = found
    return _anchors[path]


def check_link(document, number, target, problems):
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
        return  # a URL (http:, https:, mailto:, file:, man:): not checked here
    path_part, _, anchor = target.partition("#")
    path_part = unquote(path_part)
    anchor = unquote(anchor)
    where = f"{relative(document)}:{number}"
    if path_part:
        resolved = os.path.normpath(os.path.join(os.path.dirname(document), path_part))
        if not os.path.exists(resolved):
            problems.append(f"{where}: link to {target}: {relative(resolved)} does not exist")
            return
        if not os.path.realpath(resolved).startswith(REPO + os.sep) and os.path.realpath(resolved) != REPO:
            problems.append(f"{where}: link to {target}: leaves the repository")
            return
    else:
        resolved = document
    if not anchor:
        return
    if resolved.endswith(".md") and os.path.isfile(resolved):
        if anchor not in anchors(resolved):
            problems.append(f"{where}: link to {target}: no heading #{anchor} in {relative(resolved)}")
    elif os.path.isfile(resolved) and LINE_ANCHOR.match(anchor):
        return
    else:
        problems.append(f"{where}: link to {target}: #{anchor} cannot be checked in {relative(resolved)} (not a Markdown file)")


def check_code_path(document, number, span, problems):
    text = span.strip()
    if not text.startswith(PATH_PREFIXES):
        return
    token = text.split()[0]
    if PLACEHOLDER.search(token):
        return
    token = re.sub(r"(:\d+(-\d+)?|#.*)$", "", token)  # file:line, file#anchor
    token = token.rstrip(".,;:")
    if not os.path.exists(os.path.join(REPO, token)):
        problems.append(f"{relative(document)}:{number}: `{text}`: {token} does not exist in the repository")


def check_document(document, problems):
    with open(document, encoding="utf-8") as handle:
        text = handle.read()
    links = paths = 0
    for number, line in prose_lines(text):
        mention = OUTSIDE_MENTION.search(line)
        if mention:
            problems.append(
                f"{relative(document)}:{number}: names \"{mention.group(0)}\", outside this repository: a clone has only its own documents "
                "(the product's contract is docs/design.md)")
        for match in CODE_SPAN.finditer(line):
            paths += 1
            check_code_path(document, number, match.group(2), problems)
        bare = without_code(line)
        for match in LINK.finditer(bare):
            links += 1
            check_link(document, number, match.group(2), problems)
        match = REFERENCE.match(bare)
        if match:
            links += 1
            check_link(document, number, match.group(1), problems)
    return links, paths


def check_sources(problems):
    count = 0
    for tree in SOURCE_TREES:
        for root, dirs, files in os.walk(os.path.join(REPO, tree)):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                try:
                    with open(path, encoding="utf-8") as handle:
                        lines = handle.read().split("\n")
                except (UnicodeDecodeError, OSError):
                    continue
                count += 1
                for number, line in enumerate(lines, 1):
                    match = OUTSIDE_CITATION.search(line)
                    if match:
                        before = line[:match.start()]
                        where = "a comment" if "//" in before or line.lstrip().startswith(("*", "/*", "#")) else "code"
                        problems.append(
                            f"{relative(path)}:{number}: {where} cites \"{match.group(0)}\", a file outside this repository: "
                            f"{line.strip()[:160]}")
    return count


def main():
    if len(sys.argv) > 1:
        help_asked = sys.argv[1:] in (["-h"], ["--help"])
        print(__doc__.strip(), file=sys.stdout if help_asked else sys.stderr)
        return 0 if help_asked else 64
    problems = []
    docs = documents()
    links = paths = 0
    for document in docs:
        found_links, found_paths = check_document(document, problems)
        links += found_links
        paths += found_paths
    sources = check_sources(problems)
    for problem in problems:
        print(problem)
    summary = f"{len(docs)} documents ({links} links, {paths} code spans), {sources} files under {', '.join(SOURCE_TREES)}"
    if problems:
        print(f"check-docs: {len(problems)} problem{'s' if len(problems) != 1 else ''} in {summary}", file=sys.stderr)
        return 1
    print(f"check-docs: ok: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
