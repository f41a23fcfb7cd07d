"""Entry-point spec of the CSV logger."""

from attrs import define

from rlblocks.plugins import LoggerSpec


@define(kw_only=True)
class CsvConfig:
    """Options of the CSV logger."""

    jsonl: bool = True
    """Also append every record to metrics.jsonl."""


SPEC = LoggerSpec(
    name="csv",
    summary="One CSV file per namespace plus metrics.jsonl.",
    impl="rlblocks_logger_csv.logger:CsvLogger",
    config=CsvConfig,
)
