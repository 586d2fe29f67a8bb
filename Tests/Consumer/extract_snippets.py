#!/usr/bin/env python3
"""Writes every ```swift block of README.md and docs/swift-client.md, verbatim, into
Sources/Consumer/Snippets/ (one file each), so that `swift build` compiles them as a user would."""

import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
DOCS = [REPO / "README.md", REPO / "docs" / "swift-client.md"]
OUT = HERE / "Sources" / "Consumer" / "Snippets"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.swift"):
        old.unlink()
    count = 0
    for doc in DOCS:
        text = doc.read_text()
        for number, block in enumerate(re.findall(r"^```swift\n(.*?)^```", text, re.S | re.M), 1):
            name = f"{doc.stem}-{number}.swift"
            (OUT / name).write_text(f"// {doc.relative_to(REPO)}, Swift block {number}, verbatim.\n" + block)
            count += 1
    if count == 0:
        print("no ```swift blocks found", file=sys.stderr)
        return 1
    print(f"extracted {count} Swift blocks into {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
