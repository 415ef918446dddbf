#!/usr/bin/env python3
"""Fails when a file of Sources/ is over 600 lines or a function over 80 (CONTRIBUTING, "One
owner for each fact"): a long body is usually two things that want names. A function is a func,
an init, a computed property (`var name: Type {`) or a closure given a name (`let name = {`); its
lines run from its declaration to its closing brace; braces in string literals and comments are
skipped."""
import os
import re
import sys

FILE_LIMIT, FUNCTION_LIMIT = 600, 80
MODIFIERS = r"^\s*(?:@\w+\s+)*(?:(?:public|package|internal|private|fileprivate|static|class|final|override|mutating|nonisolated|convenience|required|lazy|@MainActor)(?:\(set\))?\s+)*"
DECLARATION = re.compile(
    MODIFIERS
    + r"(?:(?:func\s+\S+|init[?!]?)\s*[(<]"  # a function or an initializer
    + r"|var\s+\w+\s*:[^=]*\{\s*$"  # a computed property
    + r"|(?:let|var)\s+\w+(?:\s*:[^=]*)?\s*=\s*\{)"  # a closure given a name
)


def code(line):
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    return line.split("//")[0]


def function_lengths(lines):
    for start, line in enumerate(lines):
        if not DECLARATION.match(line):
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            for character in code(lines[end]):
                if character == "{":
                    depth, opened = depth + 1, True
                elif character == "}":
                    depth -= 1
            if opened and depth <= 0:
                yield start + 1, end - start + 1, line.strip()
                break
            if not opened and end > start and lines[end].strip() == "":
                break  # a declaration without a body (a protocol requirement)


problems = []
for root, _, files in os.walk("Sources"):
    for name in sorted(files):
        if not name.endswith(".swift"):
            continue
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as source:
            lines = source.read().split("\n")
        if len(lines) - 1 > FILE_LIMIT:
            problems.append(f"{path}: {len(lines) - 1} lines (at most {FILE_LIMIT})")
        for line, length, declaration in function_lengths(lines):
            if length > FUNCTION_LIMIT:
                problems.append(f"{path}:{line}: a function of {length} lines (at most {FUNCTION_LIMIT}): {declaration[:80]}")
for problem in problems:
    print(problem, file=sys.stderr)
sys.exit(1 if problems else 0)
