"""test_chat_template.py - the server's chat template renderer (c/server/template*.c, through
`strata template`) against jinja2 set up as transformers' apply_chat_template sets it up
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, tojson as json.dumps
with ensure_ascii off, raise_exception, strftime_now), on the real templates of
../shared/chat_templates with plain, multi-turn, system, tool-call and reasoning messages.
Where jinja2 renders, the renderer must give the same text or refuse with a message; never a
different prompt. The share it renders is reported and must not fall below the floor below."""
import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from conftest import REPO

jinja2 = pytest.importorskip("jinja2")
from jinja2.ext import Extension  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
TEMPLATES = Path(os.environ.get("STRATA_SHARED", REPO.parent / "shared")) / "chat_templates"
if not CLI.is_file():
    pytest.skip(f"strata CLI not built at {CLI}", allow_module_level=True)
if not TEMPLATES.is_dir():
    pytest.skip(f"{TEMPLATES} not present", allow_module_level=True)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                         "required": ["city"]}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CASES = {
    "plain": {"messages": [{"role": "user", "content": "Hello, who are you?"}]},
    "multi": {"messages": [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                           {"role": "user", "content": "What is 2+2? Answer \"4\" or 'four'."}]},
    "tools": {"messages": [{"role": "user", "content": "Weather in Paris?"},
                           {"role": "assistant", "content": "", "tool_calls": [CALL]},
                           {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C, sunny"},
                           {"role": "user", "content": "Thanks"}], "tools": TOOLS},
    "reasoning": {"messages": [{"role": "user", "content": "Think: 3*7?"},
                               {"role": "assistant", "content": "21", "reasoning_content": "3*7 is 21."},
                               {"role": "user", "content": "And 4*5?"}]},
}
# The share of (template, case) pairs jinja2 renders that the renderer renders too (the rest it
# refuses with a message); raised as the renderer grows.
FLOOR = 0.95


class Generation(Extension):
    """transformers' {% generation %} marker: its body as is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def reference(src, ctx):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda f: datetime.now().strftime(f)
    return env.from_string(src).render(**ctx)


def ours(path, ctx, tmp_path):
    f = tmp_path / "ctx.json"
    f.write_text(json.dumps(ctx))
    p = subprocess.run([str(CLI), "template", "--template", str(path), "--context", str(f)],
                       capture_output=True, timeout=60)
    return (p.stdout.decode(), None) if p.returncode == 0 else (None, p.stderr.decode().strip())


def test_templates_against_jinja2(tmp_path):
    same, refused, jinja_refused, wrong = [], [], [], []
    for path in sorted(TEMPLATES.glob("*.jinja")):
        src = path.read_text()
        for case, ctx in CASES.items():
            ctx = dict(ctx, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
            try:
                want = reference(src, ctx)
            except Exception:  # noqa: BLE001 - the template itself refuses these messages
                jinja_refused.append((path.name, case))
                continue
            got, err = ours(path, ctx, tmp_path)
            if got is None:
                assert err and err.startswith("strata: template: "), (path.name, case, err)
                refused.append((path.name, case, err))
            elif got == want:
                same.append((path.name, case))
            else:
                wrong.append((path.name, case, want, got))
    total = len(same) + len(refused)
    print(f"\nchat templates: {len(same)} of {total} renderings equal to jinja2's, {len(refused)} refused, "
          f"{len(jinja_refused)} refused by jinja2 itself")
    for name, case, err in refused[:40]:
        print(f"  refused {name} [{case}]: {err}")
    for name, case, want, got in wrong[:3]:
        i = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]), min(len(want), len(got)))
        print(f"  WRONG {name} [{case}] at {i}: jinja2 {want[max(0, i - 40):i + 40]!r}\n      ours {got[max(0, i - 40):i + 40]!r}")
    assert not wrong, f"{len(wrong)} renderings differ from jinja2's: {[(n, c) for n, c, _, _ in wrong]}"
    assert total and len(same) >= FLOOR * total, f"{len(same)} of {total} rendered"


def test_refusals_are_clear(tmp_path):
    bad = tmp_path / "bad.jinja"
    for src, word in (("{% for x in y %}", "endfor"), ("{{ x | nosuchfilter }}", "nosuchfilter"),
                      ("{% include 'x' %}", "include"), ("{{ raise_exception('no system role') }}", "no system role")):
        bad.write_text(src)
        got, err = ours(bad, {"messages": []}, tmp_path)
        assert got is None and word in err, (src, err)
