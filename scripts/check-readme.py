#!/usr/bin/env python3
"""The README shows the example app word for word: the ```swift block after each
`<!-- PATH -->` marker must equal the file at PATH. Exits 1, naming the first difference."""
import difflib, pathlib, re, sys

readme = pathlib.Path("README.md").read_text()
shown = re.findall(r"<!-- (\S+\.swift) -->\n```swift\n(.*?)```\n", readme, re.S)
if not shown:
    sys.exit("check-readme: README.md shows no file under a <!-- PATH --> marker")
for path, block in shown:
    source = pathlib.Path(path).read_text()
    if block != source:
        diff = difflib.unified_diff(source.splitlines(), block.splitlines(), path, "README.md", lineterm="", n=1)
        sys.exit(f"check-readme: README.md does not show {path} as it is:\n" + "\n".join(list(diff)[:40]))
    print(f"check-readme: README.md shows {path} as it is")
