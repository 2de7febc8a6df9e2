"""Every bad input says what to do about it: each `throw BadInput(...)` (or `ulysses::BadInput`) under src/ passes
a hint (its second argument, not ""), so the line a user sees ends with "— HINT: …" (the contract of
core/error.hpp). Prints the calls
without one, file:line, and exits 1 when there are any.

usage: check_hints.py SRC_DIR
"""
import pathlib
import re
import sys


def scan(text, start):
    """Yields (index, character) from text[start:] at bracket depth 0 relative to start, skipping string and
    character literals; stops after the bracket that closes the depth start is in."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == "'" and text[i - 1].isalnum() and text[i + 1].isalnum():
            pass   # a digit separator (10'000), not a character literal
        elif c in "\"'":
            i += 1
            while text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                yield i, c
                return
            depth -= 1
        elif depth == 0:
            yield i, c
        i += 1


def call_end(text, start):
    """Index just past the parenthesis that closes the call whose arguments begin at text[start]."""
    return max(i for i, _ in scan(text, start)) + 1


def top_level_commas(args):
    return sum(1 for _, c in scan(args + ")", 0) if c == ",")


def main(src):
    missing = []
    for path in sorted(pathlib.Path(src).rglob("*.[ch]pp")):
        text = path.read_text()
        for m in re.finditer(r"\bthrow (?:ulysses::)?BadInput\(", text):
            end = call_end(text, m.end())
            args = text[m.end():end - 1]
            if top_level_commas(args) == 0 or re.search(r',\s*""\s*$', args):
                line = text.count("\n", 0, m.start()) + 1
                missing.append(f"{path}:{line}: {' '.join(text[m.start():end].split())[:120]}")
    for line in missing:
        print(line)
    if missing:
        print(f"{len(missing)} BadInput without a hint: pass what the user should do as the second argument")
        return 1
    print("every BadInput has a hint")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
