#!/usr/bin/env python3
"""Lists public declarations without a /// comment in the library targets: every public symbol
of Ferry, FerryDiagnostics, FerryProtocol, FerryRules, FerryServer and FerryTesting, the cases of public enums included, is
documented (.ci/run fails otherwise)."""
import pathlib, re, sys

DECLARATION = re.compile(r'^\s*(?:@[\w(). ,:"]+\s+)*(?:public|open)\s+(?!import)(?:(?:static|final|nonisolated|override|mutating|private\(set\)|indirect|convenience)\s+)*(?:func|init|var|let|case|struct|class|enum|protocol|actor|typealias|subscript)\b')
PUBLIC_ENUM = re.compile(r'^(\s*)(?:@[\w(). ,:"]+\s+)*public\s+(?:indirect\s+)?enum\b')
ENUM_CASE = re.compile(r'^\s*(?:indirect\s+)?case\s+`?\w.*[^:]$')
PUBLIC_PROTOCOL = re.compile(r'^(\s*)(?:@[\w(). ,:"]+\s+)*public\s+protocol\b')
REQUIREMENT = re.compile(r'^\s*(?:@[\w(). ,:"]+\s+)*(?:(?:static|mutating|nonisolated)\s+)*(?:func|init|var|associatedtype|subscript)\b')


def documented(lines, number):
    previous = number - 1
    while previous >= 0 and (lines[previous].strip().startswith("@") or lines[previous].strip().startswith("// ")):
        previous -= 1
    return previous >= 0 and lines[previous].strip().startswith("///")


missing = []
for module in ["Ferry", "FerryDiagnostics", "FerryProtocol", "FerryRules", "FerryServer", "FerryTesting"]:
    for path in sorted(pathlib.Path("Sources", module).rglob("*.swift")):
        lines = path.read_text().splitlines()
        case_indent = None  # the indentation of the cases of the public enum being read
        member_indent = None  # the indentation of the requirements of the public protocol being read
        for number, line in enumerate(lines):
            indent = len(line) - len(line.lstrip())
            enum, protocol = PUBLIC_ENUM.match(line), PUBLIC_PROTOCOL.match(line)
            if enum:
                case_indent = enum.group(1) + "    "
            elif case_indent is not None and line.strip() == "}" and indent < len(case_indent):
                case_indent = None
            if protocol and not line.rstrip().endswith("}"):
                member_indent = protocol.group(1) + "    "
            elif member_indent is not None and line.strip() == "}" and indent < len(member_indent):
                member_indent = None
            is_case = case_indent is not None and line.startswith(case_indent + "case ") and ENUM_CASE.match(line)
            is_requirement = member_indent is not None and indent == len(member_indent) and REQUIREMENT.match(line)
            if (DECLARATION.match(line) or is_case or is_requirement) and not documented(lines, number):
                missing.append(f"{path}:{number + 1}: {line.strip()}")
print("\n".join(missing))
if missing:
    sys.exit(f"{len(missing)} public declarations have no documentation comment")
