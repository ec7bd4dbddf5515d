#!/usr/bin/env python3
"""Lists the largest product files and every function body over N lines.

Product code is liblog/src, liblog/include and tools/ (.cc and .h files; the
tests, benches and simulator are not product code). For each file the script
blanks comments, string and character literals and preprocessor lines (keeping
line breaks), then matches braces: a brace block opened at namespace or class
scope is a namespace, a class (struct, union, enum), a function body, or
something else (an initializer). A function body is a block whose head (the
text since the last ';', '{' or '}' at that scope) has a parameter list
outside any template brackets and no '=' before it; a constructor's member
initializers (`: a_{x}, b_(y)`) belong to the head. A lambda assigned at
namespace or class scope (`auto f = [](...) {...};`) counts as a function
named by its variable. Nested blocks (lambdas, local classes) count in the
function that holds them.

A function's length is the number of lines from the line of its opening
brace to the line of its closing brace, both included; its place is the line
where its name is.

  .ci/function_sizes.py                 the working tree
  .ci/function_sizes.py --rev d501671   the files of a commit (git show)
  -n 60        the length over which a function is listed (default 60)
  --files 15   how many of the largest files to list (default 15)
  --check      exit 1 when some function is over the length
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PRODUCT = ("liblog/src", "liblog/include", "tools")
EXTENSIONS = (".cc", ".h", ".cpp", ".hpp", ".c")

CLASS_KEYWORDS = {"class", "struct", "union", "enum"}
NOT_A_NAME = {"decltype", "alignas", "__attribute__", "__declspec", "noexcept", "requires",
              "sizeof", "alignof", "static_assert"}


def blank(text):
    """The text with comments, literals and preprocessor lines made spaces.

    Quotes of string and character literals stay so that `extern "C"` stays
    recognisable; every line break stays so that line numbers hold.
    """
    out = []
    i, n = 0, len(text)
    line_start = True  # only whitespace since the last line break
    prev = ""          # the last character kept that is not whitespace

    def spaces(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # A preprocessor line, with its continuations (and comments in it).
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                if text.startswith("/*", j):
                    k = text.find("*/", j + 2)
                    j = n if k < 0 else k + 2
                    continue
                if text.startswith("//", j):
                    while j < n and text[j] != "\n":
                        j += 1
                    break
                j += 1
            out.append(spaces(text[i:j]))
            i = j
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(spaces(text[i:j]))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(spaces(text[i:j]))
            i = j
            continue
        m = re.match(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(', text[i:i + 24])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('"' + spaces(text[i + 1:j - 1]) + '"')
            i = j
            prev = '"'
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            # A number (identifiers are read whole, so a digit starts one),
            # digit separators (1'000) and exponents included.
            j = i + 1
            while j < n:
                d = text[j]
                if d.isalnum() or d in "_.":
                    j += 1
                elif d == "'" and j + 1 < n and text[j + 1].isalnum():
                    j += 1
                elif d in "+-" and text[j - 1] in "eEpP":
                    j += 1
                else:
                    break
            out.append(text[i:j])
            prev = text[j - 1]
            i = j
            continue
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + spaces(text[i + 1:j - 1]) + (c if j - 1 > i else ""))
            prev = c
            i = j
            continue
        if c.isalpha() or c == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(text[i:j])
            prev = text[j - 1]
            i = j
            continue
        out.append(c)
        prev = c
        i += 1
    return "".join(out)


TOKEN = re.compile(r"\s*(?:(?P<id>[A-Za-z_]\w*)|(?P<num>\d[\w.']*)|(?P<str>\"[^\"]*\"|'[^']*')|"
                   r"(?P<op>::|->|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||[^\sA-Za-z_\d]))")


def tokens(head):
    """(kind, text, position) for each token of a head."""
    out = []
    pos = 0
    while True:
        m = TOKEN.match(head, pos)
        if not m or m.end() == pos:
            break
        kind = m.lastgroup
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return out


def operator_name(toks, k):
    """The operator's name starting at toks[k] ('operator') and the index after it."""
    j = k + 1
    if j < len(toks) and toks[j][1] == "(":
        return "operator()", j + 2
    if j < len(toks) and toks[j][1] == "[":
        return "operator[]", j + 2
    name = []
    while j < len(toks) and toks[j][1] != "(":
        name.append(toks[j][1])
        j += 1
    glue = " " if name and name[0][:1].isalpha() else ""
    return "operator" + glue + " ".join(name).replace(" *", "*").replace(" &", "&"), j


def qualified_start(toks, k):
    """The index of the first token of the qualified name ending at toks[k].

    Steps back over `~`, `::` and template arguments: Foo<T>::~Foo.
    """
    start = k
    while start >= 1:
        t = toks[start - 1][1]
        if t == "~":
            start -= 1
        elif t == "::" and start >= 2 and toks[start - 2][0] == "id":
            start -= 2
        elif t == "::" and start >= 2 and toks[start - 2][1] == ">":
            depth, s = 0, start - 2
            while s >= 0:
                if toks[s][1] == ">":
                    depth += 1
                elif toks[s][1] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                s -= 1
            if s < 1 or toks[s - 1][0] != "id":
                break
            start = s - 1
        else:
            break
    return start


def classify(head):
    """What a '{' opens at namespace or class scope, given the text before it.

    Returns (kind, name, name_offset, initializers) with kind one of
    "namespace", "class", "function", "other"; initializers is True when the
    head of a function has reached a constructor's member initializer list.
    """
    h = re.sub(r"^\s*(?:(?:public|private|protected)\s*:(?!:)\s*)+", "", head)
    skipped = len(head) - len(h)
    if re.match(r"\s*(?:inline\s+)?namespace\b", h) or re.match(r'\s*extern\s*"', h):
        m = re.match(r"\s*(?:inline\s+)?namespace\s+([\w:]+)", h)
        return "namespace", (m.group(1) if m else ""), 0, False
    toks = tokens(h)
    paren = angle = square = 0
    params_at = None  # index of the '(' of the parameter list
    name, name_at = None, 0
    k = 0
    while k < len(toks):
        kind, t, p = toks[k]
        if t == "operator" and paren == 0 and square == 0 and params_at is None:
            start = k
            while start >= 2 and toks[start - 1][1] == "::" and toks[start - 2][0] == "id":
                start -= 2
            op, j = operator_name(toks, k)
            prefix = "".join(x[1] for x in toks[start:k])
            name, name_at = prefix + op, toks[start][2]
            if j < len(toks) and toks[j][1] == "(" and angle == 0:
                params_at = j
                k = j
                paren = 1
                k += 1
                continue
            k = j
            continue
        if t == "(":
            if paren == 0 and angle == 0 and square == 0 and params_at is None:
                prev = toks[k - 1] if k else None
                if prev and prev[0] == "id" and prev[1] not in NOT_A_NAME:
                    params_at = k
                    start = qualified_start(toks, k - 1)
                    name = "".join(x[1] for x in toks[start:k])
                    name_at = toks[start][2]
            paren += 1
        elif t == ")":
            paren -= 1
        elif t == "[":
            square += 1
        elif t == "]":
            square -= 1
        elif paren == 0 and square == 0:
            if t == "<" and k and (toks[k - 1][0] == "id" or toks[k - 1][1] == "template"):
                angle += 1
            elif t == ">" and angle > 0:
                angle -= 1
            elif t == ">>" and angle > 0:
                angle = max(0, angle - 2)
            elif t == "=" and angle == 0 and params_at is None:
                rest = h[p + 1:].lstrip()
                if rest.startswith("["):
                    # A lambda held by a variable: named by the variable.
                    prev = toks[k - 1] if k else None
                    var = prev[1] if prev and prev[0] == "id" else "(lambda)"
                    return "function", var, skipped + (prev[2] if prev else 0), False
                return "other", None, 0, False
            elif t in CLASS_KEYWORDS and angle == 0 and params_at is None:
                rest = toks[k + 1:]
                cls = ""
                for kind2, t2, _ in rest:
                    if t2 in ("class", "struct", "final", "alignas"):
                        continue
                    if kind2 == "id":
                        cls = t2
                    break
                if t == "enum":
                    return "other", None, 0, False
                return "class", cls, 0, False
            elif t == ":" and params_at is not None and angle == 0:
                return "function", name, skipped + name_at, True
        k += 1
    if params_at is not None and name:
        return "function", name, skipped + name_at, False
    return "other", None, 0, False


def matching(text, i):
    """The index of the '}' that closes the '{' at i (blanked text)."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return n - 1


def functions(source):
    """(name, line, length) of each function body of a source file."""
    text = blank(source)
    line_of = []
    line = 1
    for c in text:
        line_of.append(line)
        if c == "\n":
            line += 1
    line_of.append(line)
    found = []
    scopes = []  # ("namespace"|"class", name)
    head_start = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == ";":
            head_start = i + 1
        elif c == "}":
            if scopes:
                scopes.pop()
            head_start = i + 1
        elif c == "{":
            head = text[head_start:i]
            kind, name, at, inits = classify(head)
            if kind == "function" and inits:
                before = text[head_start:i].rstrip()
                if before and (before[-1].isalnum() or before[-1] in "_>"):
                    # A member initializer `x_{...}`: part of the head.
                    i = matching(text, i) + 1
                    continue
            if kind in ("namespace", "class"):
                scopes.append((kind, name))
                head_start = i + 1
            else:
                end = matching(text, i)
                if kind == "function":
                    owners = [s[1] for s in scopes if s[0] == "class" and s[1]]
                    full = "::".join(owners + [name])
                    found.append((full, line_of[head_start + at],
                                  line_of[end] - line_of[i] + 1))
                i = end + 1
                head_start = i
                continue
        i += 1
    return found


def product_files_worktree():
    out = {}
    for top in PRODUCT:
        for d, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if name.endswith(EXTENSIONS):
                    path = os.path.join(d, name)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        out[os.path.relpath(path, ROOT)] = f.read()
    return out


def product_files_rev(rev):
    listing = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", rev, "--"]
                             + list(PRODUCT), check=True, capture_output=True, text=True)
    paths = [p for p in listing.stdout.splitlines() if p.endswith(EXTENSIONS)]
    batch = subprocess.run(["git", "-C", ROOT, "cat-file", "--batch"],
                           input="".join(f"{rev}:{p}\n" for p in paths).encode(),
                           check=True, capture_output=True).stdout
    out = {}
    pos = 0
    for p in paths:
        nl = batch.index(b"\n", pos)
        size = int(batch[pos:nl].split()[2])
        out[p] = batch[nl + 1:nl + 1 + size].decode("utf-8", errors="replace")
        pos = nl + 1 + size + 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", help="read the files of this commit instead of the working tree")
    ap.add_argument("-n", type=int, default=60, help="list functions over this many lines")
    ap.add_argument("--files", type=int, default=15, help="how many of the largest files")
    ap.add_argument("--check", action="store_true", help="exit 1 when a function is over -n")
    args = ap.parse_args()

    files = product_files_rev(args.rev) if args.rev else product_files_worktree()
    sizes = sorted(((src.count("\n") + (0 if src.endswith("\n") or not src else 1), path)
                    for path, src in files.items()), key=lambda x: (-x[0], x[1]))
    print(f"largest product files ({len(files)} files, {sum(s for s, _ in sizes)} lines):")
    for size, path in sizes[:args.files]:
        print(f"  {size:6d}  {path}")
    long_ones = []
    for path in sorted(files):
        for name, line, length in functions(files[path]):
            if length > args.n:
                long_ones.append((length, f"{path}:{line}", name))
    long_ones.sort(key=lambda x: (-x[0], x[1]))
    print(f"functions over {args.n} lines ({len(long_ones)}):")
    for length, where, name in long_ones:
        print(f"  {length:6d}  {where}  {name}")
    return 1 if args.check and long_ones else 0


if __name__ == "__main__":
    sys.exit(main())
