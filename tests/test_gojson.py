"""axl.gojson against what Go's encoding/json writes (go 1.25, as built into
yggdrasil 0.5.12): the expected texts below are copied from a real
yggdrasil router's admin socket and from Go's documented rules."""

from __future__ import annotations

import pytest

from axl.gojson import Raw, compact, dumps, go_float, go_json, indent

# A real yggdrasil 0.5.12 router's answer to {"request":"getNodeInfo",...}, byte for byte.
GO_ANSWER = (
    '{\n  "status": "success",\n  "request": {\n    "request": "getNodeInfo",\n    "arguments": {\n'
    '      "key": "3b4de5f2021fc0b0213d3d9b6983266e871b35e6d30812425c8f3082bb091e00"\n    }\n  },\n'
    '  "response": {\n    "3b4de5f2021fc0b0213d3d9b6983266e871b35e6d30812425c8f3082bb091e00": {\n'
    '      "name": "r2",\n      "x": [\n        1,\n        2\n      ]\n    }\n  }\n}'
)


def test_maps_sorted_structs_in_order_and_html_escaped():
    assert go_json({"z": 1, "a": [True, None]}) == b'{"a":[true,null],"z":1}'
    assert go_json({"k": "é\u2028<&>"}) == '{"k":"é\\u2028\\u003c\\u0026\\u003e"}'.encode()
    assert dumps({"z": 1, "a": 2}, sort_keys=False) == '{"z":1,"a":2}'
    assert dumps({"c": "\b\f\n\x01"}) == '{"c":"\\b\\f\\n\\u0001"}'


@pytest.mark.parametrize("value, text", [
    (1.0, "1"), (1.5, "1.5"), (-0.0, "-0"), (0.1, "0.1"), (1e20, "100000000000000000000"),
    (1e21, "1e+21"), (1e-6, "0.000001"), (1e-7, "1e-7"), (1.5e-10, "1.5e-10"),
    (123456789012345678.0, "123456789012345680"), (3.103849014, "3.103849014"),
])
def test_floats_as_go_writes_them(value, text):
    assert go_float(value) == text


def test_nan_is_not_json():
    with pytest.raises(ValueError):
        go_float(float("nan"))


def test_indent_lays_out_as_go_encoder():
    response = compact(b'{"3b4de5f2021fc0b0213d3d9b6983266e871b35e6d30812425c8f3082bb091e00":'
                       b' {"name": "r2", "x": [1, 2]}}')
    answer = {"status": "success",
              "request": {"request": "getNodeInfo",
                          "arguments": {"key": "3b4de5f2021fc0b0213d3d9b6983266e871b35e6d30812425c8f3082bb091e00"}},
              "response": response}
    assert indent(dumps(answer, sort_keys=False)) == GO_ANSWER
    assert indent('{"a":[],"b":{},"c":[{}]}') == '{\n  "a": [],\n  "b": {},\n  "c": [\n    {}\n  ]\n}'


def test_compact_keeps_the_text_and_escapes_as_go():
    assert compact(b' { "b" : 1.50, "a" : "x y<" } ') == '{"b":1.50,"a":"x y\\u003c"}'
    assert isinstance(compact(b"[]"), Raw)
    assert dumps({"k": compact(b"[1, 2]")}) == '{"k":[1,2]}'
    for bad in (b"{", b"\xff", b"1 2", b"NaN"):
        with pytest.raises(ValueError):
            compact(bad)
