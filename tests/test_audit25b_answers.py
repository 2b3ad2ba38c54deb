"""Outside audit 25 (b): a paid answer whose JSON is valid but extreme (a number of thousands of
digits, a value nested hundreds deep) in a field afc only records. The image in the same answer
is the job's output; the odd field is a count not reported. Servers are tests/test_audit_wire.py's
raw sockets, the runs the real ``afc`` command."""

from __future__ import annotations

import base64

import httpx
from conftest import manifest
from fakeproviders import KEYS
from test_audit_wire import PNG, WireServer, answered, attempts, reply

from afc_cli.providers.http import json_or_empty

B64 = base64.b64encode(PNG).decode()
RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]


def openai_answer(usage: str) -> bytes:
    """gpt-image-1's answer (PROVIDERS: ``data[].b64_json`` and ``usage``), its usage object
    written as the raw JSON text ``usage``."""
    body = f'{{"created": 1, "data": [{{"b64_json": "{B64}"}}], "usage": {usage}}}'
    return reply("200 OK", body.encode(), {"Content-Type": "application/json"})


def submit_openai(afc, server: WireServer):
    """One job on gpt-image-1 with two attempts: a second paid call would show."""
    data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {
            "provider": "openai",
            "model": "gpt-image-1",
            "attempts": 2,
            "backoff": {"base": 0.01, "cap": 0.05},
        }
    ]
    afc.write_manifest(data)
    return afc("submit", "manifest.yaml", env={**KEYS, "OPENAI_BASE_URL": server.url})


def test_a_paid_answer_with_a_number_of_thousands_of_digits_keeps_its_image(afc):
    """A usage count of 5,000 digits is valid JSON, but Python reads no integer of more than
    4,300 digits from text (``ValueError``): the whole answer read as no JSON, 'openai:
    answered 200 with no image', its cost unknown, and the next attempt paid for the image
    again. The count is read as a number out of range (not reported); the image is kept."""
    server = WireServer(answered(openai_answer(f'{{"input_tokens": {"9" * 5000}}}')))
    try:
        result = submit_openai(afc, server)
        assert "Traceback" not in result.stderr
        assert result.returncode == 0, result.stderr
        assert len(server.received) == 1  # paid once
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded", attempt
        assert attempt["cost"] == "0.040000"  # the image, by the card; the count not reported
        (stored,) = [p for p in afc.outputs().rglob("*.png")]
        assert stored.read_bytes() == PNG
    finally:
        server.stop()


def test_a_huge_integer_reads_as_a_number_out_of_range():
    big = "9" * 5000
    answer = httpx.Response(200, content=f'{{"a": {big}, "b": -{big}, "c": 7}}'.encode())
    assert json_or_empty(answer) == {"a": float("inf"), "b": float("-inf"), "c": 7}


def test_a_paid_answer_with_a_count_nested_hundreds_deep_keeps_its_image(afc):
    """A usage count that is an array nested 600 deep is read (Python's parser takes it), but
    afc's ledger walks a usage object by recursion (its non-finite floats made text, its strings
    scrubbed): 'afc: unexpected error: RecursionError' stopped the run, the paid call left
    ``unknown`` and every resume paid for the image again and stopped there again. A value
    nested deeper than any provider answer's is read as no value: the count not reported."""
    deep = "[" * 600 + "1" + "]" * 600
    server = WireServer(answered(openai_answer(f'{{"input_tokens": {deep}, "output_tokens": 7}}')))
    try:
        result = submit_openai(afc, server)
        assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
        assert result.returncode == 0, result.stderr
        assert len(server.received) == 1  # paid once
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded", attempt
        assert attempt["cost"] == "0.040000"
        assert attempt["usage"]["output_tokens"] == 7
    finally:
        server.stop()


def test_a_value_nested_past_the_limit_reads_as_none_and_the_rest_stays():
    deep = "[" * 100 + "1" + "]" * 100
    answer = httpx.Response(200, content=f'{{"a": {deep}, "b": {{"c": [1, {{"d": 2}}]}}}}'.encode())
    value = json_or_empty(answer)
    assert value["b"] == {"c": [1, {"d": 2}]}
    depth, node = 0, value["a"]
    while isinstance(node, list):
        depth, node = depth + 1, node[0]
    assert node is None and depth < 64


def test_a_paid_answer_with_a_count_of_megabytes_keeps_a_line_of_it(afc):
    """A usage count that is a 5 MB text (or an array of 200,000 numbers) was kept whole in
    the attempt's row, and 'afc show' printed all of it on every look, as a provider's error
    message of megabytes was before it was cut (MAX_MESSAGE_CHARS). No count is that long: a
    value over a line is kept as its length."""
    long_text, wide = "7" * (5 * 1024 * 1024), ",".join(["1"] * 200_000)
    usage = f'{{"input_tokens": "{long_text}", "output_tokens": [{wide}]}}'
    server = WireServer(answered(openai_answer(usage)))
    try:
        result = submit_openai(afc, server)
        assert result.returncode == 0, result.stderr
        assert len(server.received) == 1
        ((kept,),) = afc.rows("SELECT usage_json FROM attempts")
        assert len(kept) < 1000, len(kept)
        shown = afc("show", "shot")
        assert shown.returncode == 0 and len(shown.stdout) < 20_000, len(shown.stdout)
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded" and attempt["cost"] == "0.040000"
        assert attempt["usage"]["images"] == 1
        assert str(5 * 1024 * 1024) in attempt["usage"]["input_tokens"]
    finally:
        server.stop()


def test_an_answer_of_millions_of_values_is_read_as_no_json():
    """A 50 MB answer of empty objects, 51 KB on the wire gzipped, took 1.3 GB and 4 s of the
    run's one thread to read (at the 256 MiB an answer may decode to, some 7 GB: the kernel
    killed the run, every call in flight left possibly paid). An answer holds a few dozen
    values, its images as long strings: one of more than MAX_JSON_VALUES is read as no JSON."""
    from afc_cli.providers.http import MAX_JSON_VALUES

    many = b"[" + b"{}," * (MAX_JSON_VALUES + 1) + b"{}]"
    assert json_or_empty(httpx.Response(200, content=many)) == {}
    # an answer with a long image and a few values is read as ever
    image = base64.b64encode(b"\x89PNG" * 3_000_000).decode()
    body = f'{{"data": [{{"b64_json": "{image}"}}], "usage": {{"input_tokens": 5}}}}'.encode()
    read = json_or_empty(httpx.Response(200, content=body))
    assert read["data"][0]["b64_json"] == image and read["usage"] == {"input_tokens": 5}
