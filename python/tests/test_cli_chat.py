"""test_cli_chat.py - `strata run --chat` with the model's own chat template: each turn's text
(--chat-log) equal to jinja2's rendering of the conversation (system prompt, user and assistant
turns, add_generation_prompt), set up as transformers' apply_chat_template sets it up
(test_chat_template.reference), on the real GLM-4.6 (glm4moe), gpt-oss (harmony), DeepSeek-V3.1
(deepseek2) and Qwen3 (qwen3next) templates; the tokens read equal to that text tokenized past
the longest prefix the cache holds (the cache being the previous text's tokens and the greedy
answer's, computed apart through the Python API); the answers equal to the Python API's greedy
generation on the whole rendered prompt; the built-in templates as fallbacks (a template that
fails, none at all) and overrides. The model is the trained tiny one with the templates put in
its metadata or given with --chat-template-file. The binary is $STRATA_CLI, else <repo>/strata."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import strata
from conftest import REPO, SHARED

pytest.importorskip("jinja2")
from test_chat_template import reference  # noqa: E402

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
if not CLI.is_file():
    pytest.skip(f"strata CLI not built at {CLI}", allow_module_level=True)
TINY = SHARED / "models" / "strata-tiny-moe-q8_0.gguf"
TEMPLATES = SHARED / "chat_templates"
if not TINY.is_file() or not TEMPLATES.is_dir():
    pytest.skip("../shared/models/strata-tiny-moe-q8_0.gguf or ../shared/chat_templates absent",
                allow_module_level=True)
N = 8
USER = ["Hello there, who are you?", "And what is 2+2?", "Thanks!"]
SYSTEM = "Be brief."


@pytest.fixture(scope="module")
def model():
    m = strata.Model(str(TINY), n_ctx=1024, n_threads=2)
    yield m
    m.close()


def with_template(tmp_path, src, name="t.gguf"):
    path = tmp_path / name
    tf = tmp_path / (name + ".jinja")
    tf.write_text(src)
    p = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(TINY), str(path),
                        "--chat-template-file", str(tf), "--force"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return path


def chat(model_path, *args, lines=USER, log=None):
    cmd = [str(CLI), "run", "-m", str(model_path), "-i", "-n", str(N), "--temp", "0", "-c", "1024",
           "-t", "2", "--cpu", "--quiet", *map(str, args)]
    if log:
        cmd += ["--chat-log", str(log)]
    p = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    turns = [json.loads(ln) for ln in log.read_text().splitlines()] if log else []
    return p, turns


def harmony_content(raw):
    """The last harmony message's text (the final channel), None without one."""
    i = raw.rfind("<|message|>")
    if i < 0:
        return None
    s = raw[i + len("<|message|>"):]
    ends = [s.find(e) for e in ("<|end|>", "<|return|>", "<|call|>") if s.find(e) >= 0]
    return s[:min(ends)] if ends else s


def check_conversation(model, src, turns, system=SYSTEM):
    """Each logged turn against jinja2, the tokenizer and greedy generation from scratch."""
    assert len(turns) == len(USER)
    msgs = [{"role": "system", "content": system}] if system else []
    bos, eos = model.token_text(model.bos), model.token_text(model.eos)
    cache, printed = [], []
    for k, (t, user) in enumerate(zip(turns, USER)):
        msgs.append({"role": "user", "content": user})
        want = reference(src, {"messages": msgs, "add_generation_prompt": True, "bos_token": bos,
                               "eos_token": eos})
        assert t["template"] == "jinja" and t["turn"] == k
        assert t["text"] == want, (k, t["text"], want)
        full = model.tokenize(want, add_special=False, parse_special=True)
        keep = 0
        while keep < min(len(cache), len(full)) and cache[keep] == full[keep]:
            keep += 1
        keep = min(keep, len(full) - 1)
        assert t["keep"] == keep and t["fed"] == full[keep:], k
        gen = [tok for tok, _ in model.generate(full, N, temperature=0, add_special=False)]
        assert len(gen) == N  # no end of generation in N tokens (the EOG case is the builtin's)
        text = model.detokenize(gen)
        printed.append(text)
        content = harmony_content(model.detokenize(gen, special=True)) if "<|channel|>" in src else None
        answer = text if content is None else content
        assert t["answer"] == answer, k
        msgs.append({"role": "assistant", "content": answer})
        cache = full + gen
    return "".join(printed) + "\n"  # what the CLI prints


@pytest.mark.parametrize("name", ["GLM-4.6", "openai-gpt-oss-120b", "deepseek-ai-DeepSeek-V3.1",
                                  "Qwen-Qwen3-0.6B"])
def test_template_file_renders_as_jinja2(model, tmp_path, name):
    path = TEMPLATES / f"{name}.jinja"
    p, turns = chat(TINY, "--chat-template-file", path, "--system", SYSTEM, log=tmp_path / "log.jsonl")
    assert f"chat with template {path}" in p.stderr
    assert p.stdout == check_conversation(model, path.read_text(), turns)


def test_model_template_is_the_default(model, tmp_path):
    src = (TEMPLATES / "GLM-4.6.jinja").read_text()
    path = with_template(tmp_path, src)
    p, turns = chat(path, log=tmp_path / "log.jsonl")
    assert "chat with template model (tokenizer.chat_template)" in p.stderr
    assert p.stdout == check_conversation(model, src, turns, system=None)
    # --chat-template model: the same; chatml forces the built-in one
    _, again = chat(path, "--chat-template", "model", log=tmp_path / "log2.jsonl")
    assert again == turns
    p, forced = chat(path, "--chat-template", "chatml", log=tmp_path / "log3.jsonl")
    assert "template chatml" in p.stderr and forced[0]["template"] == "chatml"
    assert forced[0]["text"] == f"<|im_start|>user\n{USER[0]}<|im_end|>\n<|im_start|>assistant\n"


def test_failing_template_falls_back(model, tmp_path):
    # a ChatML-like template the renderer refuses: auto says so in one line and chats in chatml
    src = "{{ raise_exception('no chat here') }}<|im_start|>"
    path = with_template(tmp_path, src)
    p, turns = chat(path, log=tmp_path / "log.jsonl")
    fell = [ln for ln in p.stderr.splitlines() if "cannot be rendered" in ln]
    assert len(fell) == 1 and "no chat here" in fell[0] and "chatml" in fell[0], p.stderr
    assert [t["template"] for t in turns] == ["chatml"] * 3
    assert turns[0]["text"] == f"<|im_start|>user\n{USER[0]}<|im_end|>\n<|im_start|>assistant\n"
    # the same as --chat-template chatml on the plain model
    _, forced = chat(TINY, "--chat-template", "chatml", log=tmp_path / "log2.jsonl")
    assert [t["fed"] for t in forced] == [t["fed"] for t in turns]
    # a template file is used as given: a message it cannot render is dropped, the chat goes on
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% if messages | length > 1 %}{{ raise_exception('one message only') }}{% endif %}"
                   "{{ messages[0]['content'] }}\n")
    p, turns = chat(TINY, "--chat-template-file", bad, log=tmp_path / "log3.jsonl")
    assert len(turns) == 1 and turns[0]["text"] == USER[0] + "\n"
    assert p.stderr.count("one message only") == 2 and p.stderr.count("was dropped") == 2


def test_no_template_and_usage(tmp_path):
    p, turns = chat(TINY, log=tmp_path / "log.jsonl")
    assert "template none (the model has no tokenizer.chat_template)" in p.stderr
    assert turns[1]["text"] == "\n" + USER[1]
    p = subprocess.run([str(CLI), "run", "-m", str(TINY), "-i", "--chat-template", "model"], input="hi\n",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "has no tokenizer.chat_template" in p.stderr
    p = subprocess.run([str(CLI), "run", "-m", str(TINY), "-i", "--chat-template", "bogus"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "auto, model, chatml, inst or none" in p.stderr


def test_speculative_same_text(tmp_path):
    # GLM's template rewrites past answers: each turn rolls the cache back; the drafters follow
    path = TEMPLATES / "GLM-4.6.jinja"
    plain, turns = chat(TINY, "--chat-template-file", path, log=tmp_path / "log.jsonl")
    assert any(t["keep"] < len(prev["fed"]) + prev["keep"] + N for prev, t in zip(turns, turns[1:]))
    for extra in (["--spec", "ngram"], ["--draft-model", TINY]):
        p, again = chat(TINY, "--chat-template-file", path, *extra, log=tmp_path / "log2.jsonl")
        assert p.stdout == plain.stdout and again == turns, extra
