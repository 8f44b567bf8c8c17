#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The HTTP front with a real client: the openai Python package (scripts/setup installs it in
# .venv-test) against the real daemon and model: completions and chat, streamed and not,
# n = 2, logprobs, stop, seeds, usage, model retrieval, embeddings (base64 and float), and the
# SDK's errors for bad fields, an unknown model and a missing key.
set -u
daemon=${ASYNCLLMD:?ASYNCLLMD must name the asyncllmd binary}
model=${ASYNCLLM_MODEL:?ASYNCLLM_MODEL must name the model}
python=${ASYNCLLM_TEST_PYTHON:?ASYNCLLM_TEST_PYTHON must name a python with the openai package}
[[ -f $model ]] || { echo "SKIP: $model is missing; run scripts/fetch-model"; exit 77; }
"$python" -c 'import openai' 2>/dev/null || { echo "SKIP: no openai package at $python; run scripts/setup"; exit 77; }
slowdown=${ASYNCLLM_TEST_SLOWDOWN:-1}

tmp=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "sk-$RANDOM$RANDOM" >"$tmp/key"
"$daemon" --model "$model" --max-model-len 1024 --bus none --socket "$tmp/d.sock" --port "$port" \
    --served-model-name facebook/opt-125m --api-key-file "$tmp/key" >"$tmp/daemon.log" 2>&1 &
pid=$!
for _ in $(seq $((300 * slowdown))); do
    python3 -c 'import http.client, sys; c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=1); c.request("GET", "/health"); sys.exit(c.getresponse().status != 200)' "$port" 2>/dev/null && break
    sleep 0.2
done

"$python" - "$port" "$(cat "$tmp/key")" <<'PY'
import struct
import sys
import openai

port, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % port, api_key=key, max_retries=0, timeout=120)
name = "facebook/opt-125m"
passed = failed = 0


def check(what, cond):
    global passed, failed
    if cond:
        passed += 1
        print("ok:", what)
    else:
        failed += 1
        print("FAIL:", what)


def attempt(what, fn):
    try:
        fn()
    except Exception as e:  # a failure of the SDK call is the test's failure
        check("%s (%s: %s)" % (what, type(e).__name__, e), False)


def chat():
    r = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, n=2,
                                       logprobs=True, top_logprobs=2, seed=3, temperature=1)
    check("chat: n = 2, each a message", len(r.choices) == 2 and all(c.message.role == "assistant" for c in r.choices))
    check("chat: usage counts both completions", r.usage.completion_tokens == 16 and r.usage.prompt_tokens > 0)
    lp = r.choices[0].logprobs.content
    check("chat: logprobs with 2 alternatives per token", len(lp) == 8 and all(len(t.top_logprobs) == 2 for t in lp))
    again = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                           n=2, seed=3, temperature=1)
    check("chat: the same seed, the same text",
          [c.message.content for c in again.choices] == [c.message.content for c in r.choices])


def completions():
    r = client.completions.create(model=name, prompt="The capital of France is", max_tokens=16, stop=["."], logprobs=1,
                                  temperature=0)
    c = r.choices[0]
    check("completions: stop ends it with finish_reason stop", c.finish_reason == "stop" and "." not in c.text)
    r = client.completions.create(model=name, prompt="The capital of France is", max_tokens=8, logprobs=1,
                                  temperature=0)
    c = r.choices[0]
    check("completions: logprobs' tokens spell the text", "".join(c.logprobs.tokens) == c.text)


def streamed():
    parts, usage, reasons = [], None, []
    for ch in client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Count to five."}],
                                             max_tokens=12, stream=True, stream_options={"include_usage": True}):
        if ch.choices:
            parts.append(ch.choices[0].delta.content or "")
            reasons.append(ch.choices[0].finish_reason)
        else:
            usage = ch.usage
    check("chat streamed: deltas, then usage", "".join(parts) and usage and usage.completion_tokens == 12)
    check("chat streamed: the last choice says length", reasons[-1] == "length")
    text = "".join(ch.choices[0].text for ch in client.completions.create(model=name, prompt="Once upon a time",
                                                                       max_tokens=10, stream=True, temperature=0))
    whole = client.completions.create(model=name, prompt="Once upon a time", max_tokens=10, temperature=0)
    check("completions streamed: the pieces make the whole answer", text == whole.choices[0].text)


def models():
    check("models: listed", [m.id for m in client.models.list()] == [name])
    check("models: retrieved", client.models.retrieve(name).id == name)


def embeddings():
    # the SDK asks for base64 and decodes it (float32, little-endian) unless told float
    texts = ["The library opens at nine.", "umbrella", "def area(r): return 3.14159 * r * r"]
    r = client.embeddings.create(model=name, input=texts)
    check("embeddings: one unit vector of 576 per input, in order",
          [d.index for d in r.data] == [0, 1, 2] and all(len(d.embedding) == 576 for d in r.data) and
          all(abs(sum(x * x for x in d.embedding) - 1) < 1e-4 for d in r.data))
    floats = client.embeddings.create(model=name, input=texts, encoding_format="float")
    as_float32 = lambda v: list(struct.unpack("<%df" % len(v), struct.pack("<%df" % len(v), *v)))
    check("embeddings: base64 and float give the same float32 vectors",
          [d.embedding for d in r.data] == [as_float32(d.embedding) for d in floats.data])
    check("embeddings: usage counts the prompts", r.usage.prompt_tokens == r.usage.total_tokens > 3)
    short = client.embeddings.create(model=name, input="umbrella", dimensions=8)
    check("embeddings: dimensions", len(short.data[0].embedding) == 8)


def errors():
    try:
        client.completions.create(model=name, prompt="x", temperature=5)
        check("a bad field raises BadRequestError", False)
    except openai.BadRequestError as e:
        check("a bad field raises BadRequestError naming it", e.status_code == 400 and e.body["param"] == "temperature")
    try:
        client.completions.create(model="gpt-4", prompt="x")
        check("an unknown model raises NotFoundError", False)
    except openai.NotFoundError:
        check("an unknown model raises NotFoundError", True)
    try:
        openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0).models.list()
        check("a wrong key raises AuthenticationError", False)
    except openai.AuthenticationError:
        check("a wrong key raises AuthenticationError", True)


for what, fn in (("chat", chat), ("completions", completions), ("streamed", streamed), ("models", models),
                 ("embeddings", embeddings), ("errors", errors)):
    attempt(what, fn)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
