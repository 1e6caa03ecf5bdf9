"""BFCL-format items read from local files (slm.toolcall.bfcl) and checked against their possible answers the way
BFCL's AST checker does for the simple and multiple categories; a tiny fixture written here, no BFCL package."""

from __future__ import annotations

import json

import pytest

from slm.toolcall.bfcl import BfclVerdict, check, read_bfcl

AREA = {"name": "calculate_triangle_area", "description": "Area of a triangle.", "parameters": {
    "type": "dict", "properties": {"base": {"type": "integer"}, "height": {"type": "integer"},
                                   "unit": {"type": "string", "default": "units"}}, "required": ["base", "height"]}}
SPEED = {"name": "speed", "description": "Speed.", "parameters": {"type": "dict", "properties": {
    "distance": {"type": "float"}, "time": {"type": "float"}, "stops": {"type": "array"}}, "required": ["distance"]}}
QUESTIONS = [
    {"id": "simple_0", "question": [[{"role": "user", "content": "Find the area of a triangle with a base of 10 "
                                                                 "units and height of 5 units."}]], "function": [AREA]},
    {"id": "multiple_0", "question": "How fast is 100 km in 2 hours?", "function": [AREA, SPEED]},
]
ANSWERS = [
    {"id": "simple_0", "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5],
                                                                     "unit": ["units", ""]}}]},
    {"id": "multiple_0", "ground_truth": [{"speed": {"distance": [100.0], "time": [2.0], "stops": [["A b"], ""]}}]},
]


@pytest.fixture
def items(tmp_path):
    (tmp_path / "q.json").write_text("\n".join(map(json.dumps, QUESTIONS)) + "\n")
    (tmp_path / "a.json").write_text("\n".join(map(json.dumps, ANSWERS)) + "\n")
    return read_bfcl(tmp_path / "q.json", tmp_path / "a.json")


def test_items_hold_the_question_the_tools_and_a_short_prompt(items):
    simple, multiple = items
    assert simple["kind"] == "bfcl_simple" and multiple["kind"] == "bfcl_multiple"
    assert simple["prompt"] == ("tools: calculate_triangle_area(base,height,unit)\nQ: Find the area of a triangle "
                                "with a base of 10 units and height of 5 units.\nA: ")
    assert multiple["tools"] == ["calculate_triangle_area", "speed"]


def call(fn, **args) -> str:
    return json.dumps({"fn": fn, "args": args})


@pytest.mark.parametrize("index, text, exact, name_ok", [
    (0, call("calculate_triangle_area", base=10, height=5), True, True),          # optional left out
    (0, call("calculate_triangle_area", base=10, height=5, unit="Units"), True, True),
    (0, call("calculate_triangle_area", base=10, height=5.0), False, True),       # a float for an integer
    (0, call("calculate_triangle_area", base=10), False, True),                   # required missing
    (0, call("calculate_triangle_area", base=10, height=5, colour="red"), False, True),   # unknown parameter
    (0, call("area", base=10, height=5), False, False),
    (1, call("speed", distance=100, time=2), True, True),                         # an integer for a float
    (1, call("speed", distance=100, time=2, stops=["a_b"]), True, True),
    (1, call("speed", distance=100, time=True), False, True),
    (1, call("calculate_triangle_area", base=100, height=2), False, False),
])
def test_the_checker_follows_bfcls_rules(items, index, text, exact, name_ok):
    v = check(items[index], text + "\nignored")
    assert v.format_valid and v.exact == exact and v.name_ok == name_ok


@pytest.mark.parametrize("text", ["", "{", '{"fn":"speed"}', '{"fn":"speed","args":[1]}', None, "[" * 5000])
def test_garbage_is_invalid_never_an_error(items, text):
    assert check(items[1], text) == BfclVerdict()


def test_bad_files_are_one_line_naming_them(tmp_path):
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS[0]) + "\n")
    (tmp_path / "a.json").write_text("not json\n")
    with pytest.raises(ValueError, match=r"a.json:1: not JSON"):
        read_bfcl(tmp_path / "q.json", tmp_path / "a.json")
    (tmp_path / "a.json").write_text(json.dumps(ANSWERS[1]) + "\n")
    with pytest.raises(ValueError, match=r"no possible answer for 1 question\(s\) .* \(first: simple_0\)"):
        read_bfcl(tmp_path / "q.json", tmp_path / "a.json")
    with pytest.raises(ValueError, match="cannot read the BFCL file"):
        read_bfcl(tmp_path / "none.json", tmp_path / "a.json")
