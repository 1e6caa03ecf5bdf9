"""Runs: the self-describing result.json of each run, and the job that trains one run."""

from slm.runs.record import RESULT_FILE, SCHEMA_VERSION, STATUSES, load_record, update_record, write_json_atomic

__all__ = ["RESULT_FILE", "SCHEMA_VERSION", "STATUSES", "load_record", "update_record", "write_json_atomic"]
