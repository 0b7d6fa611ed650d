"""Rows of a task's data file, each with where it came from, and the checks every task loader makes.

Why: a task's data is checked when it is loaded, every row, so that a wrong file fails before any
model loads, with one message that names the file, the row and the form the task expects -- not
with an AttributeError deep in a loader, nor silently as a reward of 0 for every response.

`read_rows` reads JSONL (optionally .gz), a JSON list, CSV (with a header line) or parquet;
`hub_rows` a Hugging Face dataset. Each `Row` carries `where` ("data.jsonl row 3 (line 4)"), and
`text_field` / `int_field` read one field or raise ValueError naming the row, the field, what was
found and what was expected.
"""

from __future__ import annotations

import csv
import decimal
import gzip
import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Row", "hub_rows", "int_field", "number_text", "read_rows", "text_field"]


@dataclass(frozen=True)
class Row:
    """One row of a data file: its fields and where it is."""

    data: dict
    """The row's fields by name."""
    where: str
    """The file (or dataset) and the row, for error messages: ``data.jsonl row 3 (line 4)``."""
    csv_header: bool = False
    """True for a CSV row: its field names come from the file's first line."""


def read_rows(path: Path, expected: str) -> list[Row]:
    """Rows of a JSONL (optionally .gz), JSON list, CSV or parquet file.

    ``expected`` (the form the task wants, e.g. ``{"question": "...", "answer": "8"} per line``)
    ends every error message. Raises FileNotFoundError for a missing file and ValueError for an
    empty file, a line that is not a JSON object, or a file that cannot be read as its suffix says.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist; pass the path of an existing JSONL/CSV file "
                                f"with {expected}")
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pandas as pd

        records = pd.read_parquet(path).to_dict("records")
        rows = [Row(r, f"{path} row {i}") for i, r in enumerate(records, start=1)]
    else:
        opener = gzip.open if name.endswith(".gz") else open
        try:
            with opener(path, "rt", encoding="utf-8") as f:
                if name.endswith((".csv", ".csv.gz")):
                    reader = csv.DictReader(f)
                    rows = [Row(r, f"{path} row {i} (line {reader.line_num})", csv_header=True)
                            for i, r in enumerate(reader, start=1)]
                    if not rows and reader.fieldnames:
                        raise ValueError(f"data file {path} has a header line ({', '.join(reader.fieldnames)}) and "
                                         "no rows under it (a CSV's first line must name the columns); expected "
                                         f"{expected}")
                else:
                    rows = _json_rows(path, f.read(), expected)
        except (UnicodeDecodeError, gzip.BadGzipFile, csv.Error) as error:
            raise ValueError(f"data file {path} cannot be read as {'CSV' if '.csv' in name else 'JSON lines'} "
                             f"({error}); expected {expected}") from error
    if not rows:
        raise ValueError(f"data file {path} has no rows (it is empty); expected {expected}")
    return rows


def _json_rows(path: Path, text: str, expected: str) -> list[Row]:
    """Rows of a JSON list (``.json`` starting with ``[``) or of JSON lines (one object per line)."""
    if path.name.lower().endswith((".json", ".json.gz")) and text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"data file {path} is not valid JSON ({error}); expected a JSON list of objects or "
                             f"{expected}") from error
        rows = [Row(item, f"{path} item {i}") for i, item in enumerate(items, start=1)]
    else:
        rows = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path} row {len(rows) + 1} (line {line_no})"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not valid JSON ({error.msg} at column {error.colno}); expected one JSON "
                                 f"object per line, {expected}") from error
            rows.append(Row(item, where))
    for row in rows:
        if not isinstance(row.data, dict):
            raise ValueError(f"{row.where}: a JSON {type(row.data).__name__}, not an object; expected {expected}")
    return rows


def hub_rows(dataset_id: str, config: str | None, split: str, expected: str) -> list[Row]:
    """Rows of a Hugging Face dataset (needs the `datasets` package and the network or its cache).
    Raises FileNotFoundError naming the dataset and the fix when it cannot be loaded."""
    fix = "pass path= (--task_path) to a local JSONL/CSV copy"
    try:
        import datasets

        records = list(datasets.load_dataset(dataset_id, config, split=split))
    except ImportError as error:
        raise FileNotFoundError(f"Hugging Face dataset {dataset_id!r} needs the `datasets` package ({error}); "
                                f"pip install datasets, or {fix}") from error
    except (OSError, ValueError) as error:  # no network, no such dataset or split
        raise FileNotFoundError(f"Hugging Face dataset {dataset_id!r} (split {split!r}) could not be loaded: "
                                f"{type(error).__name__}: {str(error)[:300]}; {fix}") from error
    if not records:
        raise ValueError(f"Hugging Face dataset {dataset_id!r} (split {split!r}) has no rows; expected {expected}")
    return [Row(r, f"{dataset_id} ({split}) row {i}") for i, r in enumerate(records, start=1)]


def _missing(row: Row, name: str, expected: str, option: str | None) -> ValueError:
    fields = ", ".join(repr(k) for k in row.data) or "none"
    hint = "; a CSV's first line is its header: it must name the columns" if row.csv_header else ""
    hint += f"; choose another field with {option}" if option else ""
    return ValueError(f"{row.where}: no field {name!r} (its fields: {fields}); expected {expected}{hint}")


def _is_missing_value(value: Any) -> bool:
    """None (an empty CSV cell) or NaN (an empty parquet cell)."""
    return value is None or isinstance(value, float) and math.isnan(value)


def number_text(value: numbers.Real) -> str:
    """A JSON number as answer text: ``8`` for 8 and 8.0, ``0.0000001`` for 1e-07 (no exponent)."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if float(value).is_integer():
        return str(int(value))
    return format(decimal.Decimal(repr(float(value))), "f")


def text_field(row: Row, name: str, expected: str, *, numbers_ok: bool = False, option: str | None = None) -> str:
    """The non-empty text in field ``name`` of ``row``; with ``numbers_ok`` a JSON number is accepted
    and written as text (`number_text`). ``option``: the loader option that picks this field, named
    in the error. Raises ValueError naming the row, the field, what it holds and ``expected``."""
    if name not in row.data:
        raise _missing(row, name, expected, option)
    value = row.data[name]
    if numbers_ok and isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        return number_text(value)
    if _is_missing_value(value) or isinstance(value, str) and not value.strip():
        raise ValueError(f"{row.where}: field {name!r} is empty; expected {expected}")
    if not isinstance(value, str):
        kinds = "text or a number" if numbers_ok else "text"
        raise ValueError(f"{row.where}: field {name!r} holds {type(value).__name__} {str(value)[:60]!r}, not "
                         f"{kinds}; expected {expected}")
    return value


def int_field(row: Row, name: str, expected: str) -> int:
    """The integer in field ``name`` (a JSON integer or text such as "24"); ValueError otherwise."""
    if name not in row.data:
        raise _missing(row, name, expected, None)
    value = row.data[name]
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"{row.where}: field {name!r} holds {str(value)[:60]!r}, not an integer; expected {expected}")
