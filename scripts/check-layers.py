#!/usr/bin/python3
"""The layering of docs/conventions.md ("Layers"), checked on every #include "..." of the C
sources (make layer-check, part of make test). A -> B: A may use B, never the reverse:

    libclient -> common; server -> form -> sched -> span -> exec; server -> sched;
    sched -> exec; span -> algo, span -> transport; exec -> algo, exec -> transport; all of
    them -> common; everyone may use the public API header (libclient/include) and the
    generated protocol (proto/).

An include that follows no arrow fails the check, naming the file, the header and the arrow
that broke. KNOWN lists those that remain from before the check, each with why; it may only
shrink: an entry that no longer occurs fails the check too, so that it is removed.

    scripts/check-layers.py [TOP]      (TOP: the source tree, default: this script's parent)
    scripts/check-layers.py --views DIR

--views makes what the build compiles each daemon layer with (Makefile, LAYER_INC): DIR/LAYER
holds a link to every daemon folder the layer may use (itself, its arrows, and the layers its
KNOWN includes reach), so an include beyond them does not compile.
"""
import os
import re
import sys

# Layer of a source path: the first prefix that matches.
LAYERS = [
    ("libclient/include/", "api"),
    ("proto/", "proto"),
    ("common/", "common"),
    ("libclient/", "libclient"),
    ("daemon/server/", "server"),
    ("daemon/main.c", "server"),
    ("daemon/form/", "form"),
    ("daemon/sched/", "sched"),
    ("daemon/span/", "span"),
    ("daemon/exec/", "exec"),
    ("daemon/algo/", "algo"),
    ("daemon/transport/", "transport"),
    ("tools/", "tools"),
]
BASE = {"api", "proto", "common"}
MAY_USE = {
    "api": set(),
    "proto": set(),
    "common": {"api", "proto"},
    "libclient": BASE,
    "server": BASE | {"form", "sched"},
    "form": BASE | {"sched"},
    "sched": BASE | {"span", "exec"},
    "span": BASE | {"exec", "algo", "transport"},
    "exec": BASE | {"algo", "transport"},
    "algo": BASE,
    "transport": BASE,
    "tools": BASE,
}
# The include path of the build (Makefile: -Ilibclient/include -Icommon -Idaemon -Ibuild/gen);
# build/gen holds what protoc-c makes of proto/.
INCLUDE_DIRS = ["libclient/include", "common", "daemon"]
GENERATED = {"hccld.pb-c.h": "proto/hccld.proto"}

# (file, header): includes that skip a layer, left from before this check, each with why; it may
# only shrink. None is left.
KNOWN = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel):
    for prefix, name in LAYERS:
        if rel == prefix or rel.startswith(prefix):
            return name
    return None


def resolve(top, src, header):
    """The tree path of header as the compiler finds it from src, or None."""
    for d in [os.path.dirname(src)] + INCLUDE_DIRS:
        cand = os.path.normpath(os.path.join(d, header))
        if os.path.exists(os.path.join(top, cand)):
            return cand
    return GENERATED.get(os.path.basename(header))


def sources(top):
    for d, _, files in os.walk(top):
        rel = os.path.relpath(d, top)
        if rel.split(os.sep)[0] in ("build", "tests", "bench", ".git", "python", "examples"):
            continue
        for f in files:
            if f.endswith((".c", ".h")):
                yield os.path.normpath(os.path.join(rel, f))


def make_views(top, out):
    daemon = {name: prefix[:-1] for prefix, name in LAYERS
              if prefix.startswith("daemon/") and prefix.endswith("/")}
    for me, folder in daemon.items():
        see = {me} | (MAY_USE[me] & daemon.keys())
        see |= {layer_of("daemon/" + h) for src, h in KNOWN if layer_of(src) == me}
        os.makedirs(os.path.join(out, os.path.basename(folder)), exist_ok=True)
        for layer in sorted(see):
            link = os.path.join(out, os.path.basename(folder), os.path.basename(daemon[layer]))
            if not os.path.islink(link):
                os.symlink(os.path.join(top, daemon[layer]), link)
    return 0


def main():
    here = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    if len(sys.argv) == 3 and sys.argv[1] == "--views":
        return make_views(here, sys.argv[2])
    top = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else here)
    broken, seen = [], set()
    for src in sorted(sources(top)):
        me = layer_of(src)
        if me is None:
            continue
        with open(os.path.join(top, src), encoding="utf-8") as f:
            text = f.read()
        for header in INCLUDE.findall(text):
            path = resolve(top, src, header)
            them = layer_of(path) if path else None
            if path is None:
                broken.append(f'{src}: #include "{header}": no such header in the tree')
            elif them is None or them == me or them in MAY_USE[me]:
                continue
            elif (src, header) in KNOWN:
                seen.add((src, header))
            else:
                allowed = ", ".join(sorted(MAY_USE[me])) or "nothing"
                broken.append(f'{src}: #include "{header}": {me} -> {them} is not an arrow '
                              f"({me} may use {allowed})")
    for src, header in sorted(KNOWN - seen):
        broken.append(f'{src}: #include "{header}" is gone: remove it from KNOWN in '
                      "scripts/check-layers.py")
    for line in broken:
        print("layers:", line)
    print(f"layers: {'FAILED' if broken else 'ok'}; {len(seen)} known exceptions left "
          "(scripts/check-layers.py, KNOWN)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
