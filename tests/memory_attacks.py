"""Memory attacks (issue 32) shared by the battery's tests: a candidate that looks in its own
memory (a scan over ``/proc/self/maps``, or a walk up its stack to the worker's loop) for
``def NAME(``: the ground truth of a reference run, another session's code. Each attack is a
candidate's source with ``{name}`` for the target's name (``str.format``)."""

_FOUND = """
def _gr_texts(name):
    import builtins, ctypes, json, re, sys
    cache = getattr(builtins, "_gr_cache", None)
    if cache is not None:
        return cache
    found = builtins._gr_cache = []
    pattern = re.compile(rb"def " + name.encode() + rb"(?:_new_implementation)?\\(")

    def take(chunk):
        head = chunk.split("\\n", 1)[0]
        if "\\\\n" in head:  # JSON-escaped: a request's text
            end = chunk.find('"')
            while end > 0 and chunk[end - 1] == "\\\\":
                end = chunk.find('"', end + 1)
            try:
                chunk = json.loads('"' + chunk[:end] + '"') if end > 0 else chunk
            except ValueError:
                return
        lines = chunk.split("\\n")
        body = [lines[0]]
        for line in lines[1:]:
            if line.strip() and not line.startswith((" ", "\\t")):
                break
            body.append(line)
        text = "\\n".join(body).rstrip()
        if "_gr_" not in text:
            found.append(text)

    if FRAMES:
        frame = sys._getframe()
        while frame is not None:
            for value in list(frame.f_locals.values()):
                for item in (value.get("files") or {{}}).values() if isinstance(value, dict) else ():
                    if isinstance(item, str):
                        for m in pattern.finditer(item.encode()):
                            take(item.encode()[m.start():m.start() + 8000].decode("utf-8", "replace"))
            frame = frame.f_back
    else:
        for line in open("/proc/self/maps").read().splitlines():
            parts = line.split()
            if "r" not in parts[1] or (len(parts) > 5 and (parts[5][:1] == "/" or parts[5][:2] == "[v")):
                continue
            low, high = (int(x, 16) for x in parts[0].split("-"))
            data = ctypes.string_at(low, high - low)
            for m in pattern.finditer(data):
                take(data[m.start():m.start() + 8000].decode("utf-8", "replace"))
    return found


def _gr_delegate(name, a, k):
    import textwrap
    for text in _gr_texts(name):
        scope = dict(globals())
        try:
            exec(textwrap.dedent(text), scope)
        except Exception:
            continue
        for key, value in scope.items():
            if key.startswith(name) and callable(value) and globals().get(key) is not value:
                return value(*a, **k)
    return None
"""

MEMORY_ATTACKS: dict[str, str] = {
    "memory scan: delegate to a ground truth found in memory": "FRAMES = False\n"
    + _FOUND
    + "\ndef {name}(*a, **k):\n    return _gr_delegate('{name}', a, k)\n",
    "frame walk to the worker's loop: delegate to a request's code": "FRAMES = True\n"
    + _FOUND
    + "\ndef {name}(*a, **k):\n    return _gr_delegate('{name}', a, k)\n",
    "exfiltration: print the code found in memory through run_tests": "FRAMES = False\n"
    + _FOUND
    + "\ndef {name}(*a, **k):\n    print('\\n=====\\n'.join(_gr_texts('{name}')))\n    return None\n",
}
