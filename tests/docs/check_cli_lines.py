#!/usr/bin/env python3
"""Docs that cannot drift: every `fca ...` command line of the user and
operator guides, from their code blocks and inline code, goes through the
real CLI's parser (`fca --dry_parse`, which contacts no server), so an
unknown command or flag, or a flag the command does not take, fails here.
Model names given to --models/--model must be bundled (models/) unless they
are placeholders.

usage: check_cli_lines.py SOURCE_DIR FCA_BINARY
"""
import os
import re
import shlex
import subprocess
import sys

GUIDES = ["docs/user-guide.md", "docs/operator-guide.md"]

# A placeholder the reader replaces: N, ID, NAME, KEY, CA.pem's stem...
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
# Where an fca command ends in shell: another command, a redirect, a comment.
TERMINATORS = re.compile(r"\s(?:;|&&|\|\||\||<|>|2>|#)|;|\)|$")


def code_texts(markdown):
    """The doc's code: fenced and indented blocks line by line (continued
    lines joined), and inline spans (which may wrap) with whitespace folded."""
    texts = []
    prose = []
    fenced = False
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
            i += 1
            continue
        indented = line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|"))
        if fenced or (indented and re.match(r"\s*(\S+=\$\(|for |\$ )?fca\b", line)):
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i].strip()
            texts.append(line.strip())
        else:
            prose.append(line)
        i += 1
    for span in re.findall(r"`([^`]+)`", "\n".join(prose)):
        texts.append(" ".join(span.split()))
    return texts


def commands(text):
    """Each `fca ...` command in a piece of code, up to where it ends."""
    out = []
    for m in re.finditer(r"(?:^|(?<=[\s;&|(]))fca(?=\s|$)", text):
        rest = text[m.end():]
        end = TERMINATORS.search(rest)
        out.append(rest[: end.start()].strip())
    return out


def arguments(command):
    """The command's words and flags; optional [--flag] brackets opened."""
    command = command.replace("[", " ").replace("]", " ")
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def check(args, fca, models):
    """None when `fca args` parses, else why not."""
    words = [a for a in args if not a.startswith("-")]
    if words and PLACEHOLDER.match(words[0]):
        return None  # "fca COMMAND --help": the form, not a command
    for a in args:
        m = re.match(r"--models?=(.*)", a)
        if not m:
            continue
        for name in m.group(1).split(","):
            if name and not PLACEHOLDER.match(name) and name not in models:
                return "--model(s) names '%s', which is not a bundled model (models/)" % name
    # Global flags alone (`fca --tls`): checked as given to `help`, which
    # takes global flags only.
    if not words:
        args = args + ["help"]
    run = subprocess.run([fca, "--dry_parse"] + args, capture_output=True, text=True,
                         timeout=30)
    if run.returncode == 0:
        return None
    error = run.stderr.strip()
    # A placeholder value (--limit=N) cannot parse as the flag's type; the
    # flag itself was found.
    bad = re.search(r"bad value '([^']*)' for --", error)
    if bad and PLACEHOLDER.match(bad.group(1)):
        return None
    return "exit %d: %s" % (run.returncode, error)


# The check can fail: lines it must refuse (the drift it was written for
# among them) and lines it must accept.
MUST_REFUSE = [
    "jobs watch 1",  # operator-guide.md cited it; the command is `fca watch`
    "models --nosuch",
    "models --window_hash=H",  # export's flag
    "audit --timing_repeats=many",
    "audit --models=fg-s1",  # user-guide.md used it; the model is featuregate-s1
]
MUST_ACCEPT = ["watch 1 --after_seq=10", "--tls", "webhooks deliveries ID --limit=N"]


def self_check(fca, models):
    failures = []
    for line in MUST_REFUSE:
        if not check(arguments(line), fca, models):
            failures.append("self-check: fca %s was accepted" % line)
    for line in MUST_ACCEPT:
        why = check(arguments(line), fca, models)
        if why:
            failures.append("self-check: fca %s was refused: %s" % (line, why))
    return failures


def main():
    source, fca = sys.argv[1], sys.argv[2]
    models = set(os.listdir(os.path.join(source, "models")))
    checked = 0
    failures = self_check(fca, models)
    for guide in GUIDES:
        with open(os.path.join(source, guide), encoding="utf-8") as f:
            texts = code_texts(f.read())
        for text in texts:
            for command in commands(text):
                if not command:
                    continue  # `fca`: the program named, no command line
                checked += 1
                why = check(arguments(command), fca, models)
                if why:
                    failures.append("%s: fca %s\n    %s" % (guide, command, why))
    print("checked %d fca command lines" % checked)
    for f in failures:
        print("FAIL " + f)
    # A guide without commands would pass trivially: the extraction broke.
    if checked < 40:
        print("FAIL only %d command lines found; the extraction is broken" % checked)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
