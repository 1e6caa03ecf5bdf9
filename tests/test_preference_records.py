"""SFT and preference records from JSONL (slm.data.preference_records): good files read, every bad record one line
naming the file, the line and the problem."""

from __future__ import annotations

import json

import pytest

from slm.data.errors import DataError
from slm.data.preference_records import (PreferenceRecord, SFTRecord, read_preference_records, read_sft_records)


def words(text: str) -> list[int]:
    """A stand-in tokenizer: one token per word."""
    return list(range(len(text.split())))


def write(tmp_path, *lines, name="records.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


PAIR = {"prompt": "add 1 2", "chosen": '{"fn": "add", "args": [1, 2]}', "rejected": '{"fn": "sub"'}


def test_good_files_read_with_extra_fields_blank_lines_and_an_empty_prompt(tmp_path):
    sft = write(tmp_path, {"prompt": "q", "completion": "a", "id": 7}, "", {"prompt": "", "completion": "b"})
    assert read_sft_records(sft) == [SFTRecord("q", "a"), SFTRecord("", "b")]
    pairs = write(tmp_path, PAIR, {**PAIR, "rejected": "no"}, name="pairs.jsonl")
    got = read_preference_records(pairs, tokenize=words, context_length=8)
    assert got[0] == PreferenceRecord(PAIR["prompt"], PAIR["chosen"], PAIR["rejected"]) and len(got) == 2


@pytest.mark.parametrize("line, problem", [
    ({"prompt": "p", "chosen": "a"}, "missing field 'rejected' (a preference record has prompt, chosen, rejected)"),
    ({"chosen": "a", "rejected": "b"}, "missing field 'prompt'"),
    ({**PAIR, "chosen": 3}, "field 'chosen' is a number, not a string"),
    ({**PAIR, "prompt": [{"role": "user", "content": "hi"}]}, "field 'prompt' is a list, not a string (TRL's "
                                                              "conversational format"),
    ({**PAIR, "rejected": None}, "field 'rejected' is null, not a string"),
    ({**PAIR, "chosen": ""}, "field 'chosen' is empty: a completion must have text"),
    ({**PAIR, "rejected": " \n"}, "field 'rejected' is only whitespace"),
    ({**PAIR, "rejected": PAIR["chosen"]}, "chosen and rejected are the same text"),
    ({**PAIR, "chosen": "a b c d e f"}, "prompt + chosen is 9 tokens (3 + 6), more than the 8 a sequence may have"),
    ("{'prompt': 1}", "not JSON (Expecting property name enclosed in double quotes at column 2)"),
    ('["p", "a", "b"]', "a list, not a JSON object"),
    ('"text"', "a string, not a JSON object"),
])
def test_a_bad_preference_record_is_one_line(tmp_path, line, problem):
    path = write(tmp_path, PAIR, line)
    with pytest.raises(DataError) as err:
        read_preference_records(path, tokenize=words, context_length=8)
    assert str(err.value).startswith(f"{path}:2: {problem}") and "\n" not in str(err.value)


@pytest.mark.parametrize("line, problem", [
    (PAIR, "missing field 'completion' (an SFT record has prompt, completion)"),
    ({"prompt": "p", "completion": ""}, "field 'completion' is empty"),
    ({"prompt": "p", "completion": True}, "field 'completion' is a boolean, not a string"),
    ({"prompt": "a b c d", "completion": "e f"}, "prompt + completion is 6 tokens (4 + 2), more than the 5 a sequence may have"),
])
def test_a_bad_sft_record_is_one_line(tmp_path, line, problem):
    path = write(tmp_path, {"prompt": "p", "completion": "c"}, line)
    with pytest.raises(DataError) as err:
        read_sft_records(path, tokenize=words, context_length=5)
    assert str(err.value).startswith(f"{path}:2: {problem}")


def test_a_bad_file_is_one_line(tmp_path):
    with pytest.raises(DataError, match=r"missing\.jsonl: cannot read the records: No such file"):
        read_sft_records(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match=r"empty\.jsonl: no records \(a JSONL file of objects with fields prompt, "):
        read_preference_records(write(tmp_path, "", name="empty.jsonl"))
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"prompt": "caf\xe9", "completion": "x"}\n')
    with pytest.raises(DataError, match=r"latin1\.jsonl:1: not UTF-8 text \(byte 16 of the line\)"):
        read_sft_records(bad)
    with pytest.raises(ValueError, match="give both tokenize and context_length"):
        read_sft_records(bad, context_length=5)
